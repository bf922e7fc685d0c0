"""Open the store: the URL the operator gave → an async engine tuned for its database, schema migrated.

SQLite runs in WAL mode and takes its write lock at the start of a write transaction
(`BEGIN IMMEDIATE`): with Python's default sqlite3 handling a read-modify-write silently loses
updates under concurrency. PostgreSQL uses psycopg 3 for both the async engine and migrations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from yao_agent.dsl.envvars import resolve_env
from yao_agent.errors import UsageError

HEAD = "0003"  # the newest migration; a test keeps it in step with migrations/versions
WRITE = {"yao_write": True}  # execution option: this transaction writes (SQLite: BEGIN IMMEDIATE)
_MIGRATION_LOCK = 728_469_001  # PostgreSQL advisory lock id serialising concurrent migrations


def store_url(raw: str, app_root: Path, environ: Mapping[str, str] | None = None) -> URL:
    """The async SQLAlchemy URL for what the operator wrote; relative SQLite paths are under the app."""
    text_url = resolve_env(raw, "store URL (app.yml store, --db or YAO_AGENT_DB)", environ)
    try:
        url = make_url(text_url)
    except ArgumentError:
        raise UsageError("the store URL is not a SQLAlchemy URL (expected e.g. sqlite:///.yao/agent.db)") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:"):
            raise UsageError("the store needs a file (expected sqlite:///path/to/agent.db, not an in-memory database)")
        path = Path(database)
        path = path if path.is_absolute() else app_root / path
        return url.set(drivername="sqlite+aiosqlite", database=str(path))
    if backend in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    raise UsageError(f"unsupported store database '{backend}' (expected sqlite or postgresql)")


def shown(url: URL) -> str:
    """A URL fit for messages: never the password."""
    return url.render_as_string(hide_password=True)


def create_engine(url: URL) -> AsyncEngine:
    if url.get_backend_name() == "sqlite":
        Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, connect_args={"timeout": 30})
        _tune_sqlite(engine)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:  # pyright: ignore[reportUnusedFunction]
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _begin)
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=30000"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Any) -> None:  # pyright: ignore[reportUnusedFunction]
        writes = connection.get_execution_options().get("yao_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


async def current_revision(engine: AsyncEngine) -> str | None:
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(text("SELECT version_num FROM alembic_version"))).first()
    except DBAPIError:
        return None  # no alembic_version table yet: a new database
    return str(row[0]) if row else None


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to HEAD. A database already there costs one query (no alembic import)."""
    if await current_revision(engine) == HEAD:
        return
    async with engine.connect() as conn:
        conn = await conn.execution_options(**WRITE)
        await conn.run_sync(_upgrade)
        await conn.commit()


def _upgrade(connection: Any) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    if connection.dialect.name == "postgresql":
        connection.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})"))
    command.upgrade(config, "head")


async def open_engine(url: URL) -> AsyncEngine:
    engine = create_engine(url)
    try:
        await migrate(engine)
    except (DBAPIError, OSError) as exc:
        await engine.dispose()
        reason = str(getattr(exc, "orig", exc)).splitlines()[0]
        raise UsageError(f"cannot open the store at {shown(url)}: {reason}") from None
    except asyncio.CancelledError:
        await engine.dispose()
        raise
    return engine
