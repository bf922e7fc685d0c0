"""What one request costs the store, per kind of request: its transactions, statements and pool checkouts.

Counted, not timed (deterministic): docs/performance.md keeps the figures. A non-streamed request is the
streamed one drained by the server, so the two must cost the store the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.approvals import APPROVE, counted, payer_runtime, waiting_reply
from tests.support.servers import Live, running
from tests.support.transactions import Counts, counting
from tests.support.waits import wait_until
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall

pytestmark = pytest.mark.both_stores
ASK = [{"role": "user", "content": "Hello"}]
ALL_BUT_ME = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
              " WHERE datname = current_database() AND pid <> pg_backend_pid()")  # fmt: skip


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = ToolCall("get_weather", {"city": "Paris"}, id="call_w1")


async def _counted(live: Live, client: httpx.AsyncClient, path: str, body: dict[str, Any], **params: str) -> Counts:
    """One request's store work: the request, its response read to the end, and what the run does after."""
    with counting(live.rt.store.db) as counts:
        response = await client.post(path, json=body, params=params)
        assert response.status_code == 200, response.text
        counts.chat_id = response.headers["x-chat-id"]
        await wait_until(lambda: not live.runs.process.admission.active_state(counts.chat_id))
    return counts


async def _kinds(live: Live, provider: FakeProvider) -> dict[str, Counts]:
    """The store work of each kind of request, each on a chat of its own after the token's first use."""
    chat = {"model": "chat", "messages": ASK}
    async with live.client() as client:
        await client.post("/v1/chat/completions", json=chat)
        found = {
            "openai streamed": await _counted(live, client, "/v1/chat/completions", {**chat, "stream": True}),
            "openai non-streamed": await _counted(live, client, "/v1/chat/completions", chat),
            "native streamed": await _counted(live, client, "/api/assistants/chat/runs", {"messages": ASK}),
            "native non-streamed": await _counted(live, client, "/api/assistants/chat/runs", {"messages": ASK},
                                                  stream="false"),
        }  # fmt: skip
        provider.enqueue(Reply(tool_calls=(CALL,)), Reply(text="Sunny."))
        tooled = {**chat, "tools": [WEATHER]}
        found["client tool call"] = await _counted(live, client, "/v1/chat/completions", tooled)
        chat_id = found["client tool call"].chat_id
        called = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}  # fmt: skip
        follow = {**tooled, "messages": [*ASK, called, {"role": "tool", "tool_call_id": "call_w1", "content": "sun"}]}
        client.headers["X-Chat-Id"] = chat_id
        found["client tool results"] = await _counted(live, client, "/v1/chat/completions", follow)
        provider.enqueue("e500")
        failed = await client.post("/api/assistants/chat/runs", json={"messages": ASK}, params={"stream": "false"})
        del client.headers["X-Chat-Id"]
        found["resume"] = await _counted(live, client, f"/api/chats/{failed.headers['x-chat-id']}/resume", {},
                                         stream="false")  # fmt: skip
    return found


def _show(dialect: str, found: dict[str, Counts]) -> None:
    print(f"\n{dialect}: kind: transactions (reads + writes), statements, checkouts, round trips")
    for kind, counts in found.items():
        print(f"  {kind}: {counts.transactions} ({counts.reads} + {counts.writes}), {counts.statements}, "
              f"{counts.checkouts}, {counts.round_trips}: {', '.join(counts.works)}")  # fmt: skip


async def test_a_non_streamed_request_costs_what_a_streamed_one_does(live: Live, provider: FakeProvider) -> None:
    await live.runs.process.share_chats()  # as `yao-agent serve` does: on PostgreSQL, chats held by a shared lease
    try:
        found = await _kinds(live, provider)
    finally:
        await live.runs.process.lease.aclose()
    _show(live.rt.store.db.dialect, found)
    for route in ("openai", "native"):
        assert found[f"{route} non-streamed"].works == found[f"{route} streamed"].works
    # The role settings are read with the budgets, and the chat's lease (PostgreSQL) is let go in the
    # flush: one transaction each, not two (docs/performance.md counts the rest).
    claim = ["write PgLease._claim"] if live.rt.store.db.dialect == "postgresql" else []
    assert [w.split(".<locals>")[0] for w in found["openai non-streamed"].works] == [
        "read TokenStore.token_owner", "read QuotaStore.budget_work", *claim, "write ChatStore.load_and_start",
        "write ChatStore.commit_steps", "write ChatStore.finish_run"]  # fmt: skip
    if live.rt.store.db.dialect == "postgresql":  # reads without BEGIN and COMMIT (store/engine.py `begin`)
        plain = found["openai non-streamed"]
        assert (plain.begins, plain.commits) == (plain.writes, plain.writes)
        assert plain.round_trips == plain.statements + 2 * plain.writes


async def test_a_tool_round_that_waits_for_approval_and_its_decision(
    tmp_path: Path, store: SqlStore, provider: FakeProvider, ledger: Path
) -> None:
    """A reply whose calls wait for a person (stored `waiting`), then the decision that runs them (server-side
    tools, in process) and the model's second call: printed beside the other kinds (`-s`)."""
    async with running(payer_runtime(tmp_path / "app", store, provider)) as live, live.client() as client:
        await live.runs.process.share_chats()
        try:
            await client.post("/api/assistants/chat/runs", json={"messages": ASK}, params={"stream": "false"})
            provider.enqueue(waiting_reply(ledger))
            asking = {"messages": [{"role": "user", "content": "pay and add"}]}
            waiting = await _counted(live, client, "/api/assistants/payer/runs", asking, stream="false")
            provider.enqueue(Reply(text="Paid."))
            decided = await _counted(live, client, f"/api/chats/{waiting.chat_id}/approvals", APPROVE, stream="false")
        finally:
            await live.runs.process.lease.aclose()
    assert counted(ledger) == ["paid"]
    _show(live.rt.store.db.dialect, {"waits for approval": waiting, "approved (tool round)": decided})


@pytest.mark.parametrize("store_raw_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
async def test_a_connection_the_server_closed_does_not_fail_the_next_request(live: Live, store_raw_url: str) -> None:
    """Every pooled connection's backend ended between two requests (as a restarted server or an operator's
    `pg_terminate_backend` does): the next request is answered, not a 500 (its transactions run again)."""
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})
        assert first.status_code == 200, first.text
        dsn = store_raw_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as admin:
            ended = admin.execute(ALL_BUT_ME).fetchall()
        assert ended and all(row[0] for row in ended)
        whole = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})
        assert whole.status_code == 200 and whole.json()["choices"][0]["message"]["content"], whole.text
        streamed = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "stream": True})
        assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]"), streamed.text
