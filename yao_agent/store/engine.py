"""Open the store: the URL the operator gave → a database tuned for it, its schema migrated.

The store talks to the database with SQLAlchemy's synchronous engine, each store operation one
whole transaction — on a worker thread for PostgreSQL, inline for SQLite (see `Database`): measured
here, the asyncio engine cost six times the CPU for the same statements, since each of its
statements is several thread hand-offs.

SQLite runs in WAL mode and takes its write lock at the start of a write transaction
(`BEGIN IMMEDIATE`): with Python's default sqlite3 handling a read-modify-write silently loses
updates under concurrency. PostgreSQL uses psycopg 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.pool import SingletonThreadPool

from yao_agent.dsl.envvars import resolve_env
from yao_agent.errors import UsageError

HEAD = "0004"  # the newest migration; a test keeps it in step with migrations/versions
T = TypeVar("T")
WRITE = {"yao_write": True}  # execution option: this transaction writes (SQLite: BEGIN IMMEDIATE)
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
_MIGRATION_LOCK = 728_469_001  # PostgreSQL advisory lock id serialising concurrent migrations


def store_url(raw: str, app_root: Path, environ: Mapping[str, str] | None = None) -> URL:
    """The SQLAlchemy URL for what the operator wrote; relative SQLite paths are under the app."""
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
        return url.set(drivername="sqlite+pysqlite", database=str(path))
    if backend in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    raise UsageError(f"unsupported store database '{backend}' (expected sqlite or postgresql)")


def shown(url: URL) -> str:
    """A URL fit for messages: never the password."""
    return url.render_as_string(hide_password=True)


class Dialect:
    """SQL written once, with `:name` placeholders, as the driver of one dialect takes it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def sql(self, statement: str, *, lock: bool = False) -> str:
        return _translated(statement, self.name, lock)

    def json_value(self, value: Any) -> Any:
        """A JSON column's value: SQLite gives back the text written, psycopg has parsed it."""
        return json.loads(value) if self.name == "sqlite" and isinstance(value, str) else value


@cache
def _translated(statement: str, dialect: str, lock: bool) -> str:
    if dialect != "postgresql":
        return statement  # sqlite3 takes `:name` placeholders as they are
    return re.sub(r":(\w+)", r"%(\1)s", statement) + (" FOR UPDATE" if lock else "")


class Tx:
    """An open transaction at the driver's level: one DB-API cursor, and its dialect."""

    __slots__ = ("cursor", "dialect")

    def __init__(self, connection: Any, dialect: str) -> None:
        self.cursor: Any = connection.cursor()
        self.dialect = Dialect(dialect)

    @classmethod
    def of(cls, conn: Connection) -> Tx:
        """The driver's side of a transaction SQLAlchemy opened."""
        return cls(conn.connection.driver_connection, conn.dialect.name)


class Database:
    """A database driven from asyncio: each `read`/`write` is one whole transaction.

    PostgreSQL transactions run on worker threads (they wait on the network and on row locks).
    SQLite ones run inline, on the event loop's thread: a local transaction takes tens of
    microseconds, less than the trip to a thread and back, and since an inline transaction never
    awaits, two of them never overlap. Only another process can then hold the file's write lock;
    an inline transaction that finds it held is not waited for on the loop but run again on a
    worker thread, which waits for the lock as long as the busy timeout allows.

    `read`/`write` hand the work a SQLAlchemy connection; `read_tx`/`write_tx` hand it the
    driver's cursor (`Tx`), and inline on SQLite they skip SQLAlchemy altogether: the statements
    every run executes are written as SQL (runlog.py), and SQLAlchemy's own transaction machinery
    measured more than their work.
    """

    def __init__(self, engine: Engine, workers: int, *, inline: Engine | None = None) -> None:
        self.engine = engine
        self.writer = engine.execution_options(**WRITE)
        self.inline = inline
        self.inline_writer = inline.execution_options(**WRITE) if inline is not None else None
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="yao-store")
        self._raw = threading.local()  # the loop thread's own sqlite3 connection (one per thread)
        self._raws: list[sqlite3.Connection] = []

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def read(self, work: Callable[[Connection], T]) -> T:
        return await self._run(work, self.inline, self.engine, _read)

    async def write(self, work: Callable[[Connection], T]) -> T:
        """One write transaction; it completes even if the awaiting task is cancelled meanwhile."""
        return await self._run(work, self.inline_writer, self.writer, _write)

    async def read_tx(self, work: Callable[[Tx], T]) -> T:
        return await self._run_tx(work, write=False)

    async def write_tx(self, work: Callable[[Tx], T]) -> T:
        """One write transaction at the driver's level; it completes even if the caller is cancelled."""
        return await self._run_tx(work, write=True)

    async def _run(
        self,
        work: Callable[[Connection], T],
        inline: Engine | None,
        threaded: Engine,
        transaction: Callable[[Engine, Callable[[Connection], T]], T],
    ) -> T:
        if inline is not None:
            try:
                return transaction(inline, work)
            except OperationalError as exc:
                if not _locked(exc.orig):
                    raise
        return await asyncio.get_running_loop().run_in_executor(self.executor, transaction, threaded, work)

    async def _run_tx(self, work: Callable[[Tx], T], *, write: bool) -> T:
        if self.inline is not None:
            try:
                return self._inline_tx(work, write)
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
        engine, transaction = (self.writer, _write) if write else (self.engine, _read)
        return await self._run(lambda conn: work(Tx.of(conn)), None, engine, transaction)

    def _inline_tx(self, work: Callable[[Tx], T], write: bool) -> T:
        conn = self._raw_connection()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = work(Tx(conn, "sqlite"))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _raw_connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._raw, "conn", None)
        if conn is None:
            assert self.inline is not None
            conn = sqlite3.connect(self.inline.url.database or "", timeout=0, isolation_level=None,
                                   check_same_thread=False)  # fmt: skip
            _set_pragmas(conn, busy_timeout_ms=0)
            self._raw.conn = conn
            self._raws.append(conn)
        return conn

    async def dispose(self) -> None:
        for conn in self._raws:
            conn.close()
        self._raws.clear()
        if self.inline is not None:
            self.inline.dispose()
        await asyncio.get_running_loop().run_in_executor(self.executor, self.engine.dispose)
        self.executor.shutdown(wait=False)


