"""Tools the client brings to `/v1/chat/completions` (CONTRACT §9.2), driven by the official `openai` client:
the model's call of a client tool ends the answer with `tool_calls`, the run waits, and the client's
results continue it — streamed or not, in parallel, beside the assistant's own tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files
from tests.support.tools import weather_call
from yao_agent.identity import Identity
from yao_agent.ids import RandomIds
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.approvals import NO_CLIENT_RESULT
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

ALICE = Identity("alice")
WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME: ChatCompletionToolParam = {
    "type": "function",
    "function": {"name": "local_time", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
PARIS = json.dumps({"city": "Paris"})
TOOLED = "name: Tooled\nmcp: {servers: [testing]}\n"


def tooled_runtime(root: Path, store: SqlStore, provider: FakeProvider, **options: str) -> Runtime:
    """`chat` (no tools of its own) and `tooled` (the testing MCP server's tools, run in process)."""
    files = server_files(provider.base_url, **options)
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = TOOLED
    rt = make_runtime(root, store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    return rt


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(tooled_runtime(tmp_path / "app", store, provider)) as served:
        yield served


def sent_tools(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


async def test_a_two_step_tool_conversation_with_the_official_client(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Let me look.", tool_calls=(weather_call(),)), Reply(text="Sunny, 21 °C in Paris."))
    async with openai_client(live) as client:
        raw = await client.chat.completions.with_raw_response.create(model="chat", messages=ASK, tools=[WEATHER])
        first = raw.parse()
        chat_id = raw.headers["x-chat-id"]
        [choice] = first.choices
        assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
        [call] = choice.message.tool_calls or []
        assert call.type == "function" and (call.id, call.function.name) == ("call_w1", "get_weather")
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        follow: list[Any] = [  # (the SDK's message params, and its own reply dumped back)
            *ASK,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ]
        second = await client.chat.completions.create(
            model="chat", messages=follow, tools=[WEATHER], extra_headers={"X-Chat-Id": chat_id}
        )
    assert second.choices[0].message.content == "Sunny, 21 °C in Paris."
    assert second.choices[0].finish_reason == "stop"
    # The model was offered the client's tool both times, and got the client's result the second time.
    assert [sent_tools(r.body) for r in provider.requests] == [["get_weather"], ["get_weather"]]
    assert provider.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "call_w1",
                                                         "content": "sunny, 21 C"}  # fmt: skip
    # One chat: the call's result took its stand-in's place, nothing resent was stored twice.
    history = await live.rt.store.history(ALICE, chat_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2].content == "sunny, 21 C"
    runs = await live.rt.store.runs_of(ALICE, chat_id)
    assert [(r.status, r.reason) for r in reversed(runs)] == [("waiting", "client_tools"), ("completed", "completed")]
    assert runs[0].resumed_from == runs[1].id  # the continuation is the same run going on
    assert runs[0].usage["calls"] == 1 and runs[1].usage["calls"] == 1


async def test_streamed_tool_calls_and_their_continuation(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(tool_calls=(weather_call(),)), Reply(text="It is sunny."))
    async with openai_client(live) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=ASK, tools=[WEATHER], stream=True
        )
        chat_id = raw.headers["x-chat-id"]
        chunks = [chunk async for chunk in raw.parse()]
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls = [t for d in deltas for t in d.tool_calls or ()]
        assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]
        assert [(c.index, c.id, c.function and c.function.name) for c in calls] == [(0, "call_w1", "get_weather")]
        follow: list[Any] = [  # (the SDK's message params, and its own reply dumped back)
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": PARIS}}
            ]},
            {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"},
        ]  # fmt: skip
        stream = await client.chat.completions.create(
            model="chat", messages=follow, tools=[WEATHER], stream=True, extra_headers={"X-Chat-Id": chat_id}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "It is sunny."
    history = await live.rt.store.history(ALICE, chat_id)
    assert [(m.role, m.content) for m in history][2:] == [("tool", "sunny"), ("assistant", "It is sunny.")]


async def test_parallel_calls_beside_the_assistants_own_tools(live: Live, provider: FakeProvider) -> None:
    """The server's call of the same reply runs first; the client gets only its own two calls."""
    calls = (weather_call("call_w1", "Paris"), ToolCall("testing__echo", '{"text": "hi"}', id="call_s1"),
             ToolCall("local_time", '{"city": "Paris"}', id="call_t1"))  # fmt: skip
    provider.enqueue(Reply(tool_calls=calls), Reply(text="Sunny, and it is noon."))
    async with openai_client(live) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="tooled", messages=ASK, tools=[WEATHER, TIME], parallel_tool_calls=True
        )
        first, chat_id = raw.parse(), raw.headers["x-chat-id"]
        given = first.choices[0].message.tool_calls or []
        assert [c.id for c in given] == ["call_w1", "call_t1"]
        follow: list[Any] = [  # (the SDK's message params, and its own reply dumped back)
            *ASK,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_t1", "content": "12:00"},
        ]
        second = await client.chat.completions.create(
            model="tooled", messages=follow, tools=[WEATHER, TIME], extra_headers={"X-Chat-Id": chat_id}
        )
    assert second.choices[0].message.content == "Sunny, and it is noon."
    body = provider.requests[0].body
    assert body["parallel_tool_calls"] is True
    assert {"get_weather", "local_time", "testing__echo"} <= set(sent_tools(body))
    results = {m["tool_call_id"]: m["content"] for m in provider.requests[1].body["messages"] if m["role"] == "tool"}
    assert results == {"call_w1": "sunny", "call_s1": "hi", "call_t1": "12:00"}
    history = await live.rt.store.history(ALICE, chat_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "tool", "assistant"]


