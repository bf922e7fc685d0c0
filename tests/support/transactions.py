"""Count what a request costs the store: its transactions, statements and connection checks.

Every statement of the store runs in a `Database` transaction (engine.py), so wrapping the one method
that runs them sees all of them; a pool checkout (PostgreSQL's transactions run on pooled connections)
is counted apart, since with `pool_pre_ping` each one is a round trip of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import event

from yao_agent.store.engine import Database


@dataclass
class Counts:
    """What the store did: transactions (reads, writes), statements, and pool checkouts."""

    reads: int = 0
    writes: int = 0
    statements: int = 0
    checkouts: int = 0
    works: list[str] = field(default_factory=list[str])  # each transaction's work, by its qualified name
    chat_id: str = ""  # the chat of the request counted

    @property
    def transactions(self) -> int:
        return self.reads + self.writes

    begins: int = 0  # PostgreSQL: the BEGINs psycopg sent (before a transaction's first statement)
    commits: int = 0  # PostgreSQL: the COMMITs it is to send (a transaction's work done, one open)

    @property
    def round_trips(self) -> int:
        """PostgreSQL's round trips: the statements, and each BEGIN and COMMIT around them (SQLite has
        none: it is in-process)."""
        return self.statements + self.begins + self.commits


class _Cursor:
    """A driver cursor whose executions are counted (everything else is the cursor's own)."""

    def __init__(self, cursor: Any, counts: Counts) -> None:
        self._cursor, self._counts = cursor, counts

    def execute(self, *args: Any) -> Any:
        self._count()
        return self._cursor.execute(*args)

    def executemany(self, *args: Any) -> Any:
        self._count()
        return self._cursor.executemany(*args)

    def _count(self) -> None:
        self._counts.statements += 1
        driver = self._cursor.connection
        if _opens_a_transaction(driver):
            self._counts.begins += 1  # psycopg sends BEGIN first, a round trip of its own

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _Connection:
    def __init__(self, connection: Any, counts: Counts) -> None:
        self._connection, self._counts = connection, counts

    def cursor(self) -> _Cursor:
        return _Cursor(self._connection.cursor(), self._counts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            super().__setattr__(name, value)
        else:  # (the driver's own settings: `autocommit`)
            setattr(self._connection, name, value)


def _opens_a_transaction(driver: Any) -> bool:
    """Whether a statement on this driver connection is preceded by psycopg's BEGIN."""
    return isinstance(driver, psycopg.Connection) and not driver.autocommit and not _in_transaction(driver)


def _in_transaction(driver: Any) -> bool:
    return isinstance(driver, psycopg.Connection) and driver.info.transaction_status != TransactionStatus.IDLE


def _name(work: Any) -> str:
    """A transaction's work by the name of the function it runs: through PostgreSQL's retry wrapper
    (engine.py keeps the work it wraps as `__wrapped__`) and `functools.partial` alike."""
    while True:
        if hasattr(work, "__wrapped__"):
            work = work.__wrapped__
        elif isinstance(work, partial):
            work = work.func  # pyright: ignore[reportUnknownMemberType]
        else:
            return str(getattr(work, "__qualname__", work))


@contextmanager
def counting(db: Database) -> Generator[Counts]:
    """Count the store's work while the block runs (the counts are read after it, or as it goes)."""
    counts = Counts()
    body: Callable[[Any, Any, bool], Any] = db._body  # pyright: ignore[reportPrivateUsage]

    def counted(connection: Any, work: Any, write: bool) -> Any:
        if write:
            counts.writes += 1
        else:
            counts.reads += 1
        counts.works.append(f"{'write' if write else 'read'} {_name(work)}")
        result = body(_Connection(connection, counts), work, write)
        if _in_transaction(connection):
            counts.commits += 1  # what engine.py sends next
        return result

    def checkout(*_args: Any) -> None:
        counts.checkouts += 1

    db._body = counted  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    event.listen(db.engine.pool, "checkout", checkout)
    try:
        yield counts
    finally:
        event.remove(db.engine.pool, "checkout", checkout)
        del db._body  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
