"""Answer versions over a real uvicorn, on SQLite and PostgreSQL: regenerate an answer, edit a user message,
browse the earlier versions — and what the model is sent afterwards, asserted on the fake provider's wire."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.approvals import counted, events_of, payer_runtime, waiting_reply
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, assert_error, running, server_files, sse
from yao_agent.identity import OPERATOR
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # which messages a run reads is the store's SQL

Messages = list[dict[str, Any]]


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url))) as served:
        yield served


async def ask(client: httpx.AsyncClient, text: str, chat_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if chat_id is not None:
        body["chat_id"] = chat_id
    response = await client.post("/api/assistants/chat/runs?stream=false", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def conversation(client: httpx.AsyncClient, provider: FakeProvider, *turns: tuple[str, str]) -> str:
    """A chat of these (question, answer) turns; its id."""
    chat_id: str | None = None
    for question, answer in turns:
        provider.enqueue(Reply(text=answer))
        chat_id = (await ask(client, question, chat_id))["chat_id"]
    assert chat_id is not None
    return chat_id


async def messages(client: httpx.AsyncClient, chat_id: str, versions: bool = False) -> Messages:
    response = await client.get(f"/api/chats/{chat_id}/messages", params={"versions": "true"} if versions else None)
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def said(found: Messages) -> list[tuple[str, Any]]:
    """Who said what, in order."""
    return [(m["role"], m["content"]) for m in found]


def versions_of(found: Messages) -> list[tuple[str, Any, str | None]]:
    """Who said what, and the run that replaced it (None: current)."""
    return [(m["role"], m["content"], m.get("replaced_by")) for m in found]


def sent(provider: FakeProvider) -> list[tuple[str, Any]]:
    """What the model's latest request carried of the conversation (the system prompt aside)."""
    return [(m["role"], m["content"]) for m in provider.requests[-1].messages if m["role"] != "system"]


async def regenerate(client: httpx.AsyncClient, chat_id: str, **kwargs: Any) -> httpx.Response:
    return await client.post(f"/api/chats/{chat_id}/regenerate?stream=false", **kwargs)


async def edit(client: httpx.AsyncClient, chat_id: str, message_id: str, content: Any) -> httpx.Response:
    body = {"message_id": message_id, "content": content}
    return await client.post(f"/api/chats/{chat_id}/edit?stream=false", json=body)


TURNS = [("what is 2+2?", "4"), ("and 3+3?", "five")]


# --- regenerate -----------------------------------------------------------------------------------------------


async def test_a_regenerated_answer_is_asked_of_the_same_history_and_the_old_one_is_an_earlier_version(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, *TURNS)
        before = await messages(client, chat_id)
        provider.enqueue(Reply(text="6"))
        response = await regenerate(client, chat_id)
        assert response.status_code == 200, response.text
        ran = response.json()
        # The run answered the same question, which it did not store again: its only message is its answer.
        assert (ran["chat_id"], ran["status"], ran["reason"]) == (chat_id, "completed", "completed")
        assert said(ran["messages"]) == [("assistant", "6")]
        assert sent(provider) == [("user", "what is 2+2?"), ("assistant", "4"), ("user", "and 3+3?")]
        assert said(await messages(client, chat_id)) == [*said(before[:3]), ("assistant", "6")]
        assert all("replaced_by" not in m for m in await messages(client, chat_id))
        assert versions_of(await messages(client, chat_id, versions=True)) == [
            ("user", "what is 2+2?", None), ("assistant", "4", None), ("user", "and 3+3?", None),
            ("assistant", "five", ran["run_id"]), ("assistant", "6", None),
        ]  # fmt: skip
        # The next turn, through the OpenAI door, is asked without the earlier version either.
        provider.enqueue(Reply(text="8"))
        asked = {"model": "chat", "messages": [{"role": "user", "content": "and 4+4?"}]}
        door = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id}, json=asked)
        assert door.status_code == 200, door.text
        assert ("assistant", "five") not in sent(provider) and sent(provider)[-2:] == [
            ("assistant", "6"), ("user", "and 4+4?"),
        ]  # fmt: skip


