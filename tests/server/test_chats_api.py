"""Renaming, deleting and searching chats over a real uvicorn, as two tenants, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, insert, select

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.store.schema import chat_leases, metadata, runs, usage_ledger
from yao_agent.store.tx import Tx
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ALICE = Identity("alice")
# A hook that keeps something in the chat's memory, so that deleting the chat has memory to delete.
HOOK = 'async function Create(ctx, messages) { await ctx.memory.set("seen", messages.length); return null }\n'


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    files = server_files(provider.base_url)
    files["hooks/remember.js"] = HOOK
    files["assistants/remembering/assistant.yml"] = "name: Remembering\nhook: hooks/remember.js\n"
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        yield served


async def ask(client: httpx.AsyncClient, text: str, chat_id: str | None = None, assistant: str = "chat") -> Any:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if chat_id is not None:
        body["chat_id"] = chat_id
    response = await client.post(f"/api/assistants/{assistant}/runs?stream=false", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def listed(client: httpx.AsyncClient, q: str | None = None) -> list[tuple[str, str]]:
    response = await client.get("/api/chats", params={"q": q} if q is not None else None)
    assert response.status_code == 200, response.text
    return [(c["chat_id"], c["title"]) for c in response.json()["chats"]]


def rows_of(tx: Tx, chat_id: str, run_ids: list[str]) -> dict[str, int]:
    """How many rows each table holds for a chat or its runs: every table of the schema that names either."""
    counts: dict[str, int] = {}
    for table in metadata.sorted_tables:
        if table.info.get("outlives_chats"):
            continue  # the usage ledger: spend stays spent (and it holds no content: see below)
        if table.name == "chats":
            counts["chats"] = tx.scalar(select(func.count()).where(table.c.id == chat_id))
        elif "chat_id" in table.c:
            counts[table.name] = tx.scalar(select(func.count()).where(table.c.chat_id == chat_id))
        elif "run_id" in table.c:
            found = select(func.count()).where(table.c.run_id.in_(run_ids))
            counts[table.name] = tx.scalar(found)
    return counts


async def test_a_chat_is_renamed_and_listed_under_its_new_title(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Sure."))
    async with live.client() as client:
        chat_id = (await ask(client, "help me plan something"))["chat_id"]
        before = (await client.get("/api/chats")).json()["chats"][0]
        renamed = await client.patch(f"/api/chats/{chat_id}", json={"title": "  Trip to Lisbon ✈️  "})
        assert renamed.status_code == 200
        assert renamed.json() == {**before, "title": "Trip to Lisbon ✈️"}  # the chat as GET /api/chats lists it
        assert await listed(client) == [(chat_id, "Trip to Lisbon ✈️")]
        longest = "x" * 200
        assert (await client.patch(f"/api/chats/{chat_id}", json={"title": longest})).json()["title"] == longest


BAD_TITLES: list[Any] = [
    "", "   ", "x" * 201, "two\nlines", "a\ttab", "nul\x00byte", "bell\x07", "\u202egnp.exe", "para\u2029graph",
    5, None, ["a list"], {"title": "nested"},
]  # fmt: skip


@pytest.mark.parametrize("title", BAD_TITLES, ids=range(len(BAD_TITLES)))
async def test_a_bad_title_is_a_400_and_changes_nothing(live: Live, provider: FakeProvider, title: Any) -> None:
    provider.enqueue(Reply(text="ok"))
    async with live.client() as client:
        chat_id = (await ask(client, "original title"))["chat_id"]
        response = await client.patch(f"/api/chats/{chat_id}", json={"title": title})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request"
        assert await listed(client) == [(chat_id, "original title")]


async def test_a_malformed_rename_body_is_a_400(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="ok"))
    async with live.client() as client:
        chat_id = (await ask(client, "hello"))["chat_id"]
        path = f"/api/chats/{chat_id}"
        headers = {"Content-Type": "application/json"}
        answers = [
            await client.patch(path, content=b'{"title": "\\ud800 lone surrogate"}', headers=headers),
            await client.patch(path, content=b"{not json", headers=headers),
            await client.patch(path, json={}),
            await client.patch(path, json={"title": "ok", "owner": "bob"}),
        ]
        assert [a.status_code for a in answers] == [400, 400, 400, 400]
        assert await listed(client) == [(chat_id, "hello")]


async def test_another_tenants_chat_is_404_for_rename_and_delete(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="mine"))
    async with live.client("alice") as alice, live.client("bob") as bob:
        chat_id = (await ask(alice, "alice's secret chat"))["chat_id"]
        theirs = [
            await bob.patch(f"/api/chats/{chat_id}", json={"title": "pwned"}),
            await bob.delete(f"/api/chats/{chat_id}"),
        ]
        nobody = [
            await bob.patch("/api/chats/chat_nobody", json={"title": "x"}),
            await bob.delete("/api/chats/chat_nobody"),
        ]
        assert [r.status_code for r in theirs + nobody] == [404] * 4
        assert {r.json()["error"]["type"] for r in theirs + nobody} == {"not_found"}
        odd = [
            await alice.delete("/api/chats/" + "x" * 300),
            await alice.patch("/api/chats/a%20b", json={"title": "x"}),
        ]
        assert [r.status_code for r in odd] == [404, 404]
        assert await listed(alice) == [(chat_id, "alice's secret chat")]  # untouched
        assert await listed(bob) == []


async def test_search_finds_titles_and_messages_of_the_callers_chats_only(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Lisbon is lovely in May."), Reply(text="Use a sourdough starter."), Reply(text="ok"))
    async with live.client("alice") as alice, live.client("bob") as bob:
        trip = (await ask(alice, "Plan a trip to LISBON"))["chat_id"]
        bread = (await ask(alice, "How do I bake 100% rye bread?"))["chat_id"]
        theirs = (await ask(bob, "Lisbon office move"))["chat_id"]
        assert await listed(alice, "lisbon") == [(trip, "Plan a trip to LISBON")]  # any case
        assert await listed(alice, "SOURDOUGH") == [(bread, "How do I bake 100% rye bread?")]  # the model's answer
        assert await listed(alice, "100%") == [(bread, "How do I bake 100% rye bread?")]
        assert await listed(alice, "%") == [(bread, "How do I bake 100% rye bread?")]  # no wildcard: a literal %
        assert await listed(alice, "_") == []
        assert await listed(alice, "office") == []  # bob's chat is never found for alice
        assert await listed(bob, "lisbon") == [(theirs, "Lisbon office move")]
        assert {c for c, _ in await listed(alice, "")} == {trip, bread}  # an empty query lists everything
        await alice.patch(f"/api/chats/{bread}", json={"title": "Baking notes"})
        assert await listed(alice, "baking") == [(bread, "Baking notes")]
        # Asked wrongly, the search says so rather than listing every chat as if nothing had been asked.
        too_long, misnamed, twice = {"q": "x" * 201}, {"query": "lisbon"}, {"q": ["lisbon", "bread"]}
        for wrong in (httpx.QueryParams(too_long), httpx.QueryParams(misnamed), httpx.QueryParams(twice)):
            refused = await alice.get("/api/chats", params=wrong)
            assert (refused.status_code, refused.json()["error"]["type"]) == (400, "invalid_request"), wrong


async def test_delete_removes_the_chat_and_everything_stored_for_it(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="first"), Reply(status=500, error_message="upstream exploded"), Reply(text="kept"))
    async with live.client("alice") as alice, live.client("bob") as bob:
        chat_id = (await ask(alice, "remember me", assistant="remembering"))["chat_id"]
        failed = await ask(alice, "and fail", chat_id, assistant="remembering")
        assert (failed["status"], failed["reason"]) == ("failed", "model_error")
        kept = (await ask(alice, "another chat"))["chat_id"]
        bobs = (await ask(bob, "bob's chat"))["chat_id"]
        # A lease a process left behind when it stopped (expired): part of the chat's stored state too.
        expired = {"chat_id": chat_id, "owner": "gone|1|x", "run_id": failed["run_id"], "expires_at": time.time() - 60}
        await live.rt.store.db.write_tx(lambda tx: tx.execute(insert(chat_leases).values(**expired)))
        run_ids = [r.id for r in await live.rt.store.runs_of(ALICE, chat_id)]
        stored = await live.rt.store.db.read_tx(lambda tx: rows_of(tx, chat_id, run_ids))
        assert {name for name, count in stored.items() if count} >= {"chats", "messages", "runs", "steps", "memory"}
        others = await live.rt.store.db.read_tx(lambda tx: [rows_of(tx, c, []) for c in (kept, bobs)])

        deleted = await alice.delete(f"/api/chats/{chat_id}")
        assert (deleted.status_code, deleted.json()) == (200, {"chat_id": chat_id, "deleted": True})
        again = {"chat_id": chat_id, "messages": [{"role": "user", "content": "hi"}]}
        gone = [
            await alice.get(f"/api/chats/{chat_id}/messages"),
            await alice.get(f"/api/chats/{chat_id}/resume"),
            await alice.delete(f"/api/chats/{chat_id}"),
            await alice.patch(f"/api/chats/{chat_id}", json={"title": "back?"}),
            await alice.post("/api/assistants/chat/runs?stream=false", json=again),
        ]
        assert [r.status_code for r in gone] == [404] * 5
        assert [c for c, _ in await listed(alice)] == [kept]

    left = await live.rt.store.db.read_tx(lambda tx: rows_of(tx, chat_id, run_ids))
    assert left == dict.fromkeys(left, 0)  # nothing of it in any table
    # What the usage ledger keeps of it is what was spent: ids, counts and prices, never a word said.
    kept_columns = {c.name for c in usage_ledger.c}
    assert kept_columns == {"step_id", "run_id", "chat_id", "user_id", "team_id", "assistant_id", "connector",
                            "model", "input_tokens", "output_tokens", "cost_usd", "day", "at"}  # fmt: skip
    assert await live.rt.store.db.read_tx(lambda tx: [rows_of(tx, c, []) for c in (kept, bobs)]) == others


async def events_of(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def test_a_chat_is_not_deleted_while_a_run_is_active(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="ok"), Reply(text="slow " * 40, chunk_size=2, delay_s=0.02))
    async with live.client("alice") as alice:
        chat_id = (await ask(alice, "start"))["chat_id"]
        body = {"chat_id": chat_id, "messages": [{"role": "user", "content": "talk slowly"}]}
        async with alice.stream("POST", "/api/assistants/chat/runs", json=body) as response:
            events = events_of(response)
            async for event in events:
                if event["type"] == "message_delta":  # streaming: the run is active
                    break
            busy = await alice.delete(f"/api/chats/{chat_id}")
            assert (busy.status_code, busy.json()["error"]["type"]) == (409, "chat_busy")
            rest = [event async for event in events]
        assert rest[-1]["status"] == "completed"  # the run was not disturbed
        said = (await alice.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        assert said[-1]["content"] == "slow " * 40
        assert (await alice.delete(f"/api/chats/{chat_id}")).status_code == 200  # once it ended


async def test_a_chat_another_process_runs_is_not_deleted(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="ok"))
    async with live.client("alice") as alice:
        chat_id = (await ask(alice, "shared"))["chat_id"]
        [run] = await live.rt.store.runs_of(ALICE, chat_id)
        held = {"chat_id": chat_id, "owner": "elsewhere|1|x", "run_id": run.id, "expires_at": time.time() + 60}
        await live.rt.store.db.write_tx(lambda tx: tx.execute(insert(chat_leases).values(**held)))
        busy = await alice.delete(f"/api/chats/{chat_id}")
        assert (busy.status_code, busy.json()["error"]["type"]) == (409, "chat_busy")
        assert await listed(alice) == [(chat_id, "shared")]
        count = select(func.count()).where(runs.c.chat_id == chat_id)
        assert await live.rt.store.db.read_tx(lambda tx: tx.scalar(count)) == 1
