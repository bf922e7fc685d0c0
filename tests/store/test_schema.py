"""The schema is declared once: the migrations build exactly schema.py's tables, and every statement the
store runs is built from them and compiles, once, for both databases."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast, get_type_hints

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Column, bindparam, create_engine, select, text

from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import (
    HEAD,
    SqlStore,
    Store,
    audit,
    chats,
    kbsql,
    leases,
    ledger,
    open_engine,
    quota,
    replay,
    runlog,
    sql,
    store_url,
    tokens,
    versions,
)
from yao_agent.store.protocol import RunStore
from yao_agent.store.schema import metadata, steps
from yao_agent.store.tx import Sql

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

VERSIONS = Path(__file__).parents[2] / "yao_agent" / "store" / "migrations" / "versions"


def test_head_is_the_newest_migration() -> None:
    revisions: dict[str, str | None] = {}
    for path in VERSIONS.glob("*.py"):
        source = path.read_text()
        revision = re.search(r'^revision = "(\w+)"', source, re.M)
        down = re.search(r"^down_revision = (None|\"\w+\")", source, re.M)
        assert revision and down, path
        revisions[revision[1]] = down[1].strip('"') if down[1] != "None" else None
    children = {down for down in revisions.values() if down}
    assert [r for r in revisions if r not in children] == [HEAD]  # one line of history, ending at HEAD


def _bare(default: str | None) -> str | None:
    """A server default as text, without the brackets (SQLite), casts (PostgreSQL) and quotes reflection adds."""
    if default is None:
        return None
    text = re.sub(r"::[a-z ]+$", "", default.strip())
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return text.strip("'")


def _same_default(
    _context: Any, _inspected: Any, _declared: Column[Any], found: str | None, _default: Any, rendered: str | None
) -> bool | None:
    """Whether the defaults differ, read alike on both databases (None: Alembic's own comparison)."""
    return _bare(found) != _bare(rendered) if found is not None or rendered is not None else None


def _declared_elsewhere(name: str | None, kind: str, parents: Any) -> bool:
    """False for the knowledge base's full-text index: each database's own (migration 0012 makes it in its
    SQL: SQLite's FTS5 table `kb_fts` and the shadow tables FTS5 keeps, PostgreSQL's generated `fts` column
    of kb_chunks and its GIN index), so schema.py does not declare it and the store's statements reach it
    by name (store/kbsql.py)."""
    if kind == "table":
        return not (name or "").startswith("kb_fts")
    if kind == "column":
        return not (name == "fts" and parents.get("table_name") == "kb_chunks")
    return name != "ix_kb_chunks_fts"


async def test_the_migrated_schema_is_schema_py(store: SqlStore) -> None:
    """Tables, columns, their types, nullability and defaults, indexes, keys: what the migrations made is
    what schema.py declares — the tables every statement of the store is built from."""
    with store.db.engine.connect() as conn:
        options = {"compare_type": True, "compare_server_default": _same_default, "include_name": _declared_elsewhere}
        assert compare_metadata(MigrationContext.configure(conn, opts=options), metadata) == []


def statements() -> Iterator[tuple[str, Sql]]:
    for module in (audit, chats, kbsql, leases, ledger, quota, replay, runlog, sql, tokens, versions):
        for name, value in vars(module).items():
            if isinstance(value, Sql):
                yield f"{module.__name__}.{name}", value
            elif isinstance(value, dict):  # statements kept by what they are for (tokens.LISTS)
                kept = {k: v for k, v in cast(dict[object, object], value).items() if isinstance(v, Sql)}
                yield from ((f"{module.__name__}.{name}[{k}]", v) for k, v in kept.items())
            elif isinstance(value, tuple):
                kept = [v for v in cast(tuple[object, ...], value) if isinstance(v, Sql)]
                yield from ((f"{module.__name__}.{name}[{i}]", v) for i, v in enumerate(kept))


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_every_statement_compiles_once_to_one_text(dialect: str) -> None:
    found = dict(statements())
    assert {"yao_agent.store.runlog.INSERT_MESSAGE", "yao_agent.store.chats.ERASE_CHAT[0]"} <= found.keys()
    for name, statement in found.items():
        if dialect not in statement.statements:
            continue  # the lease's claim: PostgreSQL only
        compiled = statement.on(dialect)
        assert statement.on(dialect) is compiled, name  # compiled once, then kept
        assert compiled.text.split()[0] in ("SELECT", "INSERT", "UPDATE", "DELETE"), name


def test_inserts_take_the_columns_of_the_schema() -> None:
    """The run log's rows are the tables' columns, so a column added to schema.py is written or fails loudly."""
    compiled = runlog.INSERT_STEP.on("sqlite")
    assert compiled.text.startswith(f"INSERT INTO steps ({', '.join(c.name for c in steps.c)})")
    assert compiled.json_params == ("input", "output", "error")


def test_an_in_of_values_is_refused_in_a_kept_statement() -> None:
    """It would compile to a different text per execution; a statement run once may have one."""
    with pytest.raises(ValueError, match="no IN of values"):
        Sql(select(steps.c.id).where(steps.c.status.in_(("completed", "failed")))).on("sqlite")
    assert Sql(select(steps.c.id).where(steps.c.run_id == bindparam("run_id"))).on("sqlite")


def test_the_pipeline_hands_the_store_data_never_code() -> None:
    """Nothing the pipeline passes runs inside a store transaction. (`recover_interrupted` asks `is_dead`
    between its transactions: the one callable, and its owner is the process, not a run.)"""
    store_methods = {n: m for n, m in inspect.getmembers(RunStore) if not n.startswith("_") and callable(m)}
    assert {"load_and_start", "start_run", "finish_run", "check_chat"} <= store_methods.keys()
    for name, method in store_methods.items():
        hints = get_type_hints(method)
        called = [p for p, hint in hints.items() if p != "return" and _callable(hint)]
        assert called == ([] if name != "recover_interrupted" else ["is_dead"]), name


def _callable(hint: Any) -> bool:
    return "Callable" in repr(hint) or hint is Callable


def test_the_sql_store_is_a_store() -> None:
    def implements(store: SqlStore) -> Store:
        return store  # pyright checks this: SqlStore has every method of Store, with its signature

    assert implements
    missing = [n for n in dir(Store) if not n.startswith("_") and not hasattr(SqlStore, n) and n != "db"]
    assert missing == []


async def test_both_leases_are_leases(store: SqlStore) -> None:
    """The service holds a `Lease` and never asks which: the one-process lease answers every question as a
    store no other process shares would (nobody else holds, cancels or takes appends)."""

    def implements(local: leases.LocalLease, shared: leases.PgLease) -> list[leases.Lease]:
        return [local, shared]  # pyright checks this: each has every member of Lease, with its signature

    assert implements
    lease = leases.lease_for(store.db, "me", lambda _chat, _at: 0, clock=lambda: 42.0)
    assert isinstance(lease, leases.PgLease if store.db.dialect == "postgresql" else leases.LocalLease)
    if isinstance(lease, leases.LocalLease):
        await lease.acquire("c1", "r1")
        assert (lease.now(), lease.busy_elsewhere("c1"), await lease.held_elsewhere("c1")) == (42.0, False, False)
        assert (await lease.cancel_counted("c1"), lease.sweep_s) == (0, None)
        assert await lease.append_elsewhere("c1", Identity("alice"), [{"role": "user", "content": "hi"}]) is None
        await lease.release("c1", "r1")


async def test_tokens_made_before_token_kinds_keep_working_with_an_id_of_their_own(tmp_path: Path) -> None:
    """Migration 0013 on a database holding tokens: each gets a public id of its own, none expires or is an
    operator's, and each still names its identity."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    old = [("a" * 64, "ya_oldtoken1", "bob", "acme", True), ("b" * 64, "ya_oldtoken2", "alice", "", False)]
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(VERSIONS.parent))
        config.attributes["connection"] = conn
        command.upgrade(config, "0012")
        for hashed, prefix, user, team, admin in old:
            conn.execute(text("INSERT INTO tokens (hash, prefix, user_id, team_id, label, created_at, admin) "
                              "VALUES (:h, :p, :u, :t, '', 1.0, :a)"), {"h": hashed, "p": prefix, "u": user, "t": team,
                                                                       "a": admin})  # fmt: skip
    engine.dispose()
    store = SqlStore(await open_engine(store_url(url, tmp_path)))
    try:
        found = await store.list_tokens(OPERATOR)
        kinds = {(t.user_id, t.team_id, t.kind, t.expires_at) for t in found}
        assert kinds == {("bob", "acme", "admin", None), ("alice", None, "member", None)}
        assert len({t.id for t in found}) == 2 and all(t.id.startswith("tok_") for t in found)
        owner = await store.db.read_tx(lambda tx: tx.all(tokens.SELECT_OWNER, {"hash": "a" * 64}))
        assert (owner[0].user_id, owner[0].admin, owner[0].operator) == ("bob", True, False)
    finally:
        await store.aclose()


async def test_messages_stored_before_answer_versions_are_all_current(tmp_path: Path) -> None:
    """Migration 0017 on a database holding a chat: every message it had is current (none replaced), read
    alike by the history a run loads, by the chat's readers, and with its versions."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(VERSIONS.parent))
        config.attributes["connection"] = conn
        command.upgrade(config, "0016")
        conn.execute(text("INSERT INTO chats (id, user_id, team_id, assistant_id, created_at, updated_at, "
                          "message_count) VALUES ('c1', 'alice', '', 'chat', 1.0, 1.0, 2)"))  # fmt: skip
        for seq, (role, said) in enumerate([("user", '"hi"'), ("assistant", '"hello"')], 1):
            conn.execute(text("INSERT INTO messages (id, chat_id, seq, run_id, role, content, status, created_at) "
                              "VALUES (:id, 'c1', :seq, 'r1', :role, :content, 'completed', 1.0)"),
                         {"id": f"m{seq}", "seq": seq, "role": role, "content": said})  # fmt: skip
    engine.dispose()
    store = SqlStore(await open_engine(store_url(url, tmp_path)))
    try:
        alice = Identity("alice")
        current = await store.history(alice, "c1")
        assert [(m.id, m.content, m.replaced_by) for m in current] == [("m1", "hi", None), ("m2", "hello", None)]
        assert await store.history(alice, "c1", versions=True) == current
        loaded = await store.db.read_tx(lambda tx: runlog.context_of(tx, "c1", 20))
        assert [m.id for m in loaded] == ["m1", "m2"]
    finally:
        await store.aclose()
