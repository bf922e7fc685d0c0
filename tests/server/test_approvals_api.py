"""Tool approvals over HTTP (CONTRACT §4.8, §5, §6), as a client of a real server sees them: a run that
waits, the approvals it waits for, decisions that continue it — also after a restart and in another
process — and what an OpenAI client is told while a run waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.approvals import APPROVE, Events, counted, events_of, payer_runtime, tally, waiting_reply
from tests.support.servers import Live, openai_client, running, serving
from yao_agent.base.jsonvalue import strict_loads
from yao_agent.identity import Identity
from yao_agent.ids import RandomIds
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply, ToolCall

REPO = Path(__file__).resolve().parents[2]
ALICE = Identity("alice")


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


def says(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def approvals_of(ledger: Path, label: str = "paid") -> list[dict[str, Any]]:
    """What the run waits for after `waiting_reply`: the tally only (the add needs nobody)."""
    return [{"tool_call_id": "t1", "server": "testing", "tool": "tally",
             "arguments": {"path": str(ledger), "label": label}}]  # fmt: skip


async def start_waiting(client: httpx.AsyncClient, provider: FakeProvider, ledger: Path) -> tuple[str, Events]:
    """A run of `payer` that waits for approvals: its chat id and its events."""
    provider.enqueue(waiting_reply(ledger))
    events = await events_of(client, "/api/assistants/payer/runs", {"messages": says("pay and add")})
    assert events[-1]["status"] == "waiting", events[-1]
    return events[0]["chat_id"], events


def by_type(events: Events, kind: str) -> Events:
    return [e for e in events if e["type"] == kind]


def tool_messages(provider: FakeProvider) -> dict[str, Any]:
    """What the model's latest request said each tool call returned, by call id."""
    return {m["tool_call_id"]: m["content"] for m in provider.requests[-1].messages if m["role"] == "tool"}


