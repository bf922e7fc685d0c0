# The SDK types `Response.output` as a union of every item kind: these tests read the function_call and
# message items the assertions check; narrowing each for the type checker would hide what is tested.
# pyright: reportAttributeAccessIssue=false, reportUnknownMemberType=false, reportUnknownArgumentType=false
# pyright: reportUnknownVariableType=false
"""Tools the client brings to `/v1/responses`: function tools offered beside the assistant's, a reply
calling one ends with `function_call` items, and `function_call_output` items continue the run — with the
whole conversation resent or after `previous_response_id`, streamed or not, with the official `openai`
client and the OpenAI Agents SDK on its default (Responses) model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files
from tests.support.tools import weather_call
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall

ALICE = Identity("alice")
WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
PARIS = json.dumps({"city": "Paris"})

set_tracing_disabled(True)  # the Agents SDK would send its traces to OpenAI


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url))) as served:
        yield served


def results_sent(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


async def test_a_function_call_and_its_output_resent_with_the_conversation(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Let me look.", tool_calls=(weather_call(),)), Reply(text="Sunny in Paris."))
    asked: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    async with openai_client(live) as client:
        first = await client.responses.create(model="chat", input=asked, tools=[WEATHER])
        assert first.status == "completed" and [i.type for i in first.output] == ["message", "function_call"]
        assert first.output_text == "Let me look."
        call: Any = first.output[1]
        assert (call.call_id, call.name, json.loads(call.arguments)) == ("call_w1", "get_weather", {"city": "Paris"})
        assert first.tools[0].name == "get_weather"
        follow: list[Any] = [*asked, *(item.model_dump(exclude_none=True) for item in first.output),
                  {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21 C"}]  # fmt: skip
        second = await client.responses.create(model="chat", input=follow, tools=[WEATHER])
    assert second.output_text == "Sunny in Paris." and second.id != first.id
    offered = provider.requests[0].body["tools"]
    assert offered == [{"type": "function", "function": {k: v for k, v in dict(WEATHER).items() if k != "type"}}]
    assert results_sent(provider.requests[1].body) == {"call_w1": "sunny, 21 C"}
    chats = await live.rt.store.list_chats(ALICE)
    assert len(chats) == 1  # the resent conversation continued the chat that waited, once
    history = await live.rt.store.history(ALICE, chats[0].id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2].content == "sunny, 21 C"


async def test_previous_response_id_carries_only_the_outputs(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(tool_calls=(weather_call("call_a"), weather_call("call_b", "Rome"))),
                     Reply(text="Both sunny."))  # fmt: skip
    async with openai_client(live) as client:
        first = await client.responses.create(model="chat", input="Paris and Rome?", tools=[WEATHER],
                                              tool_choice="required", parallel_tool_calls=True)  # fmt: skip
        assert [(i.type, i.call_id) for i in first.output] == [("function_call", "call_a"), ("function_call", "call_b")]
        read = await client.responses.retrieve(first.id)  # what waits, read back at once
        parts = [{"type": "input_text", "text": "also "}, {"type": "input_text", "text": "sunny"}]
        outputs: list[Any] = [{"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
                              {"type": "function_call_output", "call_id": "call_b", "output": parts}]  # fmt: skip
        second = await client.responses.create(model="chat", previous_response_id=first.id, input=outputs,
                                               tools=[WEATHER])  # fmt: skip
    assert [(i.type, i.call_id) for i in read.output] == [("function_call", "call_a"), ("function_call", "call_b")]
    assert second.output_text == "Both sunny." and second.previous_response_id == first.id
    assert provider.requests[0].body["tool_choice"] == "required"
    assert "tool_choice" not in provider.requests[1].body  # forced for the first model call only
    assert results_sent(provider.requests[1].body) == {"call_a": "sunny", "call_b": "also sunny"}


async def test_a_streamed_function_call_as_the_sdk_accumulates_it(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Checking.", tool_calls=(weather_call(),), chunk_size=3), Reply(text="Sunny."))
    async with openai_client(live) as client:
        async with client.responses.stream(model="chat", input="Weather in Paris?", tools=[WEATHER]) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        follow: list[Any] = [{"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}]
        raw = await client.responses.create(model="chat", input=follow, previous_response_id=final.id,
                                            tools=[WEATHER], stream=True)  # fmt: skip
        events = [event async for event in raw]
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[1].arguments == PARIS and final.output[1].call_id == "call_w1"
    assert kinds[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]  # fmt: skip
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Sunny."


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": "bad name", "parameters": {}}]}, "tools[0].name"),
        ({"tools": [WEATHER, WEATHER]}, "given twice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nowhere"}}, "nowhere"),
        ({"input": [{"type": "function_call", "call_id": "c1", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"type": "function_call_output", "output": "4"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call_output", "call_id": "c1",
                     "output": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}, "input[0].output"),
        ({"input": [{"type": "file_search_call", "id": "x"}]}, "input[0].type"),
    ],
)  # fmt: skip
async def test_a_tool_the_server_cannot_honour_is_a_400_naming_it(
    live: Live, provider: FakeProvider, fields: dict[str, Any], said: str
) -> None:
    async with live.client() as client:
        answer = await client.post("/v1/responses", json={"model": "chat", "input": "hi", **fields})
    assert answer.status_code == 400, answer.text
    assert said in answer.json()["error"]["message"]
    assert provider.requests == []


async def test_reasoning_items_of_an_earlier_conversation_are_left_out(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Yes."))
    history: list[Any] = [
        {"role": "user", "content": "Is it sunny?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c0", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c0", "output": "sun"},
        {"role": "user", "content": "Sure?"},
    ]
    async with openai_client(live) as client:
        answer = await client.responses.create(model="chat", input=history)
    assert answer.output_text == "Yes."
    sent = provider.requests[0].messages[-4:]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "c0" and sent[2] == {
        "role": "tool",
        "tool_call_id": "c0",
        "content": "sun",
    }


# --- the OpenAI Agents SDK on its default model, with its own function tool ---------------------------


class Forecast(BaseModel):
    city: str
    celsius: float


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_agents_sdk_runs_its_function_tool_on_its_default_model(
    live: Live, provider: FakeProvider, stream: bool
) -> None:
    provider.enqueue(Reply(tool_calls=(ToolCall("get_weather", PARIS, id="call_ag"),)),
                     Reply(text='{"city": "Paris", "celsius": 21}'))  # fmt: skip
    async with openai_client(live) as client:
        model = OpenAIResponsesModel(model="chat", openai_client=client)
        agent = Agent(name="weather", instructions="use the tool", model=model, tools=[get_weather],
                      output_type=Forecast)  # fmt: skip
        if stream:
            streamed = Runner.run_streamed(agent, "Weather in Paris?")
            async for _ in streamed.stream_events():
                pass
            final = streamed.final_output
        else:
            final = (await Runner.run(agent, "Weather in Paris?")).final_output
    assert final == Forecast(city="Paris", celsius=21)
    assert [t["function"]["name"] for t in provider.requests[0].body["tools"]] == ["get_weather"]
    assert results_sent(provider.requests[1].body) == {"call_ag": "sunny, 21 C in Paris"}
    assert provider.requests[1].body["response_format"]["type"] == "json_schema"
    [chat] = await live.rt.store.list_chats(ALICE)  # the Agents SDK resends the conversation: one chat
    history = await live.rt.store.history(ALICE, chat.id)
    assert [m.role for m in history if m.role != "system"] == ["user", "assistant", "tool", "assistant"]