async def test_regenerating_twice_chains_the_versions_and_streams_like_a_run(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, *TURNS)
        provider.enqueue(Reply(text="six?"), Reply(text="6"))
        second = (await regenerate(client, chat_id, json={})).json()
        async with client.stream("POST", f"/api/chats/{chat_id}/regenerate") as response:
            assert response.status_code == 200 and response.headers["x-chat-id"] == chat_id
            assert response.headers["content-type"].startswith("text/event-stream")
            events = await sse(response)
        ends = [events[0]["type"], events[-1]["type"], events[-1]["status"]]
        assert ends == ["stream_start", "stream_end", "completed"]
        third = events[0]["run_id"]
        assert sent(provider) == [("user", "what is 2+2?"), ("assistant", "4"), ("user", "and 3+3?")]
        assert versions_of(await messages(client, chat_id, versions=True))[3:] == [
            ("assistant", "five", second["run_id"]), ("assistant", "six?", third), ("assistant", "6", None),
        ]  # fmt: skip
        assert said(await messages(client, chat_id))[3:] == [("assistant", "6")]


async def test_a_regenerated_run_that_fails_resumes_without_the_earlier_version(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, *TURNS)
        provider.enqueue(Reply(status=500, error_message="down"), Reply(text="6"))
        failed = (await regenerate(client, chat_id)).json()
        assert failed["status"] == "failed", failed
        resumed = await client.post(f"/api/chats/{chat_id}/resume?stream=false")
        assert resumed.status_code == 200 and resumed.json()["status"] == "completed", resumed.text
        assert sent(provider) == [("user", "what is 2+2?"), ("assistant", "4"), ("user", "and 3+3?")]
        assert said(await messages(client, chat_id))[2:] == [("user", "and 3+3?"), ("assistant", "6")]


# --- edit -----------------------------------------------------------------------------------------------------


async def test_an_edit_replaces_the_message_and_everything_after_it(live: Live, provider: FakeProvider) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, ("hi", "hello"), ("capital of Spain?", "Lisbon"),
                                     ("sure?", "yes"))  # fmt: skip
        old = await messages(client, chat_id)
        provider.enqueue(Reply(text="Lisbon"))
        response = await edit(client, chat_id, old[2]["message_id"], "capital of Portugal?")
        assert response.status_code == 200, response.text
        ran = response.json()
        assert said(ran["messages"]) == [("user", "capital of Portugal?"), ("assistant", "Lisbon")]
        assert {m["run_id"] for m in ran["messages"]} == {ran["run_id"]}  # the new text is the run's own message
        assert sent(provider) == [("user", "hi"), ("assistant", "hello"), ("user", "capital of Portugal?")]
        now = [("user", "hi"), ("assistant", "hello"), ("user", "capital of Portugal?"), ("assistant", "Lisbon")]
        assert said(await messages(client, chat_id)) == now
        replaced = [(m["content"], m.get("replaced_by")) for m in await messages(client, chat_id, versions=True)]
        assert replaced == [("hi", None), ("hello", None), ("capital of Spain?", ran["run_id"]),
                            ("Lisbon", ran["run_id"]), ("sure?", ran["run_id"]), ("yes", ran["run_id"]),
                            ("capital of Portugal?", None), ("Lisbon", None)]  # fmt: skip


async def test_an_edit_takes_content_parts_and_an_edited_message_can_be_edited_again(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, ("tell me a joke", "no"))
        first = (await messages(client, chat_id))[0]["message_id"]
        provider.enqueue(Reply(text="a pun"), Reply(text="a limerick"))
        parts = [{"type": "text", "text": "tell me a pun"}]
        edited = (await edit(client, chat_id, first, parts)).json()
        assert sent(provider) == [("user", parts)]
        again = (await edit(client, chat_id, edited["messages"][0]["message_id"], "a limerick, please")).json()
        assert sent(provider) == [("user", "a limerick, please")]
        assert versions_of(await messages(client, chat_id, versions=True)) == [
            ("user", "tell me a joke", edited["run_id"]), ("assistant", "no", edited["run_id"]),
            ("user", parts, again["run_id"]), ("assistant", "a pun", again["run_id"]),
            ("user", "a limerick, please", None), ("assistant", "a limerick", None),
        ]  # fmt: skip
        # An earlier version is browsable, not editable.
        error = assert_error(await edit(client, chat_id, first, "again"), 400, "invalid_request")
        assert error["message"].startswith("message_id:") and "earlier version" in error["message"]