def _read(engine: Engine, work: Callable[[Connection], T]) -> T:
    with engine.connect() as conn:
        return work(conn)


def _write(engine: Engine, work: Callable[[Connection], T]) -> T:
    with engine.begin() as conn:
        return work(conn)


def _locked(exc: BaseException | None) -> bool:
    """SQLite's busy or locked: another process holds the lock this transaction needs."""
    return getattr(exc, "sqlite_errorcode", None) in (SQLITE_BUSY, SQLITE_LOCKED)


def connect(url: URL) -> Database:
    if url.get_backend_name() == "sqlite":
        _private_file(Path(url.database or ""))
        threaded = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=8)
        _tune_sqlite(threaded, busy_timeout_ms=30_000)
        # The loop's own connection never waits for a lock: a held lock sends the work to a thread.
        inline = create_engine(
            url, connect_args={"timeout": 0, "check_same_thread": False}, poolclass=SingletonThreadPool, pool_size=1
        )
        _tune_sqlite(inline, busy_timeout_ms=0)
        return Database(threaded, workers=4, inline=inline)
    return Database(create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True), workers=10)


def _private_file(path: Path) -> None:
    """Create the database file readable by its owner alone (its folder too, if new): it holds every chat.
    SQLite gives its WAL and shared-memory files the database file's permissions."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _set_pragmas(connection: Any, busy_timeout_ms: int) -> None:
    cursor = connection.cursor()
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", f"busy_timeout={busy_timeout_ms}"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def _tune_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:  # pyright: ignore[reportUnusedFunction]
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _begin)
        _set_pragmas(dbapi_connection, busy_timeout_ms)

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:  # pyright: ignore[reportUnusedFunction]
        writes = connection.get_execution_options().get("yao_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def _current_revision(conn: Connection) -> str | None:
    try:
        row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    except DBAPIError:
        return None  # no alembic_version table yet: a new database
    return str(row[0]) if row else None


def _migrate(engine: Engine) -> None:
    """Bring the schema to HEAD. A database already there costs one query (no alembic import)."""
    with engine.connect() as conn:
        if _current_revision(conn) == HEAD:
            return
    with engine.execution_options(**WRITE).begin() as conn:
        _upgrade(conn)


def _upgrade(connection: Any) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    if connection.dialect.name == "postgresql":
        connection.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})"))
    command.upgrade(config, "head")


async def open_engine(url: URL) -> Database:
    """Connect and migrate; a database that cannot be opened is a usage error naming it (no password)."""
    db = connect(url)
    try:
        await asyncio.get_running_loop().run_in_executor(db.executor, _migrate, db.engine)
    except (DBAPIError, OSError) as exc:
        await db.dispose()
        reason = str(getattr(exc, "orig", exc)).splitlines()[0]
        raise UsageError(f"cannot open the store at {shown(url)}: {reason}") from None
    except asyncio.CancelledError:
        await db.dispose()
        raise
    return db
