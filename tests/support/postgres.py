"""The local PostgreSQL server the store suite also runs on, when `YAO_AGENT_TEST_PG` names it."""

from __future__ import annotations

import os

PG_URL = os.environ.get("YAO_AGENT_TEST_PG", "")


REQUIRE_SERVICES = os.environ.get("YAO_AGENT_REQUIRE_SERVICES") == "1"


def pg_admin(statement: str) -> None:
    import psycopg

    dsn = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)  # pyright: ignore[reportCallIssue, reportArgumentType]  (psycopg wants a LiteralString)


def pg_admin_truncate(url: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        tables = [t for t in tables if t != "alembic_version"]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")  # pyright: ignore[reportArgumentType]
