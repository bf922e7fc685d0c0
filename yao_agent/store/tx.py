"""How the store runs SQL: statements built from the schema's tables, compiled once, run on the driver.

Every statement the store executes is a `Sql`: a SQLAlchemy Core statement over the tables of
schema.py (so columns and their types are declared there alone), compiled to the SQL text of each
database the first time it runs there, then kept. Compiling a Core statement on every execution
measured three times the database's own work for a plain run, so nothing is compiled twice.

A `Tx` is one open transaction (see `Database.read_tx`/`write_tx`): it runs a `Sql` on the DB-API
cursor with plain Python values. The column types decide the conversions, on both databases alike:
JSON columns are written as JSON text (None is SQL NULL) and read back as values (psycopg parses
JSON itself; SQLite hands back the text), SQLite's 0/1 booleans are read back as bools.
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import JSON, BindParameter, Boolean, ColumnElement
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.selectable import ReturnsRows
from sqlalchemy.types import TypeEngine

_DIALECTS = ("sqlite", "postgresql")
_DRIVERS: dict[str, Dialect] = {}  # made on first use: a store on SQLite never imports PostgreSQL's (spelled.py)


def _driver(dialect: str) -> Dialect:
    """The SQL each database's driver takes: sqlite3 `:name`, psycopg `%(name)s` placeholders."""
    found = _DRIVERS.get(dialect)
    if found is None:
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import pysqlite

            found = pysqlite.dialect(paramstyle="named")
        elif dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import psycopg

            found = psycopg.dialect()
        else:
            raise KeyError(dialect)
        _DRIVERS[dialect] = found
    return found


_to_json = json.JSONEncoder().encode  # json.dumps with its defaults, less the call's own work (hot path)
Params = Mapping[str, Any]


class Cursor(Protocol):
    """What the store uses of a DB-API cursor (sqlite3's and psycopg's alike)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...

    def fetchall(self) -> list[Any]: ...


# How SQLite's value of a column (`{}`) becomes the column's value (psycopg converts both itself).
_SQLITE_READS = {JSON: "(loads(v) if type(v := {}) is str else v)", Boolean: "(None if (v := {}) is None else bool(v))"}


def _readers(
    columns: Sequence[ColumnElement[Any]], dialect: str
) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any]]:
    """A driver's row → a tuple of the columns' values, and → the same as a named tuple.

    The first is written out per statement (as `namedtuple` writes its class): a row of history is
    read for every message of every run, and a loop over its columns measured more than the driver's
    own work. Without a value to read, there is none: the driver's row is the tuple.
    """
    values: list[str] = []
    for index, column in enumerate(columns):
        kind: TypeEngine[Any] = column.type
        read = next((r for t, r in _SQLITE_READS.items() if isinstance(kind, t)), "{}") if dialect == "sqlite" else "{}"
        values.append(read.format(f"r[{index}]"))
    names: list[str] = [str(c.key) for c in columns]
    row_type: Any = namedtuple("Row", names, rename=True)  # pyright: ignore[reportUntypedNamedTuple]
    if all(value == f"r[{index}]" for index, value in enumerate(values)):
        return None, row_type._make
    scope: dict[str, Any] = {"loads": json.loads}
    exec(f"def plain(r):\n    return ({''.join(v + ', ' for v in values)})", scope)  # our own text, of positions
    plain: Callable[[Any], Any] = scope["plain"]
    return plain, lambda r: row_type._make(plain(r))


class Compiled:
    """One statement as one database's driver takes it, with what its values need on the way."""

    __slots__ = ("defaults", "json_params", "named", "plain", "text")

    def __init__(self, statement: ClauseElement, dialect: str, columns: Sequence[str], *, once: bool) -> None:
        # A statement run once may have an IN of values: its values are then written into the text.
        compiled = statement.compile(dialect=_driver(dialect), column_keys=list(columns) or None,
                                     compile_kwargs={"render_postcompile": once})  # fmt: skip
        assert isinstance(compiled, SQLCompiler)
        self.text = str(compiled)
        if "POSTCOMPILE" in self.text:  # an IN of values, expanded per execution: not a fixed text
            raise ValueError(f"a store statement must compile to one text (no IN of values): {self.text}")
        binds: dict[BindParameter[Any], str] = compiled.bind_names  # parameter → its name in the text
        required = {name for bind, name in binds.items() if bind.required}
        # Values fixed when the statement was built (literals in it, SQLite's `OFFSET 0`).
        self.defaults: dict[str, Any] = {name: v for name, v in compiled.params.items() if name not in required}
        self.json_params = tuple(name for bind, name in binds.items() if isinstance(bind.type, JSON))
        returned: list[ColumnElement[Any]] = (
            list(statement.exported_columns) if isinstance(statement, ReturnsRows) else []
        )
        self.plain, self.named = _readers(returned, dialect)

    def params(self, given: Params | None) -> Params:
        """The driver's parameters: the statement's own values, then the given ones, JSON as text.

        A given dict is taken over (its JSON values are replaced by their text): the store's callers
        build one per execution, and copying each row of a flush measured more than encoding it.
        """
        json_params, defaults = self.json_params, self.defaults
        if not json_params:
            return ({**defaults, **given} if given else defaults) if defaults else (given or {})
        out = given if isinstance(given, dict) and not defaults else {**defaults, **(given or {})}
        for name in json_params:
            value = out[name]
            if value is not None:
                out[name] = _to_json(value)
        return out


