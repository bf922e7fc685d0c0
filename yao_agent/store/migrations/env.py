"""Alembic environment: migrations run on a connection the store hands over (see store/migrate.py)."""

from __future__ import annotations

from alembic import context

from yao_agent.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` run by hand: use the URL given with -x url=...
    from sqlalchemy import create_engine

    url = context.get_x_argument(as_dictionary=True).get("url", "sqlite:///.yao/agent.db")
    with create_engine(url).connect() as own:
        context.configure(connection=own, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
