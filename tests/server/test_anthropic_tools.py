"""Tools the client brings to `POST /v1/messages`, driven by the official `anthropic` client: a call of one
ends the message with `tool_use` blocks (`stop_reason: "tool_use"`), whole or streamed as Anthropic streams
them, and the client's `tool_result` blocks continue the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import MessageParam, TextBlockParam, ToolParam, ToolResultBlockParam, ToolUseBlock

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from tests.support.tools import weather_call
from yao_agent.identity import Identity
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

ALICE = Identity("alice")
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME: ToolParam = {"name": "local_time", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
ASK: list[MessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
TOOLED = "name: Tooled\nmcp: {servers: [testing]}\n"


def tooled_runtime(root: Path, store: SqlStore, provider: FakeProvider) -> Runtime:
    """`chat` (no tools of its own) and `tooled` (the testing MCP server's tools, run in process)."""
    files = server_files(provider.base_url)
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = TOOLED
    rt = make_runtime(root, store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    return rt


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(tooled_runtime(tmp_path / "app", store, provider)) as served:
        yield served


def client_of(live: Live) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=live.url, api_key=live.tokens["alice"], max_retries=0)


def result(call_id: str, content: str | list[TextBlockParam], is_error: bool = False) -> ToolResultBlockParam:
    given: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    return {**given, "is_error": True} if is_error else given


def sent_tools(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


async def test_a_two_step_tool_conversation(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Let me look.", tool_calls=(weather_call(),)), Reply(text="Sunny, 21 °C in Paris."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(model="chat", max_tokens=200, messages=ASK,
                                                             tools=[WEATHER])  # fmt: skip
        first, chat_id = await raw.parse(), raw.headers["x-chat-id"]
        assert first.stop_reason == "tool_use" and "x-yao-status" not in raw.headers
        text, call = first.content
        assert text.type == "text" and text.text == "Let me look."
        assert isinstance(call, ToolUseBlock) and (call.id, call.name, call.input) == (
            "call_w1", "get_weather", {"city": "Paris"})  # fmt: skip
        follow: list[MessageParam] = [
            *ASK,
            {"role": "assistant", "content": first.content},  # (as Anthropic's docs send the reply back)
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
        ]
        second = await client.messages.create(model="chat", max_tokens=200, messages=follow, tools=[WEATHER],
                                              extra_headers={"X-Chat-Id": chat_id})  # fmt: skip
    assert [(b.type, getattr(b, "text", None)) for b in second.content] == [("text", "Sunny, 21 °C in Paris.")]
    assert second.stop_reason == "end_turn"
    assert [sent_tools(r.body) for r in provider.requests] == [["get_weather"], ["get_weather"]]
    assert provider.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21 C"}
    history = await live.rt.store.history(ALICE, chat_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]  # nothing resent stored twice
    assert history[2].content == "sunny, 21 C"
    runs = await live.rt.store.runs_of(ALICE, chat_id)
    assert [(r.status, r.reason) for r in reversed(runs)] == [("waiting", "client_tools"), ("completed", "completed")]
    assert runs[0].resumed_from == runs[1].id  # the continuation is the same run going on


async def test_streamed_tool_use_is_assembled_by_the_clients_accumulator(live: Live, provider: FakeProvider) -> None:
    calls = (weather_call("call_w1", "Paris"), ToolCall("local_time", {"city": "Rome"}, id="call_t1"))
    provider.enqueue(Reply(text="Looking both up.", tool_calls=calls, chunk_size=4), Reply(text="Sunny; noon."))
    async with client_of(live) as client:
        async with client.messages.stream(model="chat", max_tokens=200, messages=ASK, tools=[WEATHER, TIME]) as stream:
            final = await stream.get_final_message()
        chat_id = stream.response.headers["x-chat-id"]
        assert final.stop_reason == "tool_use"
        assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
        assert getattr(final.content[0], "text", None) == "Looking both up."
        used = [b for b in final.content if isinstance(b, ToolUseBlock)]
        assert [(b.id, b.name, b.input) for b in used] == [
            ("call_w1", "get_weather", {"city": "Paris"}), ("call_t1", "local_time", {"city": "Rome"})]  # fmt: skip
        follow: list[MessageParam] = [
            *ASK,
            {"role": "assistant", "content": final.content},
            {"role": "user", "content": [result("call_w1", "sunny"), result("call_t1", "12:00")]},
        ]
        async with client.messages.stream(model="chat", max_tokens=200, messages=follow, tools=[WEATHER, TIME],
                                          extra_headers={"X-Chat-Id": chat_id}) as stream:  # fmt: skip
            answer = await stream.get_final_message()
    assert [getattr(b, "text", None) for b in answer.content] == ["Sunny; noon."] and answer.stop_reason == "end_turn"
    history = await live.rt.store.history(ALICE, chat_id)
    assert [(m.role, m.content) for m in history][2:] == [("tool", "sunny"), ("tool", "12:00"),
                                                          ("assistant", "Sunny; noon.")]  # fmt: skip


async def test_the_stream_numbers_its_blocks_as_anthropic_does(live: Live, provider: FakeProvider) -> None:
    """Without text, the first tool_use block is block 0; each block opens, gets its input's JSON, closes."""
    provider.enqueue(Reply(tool_calls=(weather_call(),)))
    ask = {"model": "chat", "max_tokens": 50, "messages": ASK, "tools": [WEATHER], "stream": True}
    async with live.client() as http:
        response = await http.post("/v1/messages", json=ask)
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["message_start", "ping", "content_block_start", "content_block_delta",
                                           "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    start, delta, stop = events[2:5]
    assert start == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "call_w1", "name": "get_weather", "input": {}},
    }
    assert delta["index"] == 0 and delta["delta"]["type"] == "input_json_delta"
    assert json.loads(delta["delta"]["partial_json"]) == {"city": "Paris"}
    assert stop == {"type": "content_block_stop", "index": 0}
    assert events[5]["delta"]["stop_reason"] == "tool_use"


async def test_parallel_calls_beside_the_assistants_own_tools(live: Live, provider: FakeProvider) -> None:
    """The server's call of the same reply runs first; the client gets only its own two calls."""
    calls = (weather_call("call_w1", "Paris"), ToolCall("testing__echo", '{"text": "hi"}', id="call_s1"),
             ToolCall("local_time", '{"city": "Paris"}', id="call_t1"))  # fmt: skip
    provider.enqueue(Reply(tool_calls=calls), Reply(text="Sunny, and it is noon."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(model="tooled", max_tokens=200, messages=ASK,
                                                             tools=[WEATHER, TIME])  # fmt: skip
        first, chat_id = await raw.parse(), raw.headers["x-chat-id"]
        assert [(b.type, getattr(b, "id", None)) for b in first.content] == [
            ("tool_use", "call_w1"), ("tool_use", "call_t1")]  # fmt: skip
        follow: list[MessageParam] = [
            *ASK,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result("call_w1", "sunny"), result("call_t1", "12:00")]},
        ]
        second = await client.messages.create(model="tooled", max_tokens=200, messages=follow,
                                              tools=[WEATHER, TIME], extra_headers={"X-Chat-Id": chat_id})  # fmt: skip
    assert [getattr(b, "text", None) for b in second.content] == ["Sunny, and it is noon."]
    assert "parallel_tool_calls" not in provider.requests[0].body  # (the model's default: several at once)
    assert {"get_weather", "local_time", "testing__echo"} <= set(sent_tools(provider.requests[0].body))
    results = {m["tool_call_id"]: m["content"] for m in provider.requests[1].messages if m["role"] == "tool"}
    assert results == {"call_w1": "sunny", "call_s1": "hi", "call_t1": "12:00"}
    history = await live.rt.store.history(ALICE, chat_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "tool", "assistant"]


async def test_tool_choice_reaches_the_model_as_openais(live: Live, provider: FakeProvider) -> None:
    forced = {"type": "function", "function": {"name": "get_weather"}}
    provider.enqueue(Reply(text="no tools"), Reply(text="a call?"), Reply(text="that call?"), Reply(text="one"))
    choices: list[Any] = [{"type": "none"}, {"type": "any"}, {"type": "tool", "name": "get_weather"},
                          {"type": "auto", "disable_parallel_tool_use": True}]  # fmt: skip
    async with client_of(live) as client:
        for choice in choices:
            await client.messages.create(model="chat", max_tokens=50, messages=ASK, tools=[WEATHER], tool_choice=choice)
        with pytest.raises(anthropic.BadRequestError) as unknown:
            await client.messages.create(model="chat", max_tokens=50, messages=ASK, tools=[WEATHER],
                                         tool_choice={"type": "tool", "name": "nothing"})  # fmt: skip
    bodies = [r.body for r in provider.requests]
    assert [b.get("tool_choice") for b in bodies] == ["none", "required", forced, None]
    assert [b.get("parallel_tool_calls") for b in bodies] == [None, None, None, False]
    assert unknown.value.type == "invalid_request_error"
    assert "tool_choice: no tool named 'nothing'" in str(unknown.value.message)


async def test_a_clash_and_a_server_tool_are_refused(live: Live, provider: FakeProvider) -> None:
    clash: ToolParam = {"name": "testing__echo", "input_schema": {"type": "object"}}
    search: Any = {"type": "web_search_20250305", "name": "web_search"}
    async with client_of(live) as client:
        with pytest.raises(anthropic.BadRequestError) as clashed:
            await client.messages.create(model="tooled", max_tokens=50, messages=ASK, tools=[clash])
        with pytest.raises(anthropic.BadRequestError) as served:
            await client.messages.create(model="chat", max_tokens=50, messages=ASK, tools=[WEATHER, search])
        with pytest.raises(anthropic.BadRequestError) as twice:
            await client.messages.create(model="chat", max_tokens=50, messages=ASK, tools=[WEATHER, WEATHER])
    assert clashed.value.status_code == 400 and clashed.value.type == "invalid_request_error"
    assert "'testing__echo' is also the name of one of the assistant's own tools" in str(clashed.value.message)
    assert served.value.type == "invalid_request_error"
    assert "tools[1].type: 'web_search_20250305'" in str(served.value.message)
    assert "tools[1].name: 'get_weather' is given twice" in str(twice.value.message)
    assert provider.requests == [] and await live.rt.store.list_chats(ALICE) == []


async def test_results_without_a_chat_id_continue_the_chat_that_waits(live: Live, provider: FakeProvider) -> None:
    """A client that keeps the conversation itself names no chat: the calls' ids find the one waiting."""
    provider.enqueue(Reply(tool_calls=(weather_call("call_only_here"),)), Reply(text="Sunny."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(model="chat", max_tokens=50, messages=ASK,
                                                             tools=[WEATHER])  # fmt: skip
        first = await raw.parse()
        follow: list[MessageParam] = [
            *ASK,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result("call_only_here", "sunny")]},
        ]
        again = await client.messages.with_raw_response.create(model="chat", max_tokens=50, messages=follow,
                                                               tools=[WEATHER])  # fmt: skip
    assert again.headers["x-chat-id"] == raw.headers["x-chat-id"]
    assert [getattr(b, "text", None) for b in (await again.parse()).content] == ["Sunny."]
    assert len(await live.rt.store.list_chats(ALICE)) == 1


async def test_an_error_result_reaches_the_model_as_one(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(tool_calls=(weather_call(),)), Reply(text="The service is down."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(model="chat", max_tokens=50, messages=ASK,
                                                             tools=[WEATHER])  # fmt: skip
        first, chat_id = await raw.parse(), raw.headers["x-chat-id"]
        failed = result("call_w1", [{"type": "text", "text": "timeout"}], is_error=True)
        follow: list[MessageParam] = [
            *ASK,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [failed]},
        ]
        await client.messages.create(model="chat", max_tokens=50, messages=follow, tools=[WEATHER],
                                     extra_headers={"X-Chat-Id": chat_id})  # fmt: skip
    assert provider.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "error: timeout"}


async def test_words_beside_the_results_follow_them(live: Live, provider: FakeProvider) -> None:
    """An Anthropic client may put text in the turn of its tool results: the results continue the run, and
    the model reads the words after them, as they are stored."""
    provider.enqueue(Reply(text="Let me look.", tool_calls=(weather_call(),)), Reply(text="Sunny; rain tomorrow."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(model="chat", max_tokens=50, messages=ASK,
                                                             tools=[WEATHER])  # fmt: skip
        first, chat_id = await raw.parse(), raw.headers["x-chat-id"]
        turn: list[Any] = [result("call_w1", "sunny"), {"type": "text", "text": "And tomorrow?"}]
        follow: list[MessageParam] = [*ASK, {"role": "assistant", "content": first.content},
                                      {"role": "user", "content": turn}]  # fmt: skip
        answer = await client.messages.create(model="chat", max_tokens=50, messages=follow, tools=[WEATHER],
                                              extra_headers={"X-Chat-Id": chat_id})  # fmt: skip
    assert [getattr(b, "text", None) for b in answer.content] == ["Sunny; rain tomorrow."]
    said = [(m["role"], m.get("content")) for m in provider.requests[1].messages[1:]]
    assert said == [("user", "Weather in Paris?"), ("assistant", "Let me look."), ("tool", "sunny"),
                    ("user", "And tomorrow?")]  # fmt: skip
    history = await live.rt.store.history(ALICE, chat_id)
    assert [(m.role, m.content) for m in history] == [
        ("user", "Weather in Paris?"), ("assistant", "Let me look."), ("tool", "sunny"), ("user", "And tomorrow?"),
        ("assistant", "Sunny; rain tomorrow.")]  # fmt: skip
    runs = await live.rt.store.runs_of(ALICE, chat_id)
    assert [(r.status, r.reason) for r in reversed(runs)] == [("waiting", "client_tools"), ("completed", "completed")]
