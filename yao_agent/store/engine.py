"""Open the store: the URL the operator gave → a database tuned for it, its schema migrated.

Every statement of the store runs in a transaction of `Database` (`read_tx`/`write_tx`), on the
driver's own connection (tx.py says how statements are built and run). SQLAlchemy provides the
connection pool, the SQL (compiled once per statement) and, through Alembic, the migrations.
Measured here, the asyncio engine cost six times the CPU for the same statements (each of its
statements is several thread hand-offs), and SQLAlchemy's own transaction machinery more than the
work of a run's statements: so neither is on the way.

SQLite runs in WAL mode and takes its write lock at the start of a write transaction
(`BEGIN IMMEDIATE`, issued in `begin` alone): with Python's default sqlite3 handling a
read-modify-write silently loses updates under concurrency. PostgreSQL uses psycopg 3; its rows are
locked where a transaction reads what it then writes (`SELECT ... FOR UPDATE`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from yao_agent.base.aio import wait_despite_cancel
from yao_agent.dsl.envvars import resolve_env
from yao_agent.errors import UsageError
from yao_agent.store.tx import Tx

HEAD = "0018"  # the newest migration; a test keeps it in step with migrations/versions
T = TypeVar("T")
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
_MIGRATION_LOCK = 728_469_001  # PostgreSQL advisory lock id serialising concurrent migrations
log = logging.getLogger("yao_agent.store")


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


def begin(connection: Any, dialect: str, *, write: bool) -> None:
    """Open a transaction on a driver connection: on SQLite a writing one takes the write lock now
    (so it cannot fail half-way for want of it); psycopg opens one with the first statement (its own
    round trip, and the COMMIT another). A read on PostgreSQL opens none: its statements run in
    autocommit, each under its own snapshot, which is what READ COMMITTED (the store's isolation:
    `connect`) gives the statements of a transaction too, two round trips sooner."""
    if dialect == "sqlite":
        connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    else:
        connection.autocommit = not write


class Database:
    """A database driven from asyncio: each `read_tx`/`write_tx` is one whole transaction.

    PostgreSQL transactions run on worker threads (they wait on the network and on row locks).
    SQLite ones run inline, on the event loop's thread, on a connection of the loop's own: a local
    transaction takes tens of microseconds, less than the trip to a thread and back, and since an
    inline transaction never awaits, two of them never overlap. Only another process can then hold
    the file's write lock; an inline transaction that finds it held is not waited for on the loop
    (that connection's busy timeout is 0) but run again on a worker thread, whose connection waits
    for the lock as long as its busy timeout allows.

    The work is handed a `Tx` and must not await: it is the transaction's whole body. A write
    completes even if the task awaiting it is cancelled meanwhile. The work may run twice, the first
    run rolled back: on SQLite when another process held the lock, on PostgreSQL when the server had
    closed the pooled connection before its first statement (connections are not checked before each
    transaction: that is a round trip each, 8 of a plain request's 44). A connection lost later, or a
    commit that fails, is never run again: the error is the caller's.
    """

    def __init__(self, engine: Engine, workers: int, *, inline: str | None = None) -> None:
        self.engine = engine  # its pool serves the worker threads; migrations use it too
        self.dialect = engine.dialect.name
        self.inline = inline  # the SQLite file the loop's connection opens; None: every transaction on a thread
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="yao-store")
        self._local = threading.local()  # the loop thread's own sqlite3 connection (one per thread)
        self._inline_connections: list[sqlite3.Connection] = []
        self._closed = False  # disposed: a connection a transaction still under way gives back is closed
        self._giving_back = threading.Lock()  # a connection goes back to the pool wholly before or after `dispose`

    async def read_tx(self, work: Callable[[Tx], T]) -> T:
        return await self._run(work, write=False)

    async def write_tx(self, work: Callable[[Tx], T]) -> T:
        return await self._run(work, write=True)

    async def _run(self, work: Callable[[Tx], T], *, write: bool) -> T:
        if self.inline is not None:
            try:
                return self._transaction(self._inline_connection(), work, write)
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._pooled, work, write)

    def _pooled(self, work: Callable[[Tx], T], write: bool) -> T:
        try:
            return self._pooled_once(work, write)
        except _Dropped as dropped:  # nothing was committed: the same transaction once more, on a new connection
            log.warning("the server closed the store's connection; the transaction runs again: %s", dropped.error)
        return self._pooled_once(work, write, again=True)

    def _pooled_once(self, work: Callable[[Tx], T], write: bool, *, again: bool = False) -> T:
        """One transaction on a pooled connection, not checked first (that is a round trip per transaction): a
        connection the server closed meanwhile fails it before its commit, raised as `_Dropped` the first time."""
        connection = self.engine.raw_connection()
        driver: Any = connection.driver_connection
        begun: list[Tx] = []

        def tracked(tx: Tx) -> T:
            begun.append(tx)
            return work(tx)

        tracked.__wrapped__ = work  # pyright: ignore[reportFunctionMemberAccess]  (what it runs, for whoever counts)
        try:
            try:
                result = self._body(driver, tracked, write)
            except Exception as exc:
                # Only a connection found dead at the first statement: the work has done nothing yet that a
                # second run could do twice (what the ping before each transaction used to catch).
                if _closed_under(driver) and not again and not (begun and begun[0].ran):
                    raise _Dropped(exc) from exc  # the server rolled back what it had of it
                raise
            try:
                driver.commit()
            except BaseException:  # it may have committed before the connection went: never run again
                _rollback(driver)
                raise
            return result
        finally:
            self._give_back(connection)

    def _give_back(self, connection: Any) -> None:
        driver: Any = connection.driver_connection
        gone = _closed_under(driver)
        kept = self.dialect != "postgresql" or _transactional_again(driver)
        if gone:
            # Every connection of the pool opened before now goes too (recycled when next checked out), as
            # SQLAlchemy does on a disconnect: a server that restarted closed them all.
            self.engine.pool._invalidate(connection, _checkin=False)  # pyright: ignore[reportPrivateUsage]
        with self._giving_back:
            if self._closed or gone or not kept:  # disposed meanwhile (nobody would ever close it), or dead
                connection.invalidate()  # (closes the driver's connection)
            else:
                connection.close()  # back to the pool

    def _transaction(self, connection: Any, work: Callable[[Tx], T], write: bool) -> T:
        result = self._body(connection, work, write)
        try:
            connection.commit()
        except BaseException:
            _rollback(connection)
            raise
        return result

    def _body(self, connection: Any, work: Callable[[Tx], T], write: bool) -> T:
        """A transaction up to its commit: begun, its work done (rolled back if that fails)."""
        begin(connection, self.dialect, write=write)
        try:
            return work(Tx(connection.cursor(), self.dialect))
        except BaseException:
            _rollback(connection)
            raise

    def _inline_connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            assert self.inline is not None
            conn = sqlite3.connect(self.inline, timeout=0, isolation_level=None, check_same_thread=False)
            _set_pragmas(conn, busy_timeout_ms=0)
            self._local.conn = conn
            self._inline_connections.append(conn)
        return conn

    async def dispose(self) -> None:
        """Close every connection: the pool's now, and the one a transaction still under way holds (on its
        thread: a task nobody waited for, or one cancelled) when that transaction ends. Given back to a
        disposed pool, that connection would stay open until the garbage collector found it, which psycopg
        reports with a ResourceWarning wherever that happens to be."""
        for conn in self._inline_connections:
            conn.close()
        self._inline_connections.clear()
        await asyncio.get_running_loop().run_in_executor(self.executor, self._dispose_pool)
        self.executor.shutdown(wait=False)

    def _dispose_pool(self) -> None:
        with self._giving_back:
            self._closed = True
            self.engine.dispose()


def _transactional_again(driver: Any) -> bool:
    """A read's connection back out of autocommit (`begin`): SQLAlchemy's own uses of a pooled connection
    (migrations) expect transactions. False when it cannot be (not idle, or gone): never handed out again."""
    if not driver.autocommit:
        return True
    try:
        driver.autocommit = False
    except Exception:
        return False
    return True


class _Dropped(Exception):
    """A transaction failed, before its commit, on a connection the server had closed: nothing of it was kept."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _closed_under(connection: Any) -> bool:
    """Whether the driver's connection was lost (psycopg's `broken`: closed by the server or the network)."""
    return bool(getattr(connection, "broken", False))


def _rollback(connection: Any) -> None:
    """Roll back, unless the connection is gone (the server rolled back whatever it had of the transaction)."""
    if not _closed_under(connection):
        connection.rollback()


def _locked(exc: BaseException) -> bool:
    """SQLite's busy or locked: another process holds the lock this transaction needs."""
    return getattr(exc, "sqlite_errorcode", None) in (SQLITE_BUSY, SQLITE_LOCKED)


def connect(url: URL) -> Database:
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "")
        _private_file(path)
        threaded = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=8)
        _tune_sqlite(threaded, busy_timeout_ms=30_000)
        return Database(threaded, workers=4, inline=str(path))
    # READ COMMITTED whatever the server's default: what the store's locking and its reads outside a
    # transaction (`begin`) are written for.
    return Database(create_engine(url, pool_size=10, max_overflow=20, isolation_level="READ COMMITTED"), workers=10)


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
        dbapi_connection.isolation_level = None  # transactions are begun explicitly (see `begin`)
        _set_pragmas(dbapi_connection, busy_timeout_ms)

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:  # pyright: ignore[reportUnusedFunction]
        # SQLAlchemy's own transactions: the migrations'.
        writes = bool(connection.get_execution_options().get("yao_write", False))
        begin(connection.connection.driver_connection, "sqlite", write=writes)


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
    with engine.execution_options(yao_write=True).begin() as conn:
        _upgrade(conn)


def _upgrade(connection: Connection) -> None:
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
    migrating = asyncio.get_running_loop().run_in_executor(db.executor, _migrate, db.engine)
    try:
        await asyncio.shield(migrating)
    except (DBAPIError, OSError) as exc:
        await db.dispose()
        reason = str(getattr(exc, "orig", exc)).splitlines()[0]
        raise UsageError(f"cannot open the store at {shown(url)}: {reason}") from None
    except asyncio.CancelledError:
        # The migration goes on on its thread: its connection must be back in the pool before the pool is
        # disposed, or nothing closes it (psycopg's ResourceWarning when the garbage collector finds it).
        await wait_despite_cancel(asyncio.gather(migrating, return_exceptions=True))
        await db.dispose()
        raise
    except Exception:
        await db.dispose()
        raise
    return db