async def test_tool_choice_reaches_the_model(live: Live, provider: FakeProvider) -> None:
    forced = {"type": "function", "function": {"name": "get_weather"}}
    provider.enqueue(Reply(text="no tools"), Reply(tool_calls=(weather_call(),)), Reply(tool_calls=(weather_call(),)))
    async with openai_client(live) as client:
        for choice in ("none", "required", forced):
            await client.chat.completions.create(
                model="chat",
                messages=ASK,
                tools=[WEATHER],
                tool_choice=choice,  # pyright: ignore[reportArgumentType]
            )
        with pytest.raises(openai.BadRequestError) as unknown:
            await client.chat.completions.create(
                model="chat", messages=ASK, tools=[WEATHER],
                tool_choice={"type": "function", "function": {"name": "nothing"}},
            )  # fmt: skip
    assert [r.body.get("tool_choice") for r in provider.requests] == ["none", "required", forced]
    assert "tool_choice: no tool named 'nothing'" in unknown.value.message


async def test_required_holds_for_the_first_model_call_only(live: Live, provider: FakeProvider) -> None:
    """The server's tool loop answers freely after a forced call, or it could never end."""
    provider.enqueue(Reply(tool_calls=(ToolCall("testing__echo", '{"text": "x"}', id="s1"),)), Reply(text="done"))
    async with openai_client(live) as client:
        answer = await client.chat.completions.create(
            model="tooled", messages=ASK, tools=[WEATHER], tool_choice="required"
        )
    assert answer.choices[0].message.content == "done"
    assert [r.body.get("tool_choice") for r in provider.requests] == ["required", None]


async def test_a_forcing_tool_choice_is_spent_when_the_client_results_continue(
    live: Live, provider: FakeProvider
) -> None:
    """The continuation resumes the run whose first call was forced: it is not forced again unless the
    request that continues it says so itself."""
    provider.enqueue(Reply(tool_calls=(weather_call("c1"),)), Reply(text="Sunny."),
                     Reply(tool_calls=(weather_call("c2"),)), Reply(tool_calls=(weather_call("c3"),)))  # fmt: skip
    async with openai_client(live) as client:
        rounds: list[tuple[Any, Any]] = [("required", None), ("required", "required")]
        for choice, continued in rounds:
            first = await client.chat.completions.with_raw_response.create(
                model="chat", messages=ASK, tools=[WEATHER], tool_choice=choice
            )
            [call] = first.parse().choices[0].message.tool_calls or []
            follow: list[Any] = [*ASK, first.parse().choices[0].message.model_dump(exclude_none=True),
                                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]  # fmt: skip
            extra: dict[str, Any] = {"tool_choice": continued} if continued else {}
            chat = {"X-Chat-Id": first.headers["x-chat-id"]}
            await client.chat.completions.create(model="chat", messages=follow, tools=[WEATHER], extra_headers=chat,
                                                 **extra)  # fmt: skip
    assert [r.body.get("tool_choice") for r in provider.requests] == ["required", None, "required", "required"]


async def test_a_client_tool_named_like_the_assistants_is_refused(live: Live, provider: FakeProvider) -> None:
    clash: ChatCompletionToolParam = {"type": "function", "function": {"name": "testing__echo"}}
    async with openai_client(live) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="tooled", messages=ASK, tools=[clash])
        with pytest.raises(openai.BadRequestError) as twice:
            await client.chat.completions.create(model="chat", messages=ASK, tools=[WEATHER, WEATHER])
    assert "'testing__echo' is also the name of one of the assistant's own tools" in refused.value.message
    assert "'get_weather' is given twice" in twice.value.message
    assert provider.requests == [] and await live.rt.store.list_chats(ALICE) == []