class Sql:
    """A statement of the store: a Core statement (or one per database), compiled once per database.

    `columns` names the columns an INSERT or UPDATE sets (all of them for an INSERT without it);
    their parameters are named after them.
    """

    __slots__ = ("columns", "compiled", "once", "statements")

    def __init__(
        self, statement: ClauseElement | Mapping[str, ClauseElement], *, columns: Sequence[str] = (), once: bool = False
    ) -> None:
        self.statements: Mapping[str, ClauseElement] = (
            statement if isinstance(statement, Mapping) else dict.fromkeys(_DIALECTS, statement)
        )
        self.columns = tuple(columns)
        self.once = once  # built for one execution (`Tx` given a bare statement)
        self.compiled = _PerDialect(self)  # `compiled[dialect]`: compiled on first use there, then kept

    def on(self, dialect: str) -> Compiled:
        return self.compiled[dialect]


class _PerDialect(dict[str, Compiled]):
    __slots__ = ("sql",)

    def __init__(self, sql: Sql) -> None:
        super().__init__()
        self.sql = sql

    def __missing__(self, dialect: str) -> Compiled:
        sql = self.sql
        found = self[dialect] = Compiled(sql.statements[dialect], dialect, sql.columns, once=sql.once)
        return found


class Tx:
    """One open transaction: statements run on its driver cursor. Rows come back as named tuples.

    The store's statements are `Sql` constants, compiled once; a bare Core statement is compiled on
    every call (for a test's or a one-off look at the tables).
    """

    __slots__ = ("cursor", "dialect", "ran")

    def __init__(self, cursor: Cursor, dialect: str) -> None:
        self.cursor = cursor
        self.dialect = dialect
        self.ran = 0  # statements the server answered: a transaction that lost its connection before any is run again

    def _run(self, compiled: Compiled, params: Params | None) -> None:
        self.cursor.execute(compiled.text, compiled.params(params))
        self.ran += 1

    def _compiled(self, sql: Sql | ClauseElement) -> Compiled:
        return (sql if isinstance(sql, Sql) else Sql(sql, once=True)).compiled[self.dialect]

    def execute(self, sql: Sql | ClauseElement, params: Params | None = None) -> int:
        """Run a statement; how many rows it changed. A params dict is the statement's from then on
        (see `Compiled.params`): build it in the transaction's work, which may run twice (engine.py)."""
        compiled = self._compiled(sql)
        self._run(compiled, params)
        return self.cursor.rowcount

    def executemany(self, sql: Sql | ClauseElement, rows: Sequence[Params]) -> None:
        compiled = self._compiled(sql)
        self.cursor.executemany(compiled.text, map(compiled.params, rows))
        self.ran += 1

    def all(self, sql: Sql | ClauseElement, params: Params | None = None) -> list[Any]:
        """The rows, as named tuples."""
        compiled = self._compiled(sql)
        self._run(compiled, params)
        return list(map(compiled.named, self.cursor.fetchall()))

    def tuples(self, sql: Sql | ClauseElement, params: Params | None = None) -> list[tuple[Any, ...]]:
        """The rows, as plain tuples (the columns in the statement's order): for the rows every run reads."""
        compiled = self._compiled(sql)
        self._run(compiled, params)
        found = self.cursor.fetchall()
        return found if compiled.plain is None else list(map(compiled.plain, found))

    def first(self, sql: Sql | ClauseElement, params: Params | None = None) -> Any | None:
        """The first row as a named tuple, None without one."""
        compiled = self._compiled(sql)
        self._run(compiled, params)
        found = self.cursor.fetchall()
        return compiled.named(found[0]) if found else None

    def scalar(self, sql: Sql | ClauseElement, params: Params | None = None) -> Any:
        """The first column of the first row; None without a row."""
        compiled = self._compiled(sql)
        self._run(compiled, params)
        found = self.cursor.fetchall()
        if not found:
            return None
        return found[0][0] if compiled.plain is None else compiled.plain(found[0])[0]
