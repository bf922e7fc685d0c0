"""The audit log as its readers have it: `GET /api/audit` over a real server (a team admin reads the team's
changes, a caller without a team their own, a member nothing), the rows of approval decisions and reloads,
and `yao-agent audit` and `audit verify`, which names a row edited or removed in the database file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.support.approvals import events_of, payer_runtime, waiting_reply
from tests.support.apps import make_app
from tests.support.cli import Cli
from tests.support.servers import Live, assert_error, running, server_files
from yao_agent.server.reload import Reloader
from yao_agent.store import SqlStore
from yao_agent.store.audit import EVERYONE
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ECHO = {"connector": "demo.echo"}


async def read(client: httpx.AsyncClient, query: str = "") -> list[dict[str, Any]]:
    response = await client.get("/api/audit" + query)
    assert response.status_code == 200, response.text
    return response.json()["rows"]


def actions(rows: list[dict[str, Any]]) -> list[str]:
    return [row["action"] for row in rows]


async def acme_changes(admin: httpx.AsyncClient) -> None:
    """bob, admin of acme: a role mapping, a budget, a collection with a document added and deleted."""
    assert (await admin.put("/api/roles/default", json=ECHO)).status_code == 200
    assert (await admin.put("/api/budgets", json={"per_day": 5})).status_code == 200
    made = (await admin.post("/api/knowledge", json={"name": "policies"})).json()
    added = await admin.post(f"/api/knowledge/{made['id']}/documents", json={"title": "Parking", "text": "Level 2."})
    deleted = await admin.delete(f"/api/knowledge/{made['id']}/documents/{added.json()['document']['id']}")
    assert deleted.status_code == 200, deleted.text


async def test_a_team_admin_reads_the_teams_changes_and_a_member_nothing(live: Live) -> None:
    async with live.client("bob_admin") as admin, live.client("alice") as alice, live.client("carol") as carol:
        await acme_changes(admin)
        assert (await alice.put("/api/roles/default", json=ECHO)).status_code == 200  # alice: no team
        rows = await read(admin)
        assert actions(rows) == ["kb.document.delete", "kb.document.add", "kb.collection.create", "budget.set",
                                 "role.set", "token.create", "token.create", "token.create"]  # fmt: skip
        assert rows[4]["actor"] == {"user_id": "bob", "team_id": "acme", "kind": "admin"}
        assert rows[4]["target"] == "role/team/acme/default" and rows[4]["after"] == {"connectors": ["demo.echo"]}
        assert {row["after"]["user_id"] for row in rows[5:]} == {"bob", "carol"}  # acme's tokens, by the CLI
        assert {row["actor"]["kind"] for row in rows[5:]} == {"cli"}
        assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)  # newest first
        mine = await read(alice)
        assert [(r["action"], r["target"], r["actor"]["user_id"]) for r in mine] == [
            ("role.set", "role/user/alice/default", "alice")]  # fmt: skip
        refused = assert_error(await carol.get("/api/audit"), 403, "forbidden")
        assert "team admin" in refused["message"]
        everything = json.dumps(await read(admin, "?limit=1000"))
        assert not [name for name, token in live.tokens.items() if token in everything]


async def test_the_filters_and_what_is_refused(live: Live) -> None:
    async with live.client("bob_admin") as admin:
        await acme_changes(admin)
        assert actions(await read(admin, "?action=kb.document")) == ["kb.document.delete", "kb.document.add"]
        assert actions(await read(admin, "?action=budget.set")) == ["budget.set"]
        assert actions(await read(admin, "?limit=2")) == ["kb.document.delete", "kb.document.add"]
        newest = (await read(admin, "?limit=1"))[0]
        # `to`, a moment: a millisecond before the newest row (a request later than the one before it).
        moment = (datetime.fromisoformat(newest["at"]) - timedelta(milliseconds=1)).isoformat()
        older = await read(admin, "?" + urlencode({"to": moment, "action": "kb.document"}))
        assert older == await read(admin, "?action=kb.document.add")
        assert await read(admin, "?to=2020-01-01") == [] and await read(admin, "?from=2999-01-01") == []
        assert len(await read(admin, f"?from={newest['at'][:10]}&to={newest['at'][:10]}")) == 8  # today, whole
        for query, param in (("?action=nope", "action"), ("?limit=0", "limit"), ("?limit=ten", "limit"),
                             ("?from=12/01/2026", "from"), ("?to=yesterday", "to"), ("?bogus=1", "bogus"),
                             ("?from=2026-12-02&to=2026-12-01", "to")):  # fmt: skip
            error = assert_error(await admin.get("/api/audit" + query), 400, "invalid_request")
            assert error.get("param") == param, (query, error)


@pytest.fixture
async def payer(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


async def test_an_approval_decision_is_its_deciders_row(payer: Live, provider: FakeProvider, tmp_path: Path) -> None:
    async with payer.client("alice") as alice:
        provider.enqueue(waiting_reply(tmp_path / "ledger"))
        events = await events_of(
            alice, "/api/assistants/payer/runs", {"messages": [{"role": "user", "content": "pay"}]}
        )
        assert events[-1]["status"] == "waiting"
        chat_id = events[0]["chat_id"]
        provider.enqueue(Reply(text="paid"))
        decided = {"decisions": [{"tool_call_id": "t1", "approve": False, "reason": "not today"}]}
        answer = await alice.post(f"/api/chats/{chat_id}/approvals?stream=false", json=decided)
        assert answer.status_code == 200, answer.text
        rows = await read(alice, "?action=approval")
    assert len(rows) == 1 and rows[0]["target"].startswith(f"approval/{chat_id}/") and rows[0]["target"].endswith("/t1")
    assert rows[0]["actor"] == {"user_id": "alice", "team_id": None, "kind": "member"}
    assert (rows[0]["before"], rows[0]["after"]) == ({"status": "pending"}, {"status": "denied", "reason": "not today"})


async def test_a_reload_is_one_row_of_the_deployment(live: Live) -> None:
    before = live.runs.app.version
    (live.runs.app.root / "assistants/later/assistant.yml").parent.mkdir(parents=True)
    (live.runs.app.root / "assistants/later/assistant.yml").write_text("name: Later\n")
    reloader = Reloader(live.runs)
    assert await reloader.reload("SIGHUP")
    assert not await Reloader(live.runs).reload("SIGHUP")  # nothing changed since: no row
    rows = await live.rt.store.audit_rows(EVERYONE, 0, 1e12, "app.reload")
    assert [(r.actor.kind, r.before, r.after) for r in rows] == [
        ("operator", {"version": before}, {"version": live.runs.app.version, "why": "SIGHUP"})]  # fmt: skip
    async with live.client("bob_admin") as admin:
        assert await read(admin, "?action=app") == []  # the deployment's, not a team's


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(make_app(tmp_path / "app", server_files("http://127.0.0.1:9")), f"sqlite:///{tmp_path / 'agent.db'}")


def verify(cli: Cli, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code, out = cli("audit", "verify")
    return code, out + capsys.readouterr().err


def test_the_operator_lists_the_log_and_verify_names_a_row_edited_in_the_file(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (("roles", "set", "default", "demo.echo", "--team", "acme"),
                 ("budgets", "set", "--team", "acme", "--per-day", "10"),
                 ("tokens", "create", "--user", "dan", "--team", "globex"),
                 ("roles", "set", "light", "demo.echo", "--team", "acme")):  # fmt: skip
        assert cli(*args)[0] == 0
    code, out = cli("audit", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["action"] for r in rows] == ["role.set", "token.create", "budget.ceiling", "role.set"]
    assert all(r["actor"] == {"user_id": None, "team_id": None, "kind": "cli"} for r in rows)
    code, out = cli("audit", "--team", "acme")
    assert code == 0 and "token.create" not in out and out.count("role.set") == 2 and "budget/team/acme" in out
    assert verify(cli, capsys)[0] == 0 and "intact: 4 rows" in verify(cli, capsys)[1]

    with sqlite3.connect(tmp_path / "agent.db") as db:
        db.execute("UPDATE audit SET target = 'role/team/acme/admin' WHERE id = 2")
    code, said = verify(cli, capsys)
    assert code == 1 and "broken at row 2: its contents do not match its hash" in said
    with sqlite3.connect(tmp_path / "agent.db") as db:
        db.execute("DELETE FROM audit WHERE id = 2")
    code, said = verify(cli, capsys)
    assert code == 1 and "broken at row 2: missing (row 3 follows row 1)" in said
    with sqlite3.connect(tmp_path / "agent.db") as db:
        db.execute("DELETE FROM audit WHERE id >= 3")
    code, said = verify(cli, capsys)
    assert code == 1 and "broken at row 2: rows 2 to 4 missing" in said
    assert cli("audit", "--action", "nope")[0] == 2 and cli("audit", "--team", "a/b")[0] == 2
