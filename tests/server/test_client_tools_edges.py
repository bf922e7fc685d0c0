"""Tools the client brings, at their edges (CONTRACT §9.2, §4.8, §5): a run's end names the calls it waits
for; a reply that calls both a tool needing a person's approval and a client's tool waits for the person
first, then for the client; a resent conversation ending in a new message is not stored twice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.approvals import APPROVE, counted, events_of, payer_runtime, tally
from tests.support.servers import Live, running
from tests.support.tools import weather_call
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.store.approvals import NO_CLIENT_RESULT
from yao_agent.testing import FakeProvider, Reply, ToolCall

ALICE = Identity("alice")
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
ASK = [{"role": "user", "content": "Pay, then tell me the weather in Paris."}]
WAITS_FOR_WEATHER = [{"tool_call_id": "call_w1", "name": "get_weather", "arguments": {"city": "Paris"}}]


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """`payer` (its `tally` needs a person's approval, its `add` nobody's) and `chat` (no tools of its own)."""
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


def completion(messages: list[dict[str, Any]], model: str = "payer", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": messages, "tools": [WEATHER], **extra}


def calling(*call_ids: str) -> dict[str, Any]:
    """The assistant message that calls the client's tool, as the client keeps it."""
    calls = [{"id": c, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
             for c in call_ids]  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": calls}


def sent_results(provider: FakeProvider) -> dict[str, Any]:
    """What the model's latest request said each tool call returned, by call id."""
    return {m["tool_call_id"]: m["content"] for m in provider.requests[-1].messages if m["role"] == "tool"}


async def stored(live: Live, chat_id: str) -> list[tuple[str, Any]]:
    return [(m.role, m.tool_call_id or m.content) for m in await live.rt.store.history(ALICE, chat_id)]


async def waiting_for_both(client: httpx.AsyncClient, provider: FakeProvider, ledger: Path) -> httpx.Response:
    """A chat completion whose reply calls `tally` (a person must approve it) and the client's `get_weather`."""
    provider.enqueue(Reply(text="On it.", tool_calls=(tally(ledger, "paid", "t1"), weather_call())))
    answer = await client.post("/v1/chat/completions", json=completion(ASK))
    assert answer.status_code == 200, answer.text
    return answer


# --- the end of a run that waits for its client -----------------------------------------------------------


async def test_the_native_end_names_the_client_calls_it_waits_for(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    """A decision's continuation, on the native route, runs the approved call and then waits for the client:
    its `stream_end` (and its JSON result) says which calls, with their arguments."""
    async with live.client() as client:
        first = await waiting_for_both(client, provider, ledger)
        events = await events_of(client, f"/api/chats/{first.headers['x-chat-id']}/approvals", APPROVE)
        again = await waiting_for_both(client, provider, ledger)
        whole = await client.post(f"/api/chats/{again.headers['x-chat-id']}/approvals?stream=false", json=APPROVE)
    end = events[-1]
    assert (end["type"], end["status"], end["reason"]) == ("stream_end", "waiting", "client_tools")
    assert end["client_calls"] == WAITS_FOR_WEATHER and "approvals" not in end
    assert [(e["tool_call_id"], e["result"]) for e in events if e["type"] == "tool_result"] == [("t1", "counted paid")]
    result = whole.json()
    assert (result["status"], result["reason"], result["client_calls"]) == ("waiting", "client_tools",
                                                                            WAITS_FOR_WEATHER)  # fmt: skip
    assert counted(ledger) == ["paid", "paid"] and len(provider.requests) == 2  # no model call waits for results


async def test_ends_that_wait_for_no_client_name_no_calls(live: Live, provider: FakeProvider, ledger: Path) -> None:
    provider.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"),)), Reply(text="Paid."))
    async with live.client() as client:
        waiting = await events_of(client, "/api/assistants/payer/runs", {"messages": ASK})
        done = await events_of(client, f"/api/chats/{waiting[0]['chat_id']}/approvals", APPROVE)
    assert (waiting[-1]["reason"], done[-1]["reason"]) == ("approval_required", "completed")
    assert "client_calls" not in waiting[-1] and "client_calls" not in done[-1]


# --- a reply that calls for a person's approval and for the client ---------------------------------------


async def test_the_person_decides_first_then_the_client_runs_its_tool(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    """No call of the reply runs before the person decides (the client is not handed its call yet); the
    decision runs the approved call and hands the run to the client, whose results finish it."""
    async with live.client() as client:
        first = await waiting_for_both(client, provider, ledger)
        chat_id = first.headers["x-chat-id"]
        waiting = await stored(live, chat_id)
        decided = await client.post(f"/api/chats/{chat_id}/approvals?stream=false", json=APPROVE)
        provider.enqueue(Reply(text="Paid; sunny in Paris."))
        results = [*ASK, calling("call_w1"), {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}]
        answer = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id}, json=completion(results))
    [choice] = first.json()["choices"]
    assert first.headers["x-yao-status"] == "waiting" and choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    assert "testing__tally (call t1)" in choice["message"]["content"]
    assert f"results of get_weather (call call_w1), sent on chat {chat_id}" in choice["message"]["content"]
    assert waiting == [("user", ASK[0]["content"]), ("assistant", "On it."), ("tool", "t1"), ("tool", "call_w1")]
    assert decided.json()["client_calls"] == WAITS_FOR_WEATHER
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Paid; sunny in Paris."
    assert sent_results(provider) == {"t1": "counted paid", "call_w1": "sunny"}
    assert counted(ledger) == ["paid"] and len(provider.requests) == 2
    assert [r for r, _ in await stored(live, chat_id)] == ["user", "assistant", "tool", "tool", "assistant"]
    runs = await live.rt.store.runs_of(ALICE, chat_id)
    assert [(r.status, r.reason) for r in reversed(runs)] == [
        ("waiting", "approval_required"), ("waiting", "client_tools"), ("completed", "completed")]  # fmt: skip


async def test_a_denial_still_leaves_the_client_its_call(live: Live, provider: FakeProvider, ledger: Path) -> None:
    """Denied, the tally never runs; the client's call still waits for it, streamed to the end as well."""
    denial = {"decisions": [{"tool_call_id": "t1", "approve": False, "reason": "not today"}]}
    async with live.client() as client:
        chat_id = (await waiting_for_both(client, provider, ledger)).headers["x-chat-id"]
        events = await events_of(client, f"/api/chats/{chat_id}/approvals", denial)
        provider.enqueue(Reply(text="Not paid; sunny."))
        results = [*ASK, calling("call_w1"), {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}]
        async with client.stream("POST", "/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                 json=completion(results, stream=True)) as streamed:  # fmt: skip
            chunks = [json.loads(line[6:]) async for line in streamed.aiter_lines() if line.startswith("data: {")]
    assert (events[-1]["reason"], events[-1]["client_calls"]) == ("client_tools", WAITS_FOR_WEATHER)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Not paid; sunny."
    assert sent_results(provider) == {"t1": "denied: not today", "call_w1": "sunny"}
    assert counted(ledger) == []


async def test_a_new_message_while_the_person_decides_closes_every_call(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    """The chat stays valid: the tally is denied by the new message, the client's call says none came."""
    async with live.client() as client:
        chat_id = (await waiting_for_both(client, provider, ledger)).headers["x-chat-id"]
        provider.enqueue(Reply(text="Nothing done, then."))
        said = [{"role": "user", "content": "Forget it."}]
        answer = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id}, json=completion(said))
        decide = await client.post(f"/api/chats/{chat_id}/approvals", json=APPROVE)
    assert answer.json()["choices"][0]["message"]["content"] == "Nothing done, then."
    results = sent_results(provider)
    assert results["t1"].startswith("denied: the user sent a new message")
    assert results["call_w1"].startswith("not run: the user sent a new message")
    assert decide.status_code == 404 and counted(ledger) == []


async def test_a_new_message_after_the_decision_closes_the_clients_call(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    async with live.client() as client:
        chat_id = (await waiting_for_both(client, provider, ledger)).headers["x-chat-id"]
        await client.post(f"/api/chats/{chat_id}/approvals?stream=false", json=APPROVE)
        provider.enqueue(Reply(text="Paid, no weather."))
        said = [{"role": "user", "content": "Skip the weather."}]
        answer = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id}, json=completion(said))
    assert answer.json()["choices"][0]["message"]["content"] == "Paid, no weather."
    assert sent_results(provider) == {"t1": "counted paid", "call_w1": NO_CLIENT_RESULT}