async def history(client: httpx.AsyncClient, chat_id: str) -> Events:
    response = await client.get(f"/api/chats/{chat_id}/messages")
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def error_of(response: httpx.Response, status: int, kind: str) -> str:
    """The contract's JSON error with this status and type; its message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind, error
    return error["message"]


# --- a run that waits ------------------------------------------------------------------------------------


async def test_a_run_that_needs_approval_waits_and_says_for_what(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    async with live.client() as alice:
        chat_id, events = await start_waiting(alice, provider, ledger)
        fields = ("tool_call_id", "server", "tool", "arguments")
        asked = [{k: a[k] for k in fields} for a in by_type(events, "approval_request")]
        assert asked == approvals_of(ledger)
        end = events[-1]
        assert (end["type"], end["status"], end["reason"]) == ("stream_end", "waiting", "approval_required")
        assert end["approvals"] == approvals_of(ledger)
        assert by_type(events, "tool_result") == []  # the add waits with the tally: no call of the reply ran
        waiting = await alice.get(f"/api/chats/{chat_id}/approvals")
        assert waiting.status_code == 200, waiting.text
        assert waiting.json() == {"chat_id": chat_id, "run_id": end["run_id"], "approvals": approvals_of(ledger)}
        # A resume cannot run calls nobody approved; the chat has no resume point of that kind either.
        assert "approve testing__tally" in error_of(
            await alice.post(f"/api/chats/{chat_id}/resume"), 409, "approval_conflict"
        )
        error_of(await alice.get(f"/api/chats/{chat_id}/resume"), 404, "not_found")
    assert counted(ledger) == []


async def test_a_run_that_waits_as_json(live: Live, provider: FakeProvider, ledger: Path) -> None:
    provider.enqueue(waiting_reply(ledger, "I will pay."))
    async with live.client() as alice:
        response = await alice.post("/api/assistants/payer/runs?stream=false", json={"messages": says("pay")})
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["status"], result["reason"], result["approvals"]) == ("waiting", "approval_required",
                                                                         approvals_of(ledger))  # fmt: skip
    assert result["chat_id"] == response.headers["x-chat-id"]
    # The stored chat stays valid to send: each call has a result that says it waits.
    assert [(m["role"], m.get("tool_call_id")) for m in result["messages"]] == [
        ("user", None), ("assistant", None), ("tool", "t1"), ("tool", "a1")]  # fmt: skip
    assert all(m["content"].startswith("waiting:") for m in result["messages"] if m["role"] == "tool")
    assert counted(ledger) == []


# --- deciding ------------------------------------------------------------------------------------------


async def test_approving_runs_the_tool_once_and_the_run_completes(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    async with live.client() as alice:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        provider.enqueue(Reply(text="Paid, and 2+3 is 5."))
        events = await events_of(alice, f"/api/chats/{chat_id}/approvals", APPROVE)
        results = {e["tool_call_id"]: (e["result"], e["error"]) for e in by_type(events, "tool_result")}
        assert results == {"t1": ("counted paid", None), "a1": ("5", None)}
        assert (events[-1]["type"], events[-1]["status"], events[-1]["reason"]) == ("stream_end", "completed",
                                                                                    "completed")  # fmt: skip
        assert counted(ledger) == ["paid"]
        assert tool_messages(provider) == {"t1": "counted paid", "a1": "5"}
        error_of(await alice.get(f"/api/chats/{chat_id}/approvals"), 404, "not_found")  # nothing waits any more
        said = await history(alice, chat_id)
    assert said[-1]["content"] == "Paid, and 2+3 is 5."
    [decided] = [m for m in said if m.get("tool_call_id") == "t1"]
    assert decided["content"] == "counted paid"
    assert {k: decided["approval"][k] for k in ("approved", "by")} == {"approved": True, "by": "alice"}
    assert decided["approval"]["at"] and "reason" not in decided["approval"]
    assert "approval" not in next(m for m in said if m.get("tool_call_id") == "a1")  # it needed nobody


async def test_a_denial_with_a_reason_reaches_the_model_and_the_tool_never_runs(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    denial = {"decisions": [{"tool_call_id": "t1", "approve": False, "reason": "too costly"}]}
    async with live.client() as alice:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        provider.enqueue(Reply(text="I did not pay."))
        response = await alice.post(f"/api/chats/{chat_id}/approvals?stream=false", json=denial)
        assert response.status_code == 200, response.text
        assert (response.json()["status"], response.json()["reason"]) == ("completed", "completed")
        said = await history(alice, chat_id)
    assert counted(ledger) == []
    assert tool_messages(provider) == {"t1": "denied: too costly", "a1": "5"}  # the call that needed nobody ran
    [decided] = [m for m in said if m.get("tool_call_id") == "t1"]
    assert decided["content"] == "denied: too costly"
    assert {k: decided["approval"][k] for k in ("approved", "by", "reason")} == {
        "approved": False, "by": "alice", "reason": "too costly"}  # fmt: skip


async def test_partial_decisions_are_a_400_naming_the_missing_call(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    provider.enqueue(Reply(tool_calls=(tally(ledger, "one", "t1"), tally(ledger, "two", "t2"))))
    async with live.client() as alice:
        events = await events_of(alice, "/api/assistants/payer/runs", {"messages": says("pay twice")})
        chat_id = events[0]["chat_id"]
        message = error_of(await alice.post(f"/api/chats/{chat_id}/approvals", json=APPROVE), 400, "invalid_request")
        assert "missing: t2" in message
        still = (await alice.get(f"/api/chats/{chat_id}/approvals")).json()["approvals"]
        assert [a["tool_call_id"] for a in still] == ["t1", "t2"]  # nothing was decided
        assert len(provider.requests) == 1 and counted(ledger) == []
        provider.enqueue(Reply(text="One paid."))
        both = {"decisions": [*APPROVE["decisions"], {"tool_call_id": "t2", "approve": False}]}
        assert (await events_of(alice, f"/api/chats/{chat_id}/approvals", both))[-1]["status"] == "completed"
    assert counted(ledger) == ["one"]
    assert tool_messages(provider) == {"t1": "counted one", "t2": "denied: not approved"}


async def test_deciding_again_finds_nothing_left_to_decide(live: Live, provider: FakeProvider, ledger: Path) -> None:
    async with live.client() as alice:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        provider.enqueue(Reply(text="Paid."))
        await events_of(alice, f"/api/chats/{chat_id}/approvals", APPROVE)
        again = await alice.post(f"/api/chats/{chat_id}/approvals", json={"decisions": [
            {"tool_call_id": "t1", "approve": False}]})  # fmt: skip
        assert "no pending approvals" in error_of(again, 404, "not_found")
    assert counted(ledger) == ["paid"]


async def test_two_people_approving_at_once_run_the_tool_once(live: Live, provider: FakeProvider, ledger: Path) -> None:
    """One decision wins; the other is told the calls were decided already (or that nothing waits any more)."""
    async with live.client() as alice, live.client() as also_alice:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        provider.enqueue(Reply(text="Paid."), Reply(text="Paid twice?"))
        path = f"/api/chats/{chat_id}/approvals?stream=false"
        answers = await asyncio.gather(alice.post(path, json=APPROVE), also_alice.post(path, json=APPROVE))
    statuses = sorted(r.status_code for r in answers)
    assert statuses[0] == 200 and statuses[1] in (404, 409), [r.text for r in answers]
    loser = next(r for r in answers if r.status_code != 200)
    assert loser.json()["error"]["type"] == {404: "not_found", 409: "approval_conflict"}[loser.status_code]
    assert counted(ledger) == ["paid"]
    assert len(provider.requests) == 2  # the wait, then one continuation


async def test_another_tenant_gets_404_for_the_approvals(live: Live, provider: FakeProvider, ledger: Path) -> None:
    async with live.client() as alice, live.client("bob") as bob:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        for method, body in (("GET", None), ("POST", APPROVE)):
            taken = error_of(await bob.request(method, f"/api/chats/{chat_id}/approvals", json=body), 404, "not_found")
            ghost = await bob.request(method, "/api/chats/never-was/approvals", json=body)
            # Worded as for a chat that never existed: the id confirms nothing.
            assert taken.replace(chat_id, "ID") == error_of(ghost, 404, "not_found").replace("never-was", "ID")
        still = await alice.get(f"/api/chats/{chat_id}/approvals")
        assert [a["tool_call_id"] for a in still.json()["approvals"]] == ["t1"]
    assert counted(ledger) == [] and len(provider.requests) == 1


async def test_a_new_message_while_waiting_denies_what_waits(live: Live, provider: FakeProvider, ledger: Path) -> None:
    async with live.client() as alice:
        chat_id, _ = await start_waiting(alice, provider, ledger)
        provider.enqueue(Reply(text="Never mind then."))
        body = {"chat_id": chat_id, "messages": says("actually, forget it")}
        events = await events_of(alice, "/api/assistants/payer/runs", body)
        assert events[-1]["status"] == "completed"
        error_of(await alice.get(f"/api/chats/{chat_id}/approvals"), 404, "not_found")
        error_of(await alice.post(f"/api/chats/{chat_id}/approvals", json=APPROVE), 404, "not_found")
        said = await history(alice, chat_id)
    assert counted(ledger) == []
    assert tool_messages(provider) == {"t1": "denied: the user sent a new message",
                                   "a1": "not run: the user sent a new message"}  # fmt: skip
    assert provider.requests[-1].messages[-1] == {"role": "user", "content": "actually, forget it"}
    [decided] = [m["approval"] for m in said if m.get("tool_call_id") == "t1"]
    assert (decided["approved"], decided["reason"]) == (False, "the user sent a new message")


# --- what an OpenAI client is told ----------------------------------------------------------------------


PAY: list[ChatCompletionMessageParam] = [{"role": "user", "content": "pay"}]


def notice(chat_id: str) -> str:
    return (f"Waiting for approval: testing__tally (call t1). The run continues once a person decides in chat "
            f"{chat_id}: POST /api/chats/{chat_id}/approvals.")  # fmt: skip


async def test_the_openai_route_answers_a_waiting_run_in_words(
    live: Live, provider: FakeProvider, ledger: Path
) -> None:
    provider.enqueue(waiting_reply(ledger, "I will pay."))
    async with openai_client(live) as client:
        raw = await client.chat.completions.with_raw_response.create(model="payer", messages=PAY)
    chat_id = raw.headers["x-chat-id"]
    assert raw.headers["x-yao-status"] == "waiting"
    [choice] = raw.parse().choices
    assert (choice.message.content, choice.finish_reason) == (f"I will pay.\n\n{notice(chat_id)}", "stop")
    assert choice.message.tool_calls is None  # the server's tools are never the client's to run
    assert set(json.loads(raw.text)["choices"][0]["message"]) == {"role", "content"}
    assert counted(ledger) == []
    # A raw request sees the same status header; the approvals it names are decided as any others.
    provider.enqueue(waiting_reply(ledger))
    async with live.client() as alice:
        again = await alice.post("/v1/chat/completions", json={"model": "payer", "messages": says("pay")})
        assert (again.status_code, again.headers["x-yao-status"]) == (200, "waiting")
        other = again.headers["x-chat-id"]
        assert again.json()["choices"][0]["message"]["content"] == notice(other)  # the model said nothing itself
        provider.enqueue(Reply(text="Paid."))
        assert (await events_of(alice, f"/api/chats/{other}/approvals", APPROVE))[-1]["status"] == "completed"
    assert counted(ledger) == ["paid"]


async def test_a_streamed_openai_answer_ends_with_what_waits(live: Live, provider: FakeProvider, ledger: Path) -> None:
    provider.enqueue(waiting_reply(ledger, "I will pay."))
    async with openai_client(live) as client:
        stream = await client.chat.completions.with_raw_response.create(model="payer", messages=PAY,
                                                                         stream=True)  # fmt: skip
        chat_id = stream.headers["x-chat-id"]  # (no X-Yao-Status: headers leave before the run ends)
        chunks = [chunk async for chunk in stream.parse()]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    contents = [d.content for d in deltas if d.content]
    assert "".join(contents) == f"I will pay.\n\n{notice(chat_id)}"  # as the non-streamed answer says it
    assert contents[-1] == f"\n\n{notice(chat_id)}"  # the last content chunk, once the run has ended
    assert all(d.tool_calls is None and d.function_call is None for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices[0].finish_reason == "stop"
    async with live.client() as alice:
        assert (await alice.get(f"/api/chats/{chat_id}/approvals")).json()["approvals"] == approvals_of(ledger)
    assert counted(ledger) == []


# --- a decision elsewhere: after a restart, in another process --------------------------------------------


async def reopened(url: str, tmp_path: Path) -> SqlStore:
    """The same database, opened anew (as a restarted server opens it)."""
    return SqlStore(await open_engine(store_url(url, tmp_path)))


async def test_a_decision_after_a_restart_continues_the_run(
    tmp_path: Path, store: SqlStore, store_raw_url: str, provider: FakeProvider, ledger: Path
) -> None:
    async with running(payer_runtime(tmp_path / "app", store, provider)) as before, before.client() as alice:
        chat_id, events = await start_waiting(alice, provider, ledger)
    again = await reopened(store_raw_url, tmp_path)
    rt = payer_runtime(tmp_path / "app", again, provider)
    rt.ids = RandomIds()  # a new process: its own ids, never the first one's again
    try:
        async with running(rt) as after, after.client() as alice:
            provider.enqueue(Reply(text="Paid."))
            continued = await events_of(alice, f"/api/chats/{chat_id}/approvals", APPROVE)
            run = await after.rt.store.latest_run(ALICE, chat_id)
    finally:
        await again.aclose()
    assert continued[-1]["status"] == "completed"
    assert counted(ledger) == ["paid"]
    assert run is not None and run.resumed_from == events[-1]["run_id"]


def served_elsewhere(app: Path, db: str, tmp_path: Path) -> AbstractAsyncContextManager[str]:
    """`yao-agent serve` of the app in another OS process on the database `db`; its base URL."""
    return serving(app, db, tmp_path / "serve.err")


async def test_a_decision_in_another_process_continues_the_run(
    live: Live, provider: FakeProvider, ledger: Path, store_raw_url: str, tmp_path: Path
) -> None:
    """The wait starts here; a `yao-agent serve` process on the same database and app folder decides, and
    runs the tool with its own (stdio) MCP server."""
    async with live.client() as alice:
        chat_id, events = await start_waiting(alice, provider, ledger)
    async with served_elsewhere(live.rt.app.root, store_raw_url, tmp_path) as url:
        headers = {"Authorization": f"Bearer {live.tokens['alice']}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as there:
            waiting = await there.get(f"/api/chats/{chat_id}/approvals")
            assert waiting.json()["approvals"] == approvals_of(ledger), waiting.text
            provider.enqueue(Reply(text="Paid over there."))
            continued = await events_of(there, f"/api/chats/{chat_id}/approvals", APPROVE)
    results = {e["tool_call_id"]: e["result"] for e in by_type(continued, "tool_result")}
    assert (continued[-1]["status"], results) == ("completed", {"t1": "counted paid", "a1": "5"})
    assert counted(ledger) == ["paid"]
    async with live.client() as alice:  # this server sees the other's outcome in the shared store
        said = await history(alice, chat_id)
        error_of(await alice.get(f"/api/chats/{chat_id}/approvals"), 404, "not_found")
    assert said[-1]["content"] == "Paid over there."
    run = await live.rt.store.latest_run(ALICE, chat_id)
    assert run is not None and (run.status, run.resumed_from) == ("completed", events[-1]["run_id"])


# --- arguments that are no plain JSON ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "why"),
    [('"label": 1e999', "1e999 is beyond what a JSON number may hold"),
     ('"label": "cheap", "label": "dear"', "the key 'label' is given twice"),
     ('"label": NaN', "NaN is not a JSON number")],
)  # fmt: skip
async def test_the_approver_sees_what_the_model_wrote_when_it_is_no_plain_json(
    live: Live, provider: FakeProvider, ledger: Path, written: str, why: str
) -> None:
    """Readers differ on such text (which `label` wins; a number no double holds): the person is shown
    the very text, never one reading of it, nothing answers 500, and approving it runs no tool — the model
    is told why its arguments were refused."""
    arguments = f'{{"path": {json.dumps(str(ledger))}, {written}}}'
    provider.enqueue(Reply(tool_calls=(ToolCall("testing__tally", arguments, id="t1"),)))
    shown = [{"tool_call_id": "t1", "server": "testing", "tool": "tally", "arguments": arguments}]
    async with live.client() as alice:
        async with alice.stream("POST", "/api/assistants/payer/runs", json={"messages": says("pay")}) as response:
            frames = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
        events = [strict_loads(frame) for frame in frames]  # every frame is plain JSON
        chat_id = events[0]["chat_id"]
        assert [{k: e[k] for k in shown[0]} for e in by_type(events, "approval_request")] == shown
        assert events[-1]["approvals"] == shown
        waiting = await alice.get(f"/api/chats/{chat_id}/approvals")
        assert waiting.status_code == 200, waiting.text
        assert waiting.json()["approvals"] == shown
        provider.enqueue(Reply(text="I will write it properly."))
        done = await alice.post(f"/api/chats/{chat_id}/approvals?stream=false", json=APPROVE)
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed"
    assert counted(ledger) == []
    told = tool_messages(provider)["t1"]
    assert f"invalid JSON in the arguments: {why}" in told and arguments[:150] in told
