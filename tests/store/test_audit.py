"""The audit log in the store, on SQLite and PostgreSQL alike: each change writes one row in its own
transaction (a refused change writes none), rows chain by hash so that an edited, removed or added row is
named by `verify`, secrets never reach a row, and writers in two processes at once keep one chain."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, select, text, update

from tests.support import REPO
from tests.support.clock import Clock
from tests.support.stores import ALICE
from yao_agent.errors import Conflict, Forbidden
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore
from yao_agent.store.audit import CLI, EVERYONE, Actor, AuditSight, actor_of, digest, scrub, sight_for
from yao_agent.store.knowledge import ChunkIn, DocumentRecord, Sight
from yao_agent.store.quota import Own
from yao_agent.store.schema import audit
from yao_agent.store.tx import Tx

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ADMIN = Identity("ada", "acme", admin=True)
BETA_ADMIN = Identity("bea", "beta", admin=True)
ALL_TIME = (0.0, 1e12)


def document(doc_id: str, source: str = "") -> DocumentRecord:
    return DocumentRecord(doc_id, "", f"Title {doc_id}", source, f"h-{doc_id}", {}, 0, 0, 0)


def one_chunk(words: str) -> list[ChunkIn]:
    return [ChunkIn(0, "", words, f"d-{words}", None)]


async def everything(store: SqlStore) -> list[tuple[str, str, str, str | None]]:
    """(action, target, actor kind, actor user) of every row, oldest first."""
    found = await store.audit_rows(EVERYONE, *ALL_TIME, limit=1000)
    return [(r.action, r.target, r.actor.kind, r.actor.user_id) for r in reversed(found)]


async def raw_rows(store: SqlStore) -> list[Any]:
    return await store.db.read_tx(lambda tx: tx.all(select(audit).order_by(audit.c.id)))


async def changes(store: SqlStore) -> None:
    """One change of each kind the store records, by a team admin of acme, a team admin of beta and the CLI."""
    await store.set_role(("team", "acme"), "default", ["demo.echo"], by=actor_of(ADMIN))
    await store.set_role(("team", "acme"), "default", ["demo.echo", "demo.other"], by=actor_of(ADMIN))
    await store.delete_role(("team", "acme"), "default", by=actor_of(ADMIN))
    await store.set_ceilings(("team", "acme"), {"per_month": 100.0})
    await store.set_budget(("team", "acme"), {"per_day": 5.0}, by=actor_of(ADMIN))
    await store.set_budget(("user", "beta/bob"), {"per_day": 1.0}, by=actor_of(BETA_ADMIN))
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_create("acme", "policies", "", by=actor_of(ADMIN))
    acme = Sight("acme", ())
    await store.kb_put(acme, "acme:policies", document("d1", "p.md"), one_chunk("trains first"), by=actor_of(ADMIN))
    await store.kb_put(acme, "acme:policies", document("d2", "p.md"), one_chunk("planes too"), by=actor_of(ADMIN))
    await store.kb_delete(acme, "acme:policies", "d2", by=actor_of(ADMIN))


async def test_each_change_writes_one_row_of_who_did_what(store: SqlStore) -> None:
    await changes(store)
    token = await store.create_token(OPERATOR, Identity("carl", "acme"), label="laptop")
    assert await store.revoke_token(OPERATOR, token) == 1
    [made_token] = [t for t in await store.list_tokens(OPERATOR) if t.user_id == "carl"]
    tid = made_token.id  # a token is named by its public id, nothing of its secret
    assert await everything(store) == [
        ("role.set", "role/team/acme/default", "admin", "ada"),
        ("role.set", "role/team/acme/default", "admin", "ada"),
        ("role.unset", "role/team/acme/default", "admin", "ada"),
        ("budget.ceiling", "budget/team/acme", "cli", None),
        ("budget.set", "budget/team/acme", "admin", "ada"),
        ("budget.set", "budget/user/beta/bob", "admin", "bea"),
        ("kb.collection.declare", "kb/handbook", "operator", None),
        ("kb.collection.create", "kb/acme:policies", "admin", "ada"),
        ("kb.document.add", "kb/acme:policies/d1", "admin", "ada"),
        ("kb.document.add", "kb/acme:policies/d2", "admin", "ada"),
        ("kb.document.delete", "kb/acme:policies/d2", "admin", "ada"),
        ("token.create", f"token/{tid}", "cli", None),
        ("token.revoke", f"token/{tid}", "cli", None),
    ]
    rows = {(r.action, r.target): r for r in await store.audit_rows(EVERYONE, *ALL_TIME, limit=1000)}
    second = (await store.audit_rows(EVERYONE, *ALL_TIME, "role.set"))[0]  # the newest first
    assert (second.before, second.after) == ({"connectors": ["demo.echo"]}, {"connectors": ["demo.echo", "demo.other"]})
    unset = rows["role.unset", "role/team/acme/default"]
    assert (unset.before, unset.after) == ({"connectors": ["demo.echo", "demo.other"]}, None)
    budget = rows["budget.set", "budget/team/acme"]
    assert (budget.before, budget.after, budget.team_id) == ({}, {"per_day": 5.0}, "acme")
    assert rows["budget.ceiling", "budget/team/acme"].after == {"per_month": 100.0}
    replaced = rows["kb.document.add", "kb/acme:policies/d2"]  # the same source: it replaced d1
    assert replaced.before is not None and [d["id"] for d in replaced.before["replaced"]] == ["d1"]
    assert replaced.after["title"] == "Title d2" and replaced.after["source"] == "p.md"
    made = rows["token.create", f"token/{tid}"]
    assert made.after == {"id": tid, "user_id": "carl", "team_id": "acme", "admin": False, "operator": False,
                          "label": "laptop", "expires_at": None}  # fmt: skip
    assert rows["token.revoke", f"token/{tid}"].after["revoked"] is True
    verified = await store.audit_verify(OPERATOR)
    assert (verified.count, verified.broken) == (13, None)


async def test_a_refused_change_writes_no_row(store: SqlStore) -> None:
    await store.kb_create("acme", "policies", "", by=actor_of(ADMIN))

    def refuse(_own: Own) -> None:
        raise Forbidden("over the ceiling")

    with pytest.raises(Forbidden):
        await store.set_budget(("team", "acme"), {"per_day": 500.0}, refuse, by=actor_of(ADMIN))
    with pytest.raises(Conflict):
        await store.kb_create("acme", "policies", "", by=actor_of(ADMIN))
    assert not await store.delete_role(("team", "acme"), "never-set", by=actor_of(ADMIN))
    assert not await store.kb_delete(Sight("acme", ()), "acme:policies", "no-such-doc", by=actor_of(ADMIN))
    assert await store.revoke_token(OPERATOR, "ya_unknown") == 0
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_declare([("handbook", "Handbook", "")])  # declared again, unchanged: no change, no row
    assert [a for a, *_ in await everything(store)] == ["kb.collection.create", "kb.collection.declare"]
    assert (await store.audit_verify(OPERATOR)).count == 2


async def test_no_secret_reaches_a_row(store: SqlStore) -> None:
    key = "sk-" + "A1b2" * 8
    token = await store.create_token(OPERATOR, ALICE, label=f"for the CI (its provider key is {key})")
    await store.revoke_token(OPERATOR, token)
    stored = json.dumps([list(r) for r in await raw_rows(store)])
    hashed = await store.db.read_tx(lambda tx: tx.scalar(text("SELECT hash FROM tokens")))
    assert token not in stored and token[3:12] not in stored and hashed not in stored and key not in stored
    [made] = await store.list_tokens(OPERATOR)
    assert made.id in stored  # the public id names it
    assert "[redacted]" in stored  # the key in the label
    given = {"password": "hunter2", "headers": {"Authorization": "Bearer abc.def.ghi"},
             "note": "Bearer s3cr3t-v4lue-here", "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
             "content_hash": "ab" * 32}  # fmt: skip
    assert scrub(given) == {"password": "[redacted]", "headers": {"Authorization": "[redacted]"},
                            "note": "[redacted]", "jwt": "[redacted]", "content_hash": "ab" * 32}  # fmt: skip


async def test_each_sight_reads_its_rows_and_the_filters_hold(store: SqlStore, clock: Clock) -> None:
    store.clock = clock
    clock.now = 1_000.0
    await store.set_role(("team", "acme"), "default", ["demo.echo"], by=actor_of(ADMIN))  # acme's, by acme
    clock.now = 2_000.0
    await store.set_ceilings(("team", "acme"), {"per_day": 9.0})  # acme's, by the CLI
    clock.now = 3_000.0
    await store.set_budget(("user", "beta/bob"), {"per_day": 1.0}, by=actor_of(BETA_ADMIN))  # beta's
    clock.now = 4_000.0
    await store.set_role(("user", "solo"), "default", ["demo.echo"], by=actor_of(Identity("solo")))

    async def seen(sight: AuditSight, since: float = 0.0, until: float = 1e12, action: str | None = None,
                   limit: int = 100) -> list[str]:  # fmt: skip
        return [r.target for r in await store.audit_rows(sight, since, until, action, limit)]

    assert await seen(sight_for(ADMIN)) == ["budget/team/acme", "role/team/acme/default"]
    assert await seen(sight_for(BETA_ADMIN)) == ["budget/user/beta/bob"]
    assert await seen(sight_for(Identity("solo"))) == ["role/user/solo/default"]
    assert len(await seen(sight_for(OPERATOR))) == 4
    with pytest.raises(Forbidden, match="team admin"):
        sight_for(ALICE)  # a member of a team
    assert await seen(EVERYONE, since=2_000.0, until=4_000.0) == ["budget/user/beta/bob", "budget/team/acme"]
    assert await seen(EVERYONE, action="budget") == ["budget/user/beta/bob", "budget/team/acme"]
    assert await seen(EVERYONE, action="budget.ceiling") == ["budget/team/acme"]
    assert await seen(EVERYONE, action="role.set", limit=1) == ["role/user/solo/default"]


async def test_an_app_reload_is_one_row_however_many_processes_reload(store: SqlStore) -> None:
    assert await store.audit_reload("v1", "v2", "SIGHUP")
    assert not await store.audit_reload("v1", "v2", "files changed")  # another worker, the same change
    assert await store.audit_reload("v2", "v1", "files changed")  # a change back is a change
    rows = await store.audit_rows(EVERYONE, *ALL_TIME, "app.reload")
    assert [(r.before, r.after) for r in reversed(rows)] == [
        ({"version": "v1"}, {"version": "v2", "why": "SIGHUP"}),
        ({"version": "v2"}, {"version": "v1", "why": "files changed"}),
    ]
    assert rows[0].actor == Actor("operator")


def _edit(tx: Tx, row: int, **values: Any) -> None:
    tx.execute(update(audit).where(audit.c.id == row).values(**values))


async def test_verify_names_the_first_row_edited_removed_or_added(store: SqlStore) -> None:
    for n in range(6):
        await store.set_role(("team", "acme"), f"r{n}", ["demo.echo"], by=actor_of(ADMIN))
    intact = await store.audit_verify(OPERATOR)
    assert (intact.count, intact.broken) == (6, None) and len(intact.head) == 64
    rows = await raw_rows(store)

    async def broken_at(change: Callable[[Tx], object]) -> tuple[int, str]:
        await store.db.write_tx(change)
        found = (await store.audit_verify(OPERATOR)).broken
        assert found is not None
        return found.row, found.reason

    assert await broken_at(lambda tx: _edit(tx, 3, target="role/team/acme/admin")) == (
        3, "its contents do not match its hash (the row was changed)")  # fmt: skip
    forged = rows[2]._asdict() | {"target": "role/team/acme/admin"}
    # Its hash made again to match: the next row no longer chains to it.
    row, reason = await broken_at(lambda tx: _edit(tx, 3, hash=digest(forged)))
    assert row == 4 and "does not chain to row 3" in reason
    await store.db.write_tx(lambda tx: _edit(tx, 3, target=rows[2].target, hash=rows[2].hash))  # put back
    assert (await store.audit_verify(OPERATOR)).broken is None
    assert await broken_at(lambda tx: tx.execute(delete(audit).where(audit.c.id == 2))) == (
        2, "missing (row 3 follows row 1)")  # fmt: skip
    await store.db.write_tx(lambda tx: tx.execute(audit.insert(), rows[1]._asdict()))
    assert await broken_at(lambda tx: tx.execute(delete(audit).where(audit.c.id >= 5))) == (
        5, "rows 5 to 6 missing: the chain's head names row 6")  # fmt: skip
    await store.db.write_tx(lambda tx: tx.executemany(audit.insert(), [r._asdict() for r in rows[4:]]))
    assert (await store.audit_verify(OPERATOR)).broken is None
    extra = rows[5]._asdict() | {"id": 7, "prev_hash": rows[5].hash}
    assert await broken_at(lambda tx: tx.execute(audit.insert(), extra | {"hash": digest(extra)})) == (
        7, "not in the chain: its head names row 6 as the last")  # fmt: skip


WRITER = """
import asyncio, sys
from yao_agent.identity import Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.audit import actor_of