# --- what is refused ------------------------------------------------------------------------------------------


BAD_CONTENT: list[Any] = [None, 5, [], [{"text": "no type"}], [{"type": "text", "text": 7}], {"text": "x"}]


async def test_an_edit_of_no_user_message_or_with_bad_content_is_refused_and_changes_nothing(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, *TURNS)
        before = await messages(client, chat_id, versions=True)
        asked = len(provider.requests)
        assert_error(await edit(client, chat_id, "msg_nobody", "hi"), 404, "not_found")
        error = assert_error(await edit(client, chat_id, before[1]["message_id"], "hi"), 400, "invalid_request")
        assert error["message"].startswith("message_id:") and "not a user message" in error["message"]
        for content in BAD_CONTENT:
            error = assert_error(await edit(client, chat_id, before[0]["message_id"], content), 400, "invalid_request")
            assert error["message"].startswith("content"), (content, error)
        lone = ('{"message_id": "' + before[0]["message_id"] + '", "content": "\\ud800 a lone surrogate"}').encode()
        surrogate = await client.post(f"/api/chats/{chat_id}/edit", content=lone,
                                      headers={"Content-Type": "application/json"})  # fmt: skip
        assert assert_error(surrogate, 400, "invalid_request")["message"].startswith("content")
        no_id = await client.post(f"/api/chats/{chat_id}/edit", json={"content": "hi"})
        assert "message_id" in assert_error(no_id, 400, "invalid_request")["message"]
        unknown = await client.post(f"/api/chats/{chat_id}/edit", json={"message_id": "m", "content": "hi", "x": 1})
        assert_error(unknown, 400, "invalid_request")
        assert await messages(client, chat_id, versions=True) == before and len(provider.requests) == asked