# --- a resent conversation that ends in a new message ----------------------------------------------------


async def test_a_resent_conversation_with_a_new_message_is_stored_once(live: Live, provider: FakeProvider) -> None:
    """A client that resends everything, ending in a new question instead of the tool's result: only the
    new question is stored, after the call's result that says none came."""
    provider.enqueue(Reply(text="Let me look.", tool_calls=(weather_call(),)), Reply(text="Rome is fine too."))
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json=completion(ask, "chat"))
        chat_id, said = first.headers["x-chat-id"], first.json()["choices"][0]["message"]
        resent = [*ask, said, {"role": "user", "content": "And in Rome?"}]
        again = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                  json=completion(resent, "chat"))  # fmt: skip
    assert again.json()["choices"][0]["message"]["content"] == "Rome is fine too."
    assert await stored(live, chat_id) == [("user", "Weather in Paris?"), ("assistant", "Let me look."),
                                           ("tool", "call_w1"), ("user", "And in Rome?"),
                                           ("assistant", "Rome is fine too.")]  # fmt: skip
    sent = provider.requests[-1].messages
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool", "user"]
    assert sent_results(provider) == {"call_w1": NO_CLIENT_RESULT}


async def test_a_resent_conversation_without_the_servers_calls_is_stored_once(
    live: Live, provider: FakeProvider
) -> None:
    """The reply also called the assistant's own tool, which ran out of the client's sight, and the client
    streamed it (an empty text): what it resends is still recognised; its new message is stored once."""
    both = (ToolCall("testing__add", json.dumps({"a": 2, "b": 3}), id="a1"), weather_call())
    provider.enqueue(Reply(tool_calls=both), Reply(text="5, and Rome is fine."))
    async with live.client() as client:
        async with client.stream("POST", "/v1/chat/completions", json=completion(ASK, stream=True)) as first:
            chat_id = first.headers["x-chat-id"]
            chunks = [json.loads(line[6:]) async for line in first.aiter_lines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        resent = [*ASK, {**calling("call_w1"), "content": text}, {"role": "user", "content": "And in Rome?"}]
        again = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id}, json=completion(resent))
    assert again.json()["choices"][0]["message"]["content"] == "5, and Rome is fine."
    assert [role for role, _ in await stored(live, chat_id)] == ["user", "assistant", "tool", "tool", "user",
                                                                 "assistant"]  # fmt: skip
    assert sent_results(provider) == {"a1": "5", "call_w1": NO_CLIENT_RESULT}