async def main(url: str, name: str, count: int) -> None:
    store = SqlStore(await open_engine(store_url(url, __import__("pathlib").Path("."))))
    by = actor_of(Identity(name, "acme", admin=True))
    try:
        await asyncio.gather(*(store.set_role(("team", "acme"), f"{name}-{n}", ["demo.echo"], by=by)
                               for n in range(count)))
    finally:
        await store.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_writers_in_two_processes_at_once_keep_one_chain(store: SqlStore, store_raw_url: str) -> None:
    """Each process writes 40 changes, several at once (PostgreSQL: on several connections); without the
    head's lock two of them would chain onto the same row and fork the chain."""
    await store.set_role(("team", "acme"), "first", ["demo.echo"], by=CLI)  # the chain has a head already
    writers = [await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, store_raw_url, name, "40", cwd=REPO)
               for name in ("p1", "p2")]  # fmt: skip
    codes = await asyncio.wait_for(asyncio.gather(*(w.wait() for w in writers)), 120)
    assert codes == [0, 0]
    verified = await store.audit_verify(OPERATOR)
    assert (verified.count, verified.broken) == (81, None)
    users = [r.actor.user_id for r in await store.audit_rows(EVERYONE, *ALL_TIME, limit=1000)]
    assert sorted(users.count(name) for name in ("p1", "p2")) == [40, 40]