async def test_regenerate_refuses_an_unknown_chat_and_one_with_nothing_to_answer(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        assert_error(await regenerate(client, "chat_nobody"), 404, "not_found")
        provider.enqueue(Reply(text="noted"))
        instructed = await client.post("/api/assistants/chat/runs?stream=false",
                                       json={"messages": [{"role": "system", "content": "be brief"}]})  # fmt: skip
        chat_id = instructed.json()["chat_id"]
        error = assert_error(await regenerate(client, chat_id), 400, "invalid_request")
        assert "no user message" in error["message"]
        assert_error(await regenerate(client, chat_id, json={"metadata": 5}), 400, "invalid_request")
        assert_error(await regenerate(client, chat_id, json={"bogus": True}), 400, "invalid_request")
        assert len(provider.requests) == 1


async def test_another_tenants_chat_is_404_for_versions_and_stays_as_it_was(live: Live, provider: FakeProvider) -> None:
    async with live.client("alice") as alice, live.client("bob") as bob:
        chat_id = await conversation(alice, provider, *TURNS)
        before = await messages(alice, chat_id, versions=True)
        asked = len(provider.requests)
        assert_error(await regenerate(bob, chat_id), 404, "not_found")
        assert_error(await edit(bob, chat_id, before[0]["message_id"], "mine now"), 404, "not_found")
        assert_error(await edit(bob, chat_id, before[0]["message_id"], 5), 404, "not_found")
        assert_error(await bob.get(f"/api/chats/{chat_id}/messages?versions=true"), 404, "not_found")
        assert await messages(alice, chat_id, versions=True) == before and len(provider.requests) == asked


async def test_while_a_run_of_the_chat_is_active_both_are_409_and_replace_nothing(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, ("hi", "hello"))
        first = (await messages(client, chat_id))[0]["message_id"]
        provider.enqueue(Reply(text="slow " * 40, chunk_size=2, delay_s=0.02))
        body = {"chat_id": chat_id, "messages": [{"role": "user", "content": "talk slowly"}]}
        async with client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
            lines = response.aiter_lines()  # (one reader, kept open: the run streams on meanwhile)
            async for line in lines:
                if '"message_delta"' in line:  # streaming: the run is active
                    break
            assert_error(await regenerate(client, chat_id), 409, "chat_busy")
            assert_error(await edit(client, chat_id, first, "hey"), 409, "chat_busy")
            rest = [line async for line in lines if line.startswith("data: ")]
        assert '"completed"' in rest[-1]  # the run was not disturbed
        assert all("replaced_by" not in m for m in await messages(client, chat_id, versions=True))
        assert len(provider.requests) == 2


# --- a run that waits for a person ----------------------------------------------------------------------------


@pytest.fixture
async def payer(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


async def test_regenerating_while_calls_wait_for_approval_denies_them(
    payer: Live, provider: FakeProvider, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with payer.client() as client:
        provider.enqueue(waiting_reply(ledger))
        body = {"messages": [{"role": "user", "content": "pay and add"}]}
        events = await events_of(client, "/api/assistants/payer/runs", body)
        chat_id = events[0]["chat_id"]
        assert events[-1]["status"] == "waiting"
        provider.enqueue(Reply(text="I will not pay."))
        ran = (await regenerate(client, chat_id)).json()
        assert (ran["status"], said(ran["messages"])) == ("completed", [("assistant", "I will not pay.")])
        assert sent(provider) == [("user", "pay and add")]  # the calls that waited are an earlier version
        assert (await client.get(f"/api/chats/{chat_id}/approvals")).status_code == 404  # nothing waits now
        decided = await client.post(f"/api/chats/{chat_id}/approvals?stream=false",
                                    json={"decisions": [{"tool_call_id": "t1", "approve": True}]})  # fmt: skip
        assert decided.status_code in (404, 409), decided.text
        assert counted(ledger) == []  # the tally never ran
        old = [m for m in await messages(client, chat_id, versions=True) if m.get("replaced_by")]
        assert {m["role"] for m in old} == {"assistant", "tool"}
        assert {m["replaced_by"] for m in old} == {ran["run_id"]}
        assert said(await messages(client, chat_id)) == [("user", "pay and add"), ("assistant", "I will not pay.")]


async def test_the_operators_replay_sees_each_turn_as_its_chat_stood_then(live: Live, provider: FakeProvider) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, *TURNS)
        provider.enqueue(Reply(text="6"))
        regenerated = (await regenerate(client, chat_id)).json()["run_id"]
    turns = await live.rt.store.stored_turns(OPERATOR)
    seen = [(t.run.id, [m.content for m in t.before], [m.content for m in t.turn]) for t in turns[:2]]
    assert seen == [
        (regenerated, ["what is 2+2?", "4", "and 3+3?"], ["6"]),  # asked without the answer it replaced
        (turns[1].run.id, ["what is 2+2?", "4"], ["and 3+3?", "five"]),  # what that run said, replaced since
    ]


async def test_the_chat_search_finds_only_the_current_version(live: Live, provider: FakeProvider) -> None:
    async with live.client() as client:
        chat_id = await conversation(client, provider, ("hi", "hello"), ("the capital of Spain?", "Madrid"))
        asked = (await messages(client, chat_id))[2]["message_id"]
        provider.enqueue(Reply(text="Lisbon"))
        assert (await edit(client, chat_id, asked, "the capital of Portugal?")).status_code == 200
        found = {q: [c["chat_id"] for c in (await client.get("/api/chats", params={"q": q})).json()["chats"]]
                 for q in ("Spain", "Madrid", "Portugal", "Lisbon")}  # fmt: skip
        assert found == {"Spain": [], "Madrid": [], "Portugal": [chat_id], "Lisbon": [chat_id]}