async def test_a_new_user_message_closes_the_unanswered_calls(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(tool_calls=(weather_call(),)), Reply(text="Fine, no weather then."))
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "tools": [WEATHER]})
        chat_id = first.headers["x-chat-id"]
        again = await client.post(
            "/v1/chat/completions", headers={"X-Chat-Id": chat_id},
            json={"model": "chat", "messages": [{"role": "user", "content": "Never mind."}], "tools": [WEATHER]},
        )  # fmt: skip
        resume = await client.post(f"/api/chats/{chat_id}/resume")
    assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == "Fine, no weather then."
    sent = provider.requests[1].body["messages"]
    assert {"role": "tool", "tool_call_id": "call_w1", "content": NO_CLIENT_RESULT} in sent
    history = await live.rt.store.history(ALICE, chat_id)
    assert [(m.role, m.content) for m in history][2:] == [
        ("tool", NO_CLIENT_RESULT), ("user", "Never mind."), ("assistant", "Fine, no weather then.")
    ]  # fmt: skip
    assert resume.status_code == 404  # nothing waits any more


async def test_a_waiting_run_is_continued_by_results_only(live: Live, provider: FakeProvider) -> None:
    """A resume has no results to give (409); results for only some calls are a 400; another tenant's
    results are a 404 — and the run still waits for its client."""
    provider.enqueue(Reply(tool_calls=(weather_call("call_a", "Paris"), weather_call("call_b", "Rome"))))
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "tools": [WEATHER]})
        chat_id = first.headers["x-chat-id"]
        message = first.json()["choices"][0]["message"]
        resume = await client.post(f"/api/chats/{chat_id}/resume")
        partial = [*ASK, message, {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}]
        some = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                 json={"model": "chat", "messages": partial, "tools": [WEATHER]})  # fmt: skip
    async with live.client("bob") as bob:
        whole = [*partial, {"role": "tool", "tool_call_id": "call_b", "content": "rainy"}]
        theirs = await bob.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                json={"model": "chat", "messages": whole, "tools": [WEATHER]})  # fmt: skip
    assert resume.status_code == 409 and "waits for the results of tools the client runs" in resume.text
    assert some.status_code == 400 and "missing: call_b" in some.text
    assert theirs.status_code == 404
    [run] = await live.rt.store.runs_of(ALICE, chat_id)
    assert (run.status, run.reason) == ("waiting", "client_tools") and len(provider.requests) == 1


async def test_without_a_chat_id_the_conversation_is_sent_whole(live: Live, provider: FakeProvider) -> None:
    """A client that keeps its own history (and sends no X-Chat-Id) gets a new chat with all it sent."""
    provider.enqueue(Reply(text="Sunny."))
    conversation: list[Any] = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_x", "content": "sunny"},
    ]  # fmt: skip
    async with live.client() as client:
        answer = await client.post(
            "/v1/chat/completions", json={"model": "chat", "messages": conversation, "tools": [WEATHER]}
        )
    assert answer.json()["choices"][0]["message"]["content"] == "Sunny."
    assert [m["role"] for m in provider.requests[0].body["messages"]][-3:] == ["user", "assistant", "tool"]


async def test_results_without_a_chat_id_continue_the_chat_that_waits_for_them(
    live: Live, provider: FakeProvider
) -> None:
    """Agent frameworks keep the conversation themselves and name no chat: the calls' ids find it."""
    provider.enqueue(Reply(tool_calls=(weather_call("call_only_here"),)), Reply(text="Sunny."))
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "tools": [WEATHER]})
        message = first.json()["choices"][0]["message"]
        result = {"role": "tool", "tool_call_id": "call_only_here", "content": "sunny"}
        async with live.client("bob") as bob:  # another tenant's identical results find nothing of alice's
            theirs = await bob.post(
                "/v1/chat/completions", json={"model": "chat", "messages": [*ASK, message, result], "tools": [WEATHER]}
            )
        provider.enqueue(Reply(text="Sunny."))
        again = await client.post(
            "/v1/chat/completions", json={"model": "chat", "messages": [*ASK, message, result], "tools": [WEATHER]}
        )
    assert theirs.headers["x-chat-id"] != first.headers["x-chat-id"]
    assert again.headers["x-chat-id"] == first.headers["x-chat-id"]
    assert again.json()["choices"][0]["message"]["content"] == "Sunny."
    history = await live.rt.store.history(ALICE, first.headers["x-chat-id"])
    assert [(m.role, m.content) for m in history][2:] == [("tool", "sunny"), ("assistant", "Sunny.")]
    assert len(await live.rt.store.list_chats(ALICE)) == 1


