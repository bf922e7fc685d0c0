"""Statements each database spells its own way, built for a database the first time one runs there.

SQLAlchemy's PostgreSQL dialect is a package whose import brings every PostgreSQL driver's module
and its `pg_catalog` tables: about a quarter of SQLAlchemy's import time, more than all of a first
run's SQL on SQLite, which never uses it. So nothing here imports a dialect before a statement is
compiled for it (tx.py's compiled forms, too, are made per database on first use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from sqlalchemy import Table
from sqlalchemy.sql import ClauseElement

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as LiteInsert

DIALECTS = ("sqlite", "postgresql")


def conflict_insert(dialect: str, table: Table) -> LiteInsert | PgInsert:
    """The database's INSERT into `table`, which can say what a conflicting row does instead."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    from sqlalchemy.dialects.postgresql import insert as postgresql_insert

    return postgresql_insert(table)


class Spelled(Mapping[str, ClauseElement]):
    """`Sql`'s statement per database (`Sql(Spelled(build))`): `build(dialect)` is called the first time
    the statement is compiled for that database, and its statement kept."""

    __slots__ = ("build", "built")

    def __init__(self, build: Callable[[str], ClauseElement], dialects: tuple[str, ...] = DIALECTS) -> None:
        self.build = build
        self.built: dict[str, ClauseElement | None] = dict.fromkeys(dialects)

    def __getitem__(self, dialect: str) -> ClauseElement:
        found = self.built[dialect]  # (a KeyError for a database it is not spelled for, as a dict's)
        if found is None:  # two threads may both build it: the same statement, either kept
            found = self.built[dialect] = self.build(dialect)
        return found

    def __contains__(self, dialect: object) -> bool:  # (without building it, as Mapping's would)
        return dialect in self.built

    def __iter__(self) -> Iterator[str]:
        return iter(self.built)

    def __len__(self) -> int:
        return len(self.built)