def ask_with(result: dict[str, Any] | None = None, message: dict[str, Any] | None = None) -> dict[str, Any]:
    sent = [*ASK, *([message, result] if message is not None and result is not None else [])]
    return {"model": "chat", "messages": sent, "tools": [WEATHER]}


async def test_a_waiting_run_outlives_its_server(
    tmp_path: Path, store: SqlStore, store_raw_url: str, provider: FakeProvider
) -> None:
    """Nothing waits in memory: a server started anew on the same database continues the run."""
    provider.enqueue(Reply(tool_calls=(weather_call(),)))
    async with running(tooled_runtime(tmp_path / "app", store, provider)) as before, before.client() as client:
        first = await client.post("/v1/chat/completions", json=ask_with())
    chat_id, message = first.headers["x-chat-id"], first.json()["choices"][0]["message"]
    again = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))
    rt = tooled_runtime(tmp_path / "app", again, provider)
    rt.ids = RandomIds()  # a new process: its own ids
    try:
        async with running(rt) as after, after.client() as client:
            provider.enqueue(Reply(text="Sunny."))
            result = {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}
            answer = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                       json=ask_with(result, message))  # fmt: skip
            runs = await after.rt.store.runs_of(ALICE, chat_id)
    finally:
        await again.aclose()
    assert answer.json()["choices"][0]["message"]["content"] == "Sunny."
    assert [(r.status, r.reason) for r in runs] == [("completed", "completed"), ("waiting", "client_tools")]


async def test_the_runs_turn_limit_holds_across_round_trips(
    tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> None:
    """limits.max_turns counts the model calls of every continuation: the run is one run."""
    rt = tooled_runtime(tmp_path / "app", store, provider, limits="{max_turns: 2}")
    provider.enqueue(
        Reply(tool_calls=(weather_call("c1"),)), Reply(text="Still looking.", tool_calls=(weather_call("c2"),))
    )
    async with running(rt) as live, live.client() as client:
        first = await client.post("/v1/chat/completions", json=ask_with())
        chat_id = first.headers["x-chat-id"]
        sent = [*ASK, first.json()["choices"][0]["message"], {"role": "tool", "tool_call_id": "c1", "content": "?"}]
        second = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                    json={"model": "chat", "messages": sent, "tools": [WEATHER]})  # fmt: skip
        sent += [second.json()["choices"][0]["message"], {"role": "tool", "tool_call_id": "c2", "content": "?"}]
        third = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                  json={"model": "chat", "messages": sent, "tools": [WEATHER]})  # fmt: skip
    assert second.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert third.status_code == 200 and third.json()["choices"][0]["finish_reason"] == "length"
    assert len(provider.requests) == 2  # the third model call would have been the run's third turn
    [last, *_] = await rt.store.runs_of(ALICE, chat_id)
    assert (last.status, last.reason) == ("failed", "max_turns")


async def test_a_user_message_after_the_results_follows_them(live: Live, provider: FakeProvider) -> None:
    """Results, then the user's words: the results continue the run and the model reads the words after them."""
    provider.enqueue(Reply(tool_calls=(weather_call(),)), Reply(text="Sunny; rain tomorrow."))
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json=ask_with())
        chat_id, message = first.headers["x-chat-id"], first.json()["choices"][0]["message"]
        sent = [*ASK, message, {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"},
                {"role": "user", "content": "And tomorrow?"}]  # fmt: skip
        again = await client.post("/v1/chat/completions", headers={"X-Chat-Id": chat_id},
                                  json={"model": "chat", "messages": sent, "tools": [WEATHER]})  # fmt: skip
    assert again.json()["choices"][0]["message"]["content"] == "Sunny; rain tomorrow."
    assert [m["role"] for m in provider.requests[1].messages][-3:] == ["assistant", "tool", "user"]
    history = await live.rt.store.history(ALICE, chat_id)
    assert [(m.role, m.content) for m in history][2:] == [
        ("tool", "sunny"), ("user", "And tomorrow?"), ("assistant", "Sunny; rain tomorrow.")]  # fmt: skip
    runs = await live.rt.store.runs_of(ALICE, chat_id)
    assert runs[0].resumed_from == runs[1].id
