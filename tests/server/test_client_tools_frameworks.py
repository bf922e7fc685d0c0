"""Agent frameworks that bring their own tools, against `/v1/chat/completions` (CONTRACT §9.2): LangChain's
`bind_tools`, the OpenAI Agents SDK's chat-completions model with a `@function_tool`, and PydanticAI with a
function tool and its default output tool. Each runs a tool conversation of its own, streamed and not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall

ALICE = Identity("alice")
PARIS = json.dumps({"city": "Paris"})

set_tracing_disabled(True)  # the Agents SDK would send its traces to OpenAI


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url))) as served:
        yield served


class Forecast(BaseModel):
    city: str
    celsius: float


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_langchain_bind_tools(live: Live, provider: FakeProvider, stream: bool) -> None:
    provider.enqueue(Reply(tool_calls=(ToolCall("get_weather", PARIS, id="call_lc"),)), Reply(text="Sunny in Paris."))
    chat = ChatOpenAI(model="chat", base_url=live.url + "/v1", api_key=SecretStr(live.tokens["alice"]), max_retries=0,
                      streaming=stream, include_response_headers=True)  # fmt: skip
    model: Any = chat.bind_tools([get_weather])  # pyright: ignore[reportUnknownMemberType]
    asked: list[BaseMessage] = [HumanMessage("Weather in Paris?")]
    reply: AIMessage = await model.ainvoke(asked)
    assert [(c["name"], c["args"], c["id"]) for c in reply.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "call_lc")
    ]
    result: ToolMessage = await get_weather.ainvoke(reply.tool_calls[0])  # pyright: ignore[reportUnknownMemberType]
    chat_id = reply.response_metadata["headers"]["x-chat-id"]
    following = chat.model_copy(update={"default_headers": {"X-Chat-Id": chat_id}})
    answer: AIMessage = await following.bind_tools([get_weather]).ainvoke([*asked, reply, result])  # pyright: ignore[reportUnknownMemberType]
    assert answer.content == "Sunny in Paris."
    assert tool_results(provider.requests[1].body) == {"call_lc": "sunny, 21 C in Paris"}
    history = await live.rt.store.history(ALICE, chat_id)  # one chat, continued by the tool's result
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_openai_agents_sdk_chat_completions_model(live: Live, provider: FakeProvider, stream: bool) -> None:
    provider.enqueue(Reply(tool_calls=(ToolCall("weather", PARIS, id="call_ag"),)), Reply(text="Sunny in Paris."))
    async with openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["alice"], max_retries=0) as client:
        agent = Agent(name="helper", instructions="Answer briefly.", tools=[weather],
                      model=OpenAIChatCompletionsModel(model="chat", openai_client=client))  # fmt: skip
        if stream:
            running_agent = Runner.run_streamed(agent, "Weather in Paris?")
            async for _ in running_agent.stream_events():
                pass
            final = running_agent.final_output
        else:
            final = (await Runner.run(agent, "Weather in Paris?")).final_output
    assert final == "Sunny in Paris."
    assert [offered(r.body) for r in provider.requests] == [["weather"], ["weather"]]
    assert tool_results(provider.requests[1].body) == {"call_ag": "sunny, 21 C in Paris"}
    await one_chat(live, ["assistant", "tool", "assistant"])


async def one_chat(live: Live, ending: list[str]) -> None:
    """The framework's turns made one chat (its tool results found the run that waited for them)."""
    [chat] = await live.rt.store.list_chats(ALICE)
    history = await live.rt.store.history(ALICE, chat.id)
    assert [m.role for m in history][-len(ending) :] == ending


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_pydantic_ai_function_tool_and_output_tool(live: Live, provider: FakeProvider, stream: bool) -> None:
    provider.enqueue(
        Reply(tool_calls=(ToolCall("get_forecast", PARIS, id="call_pa"),)),
        Reply(tool_calls=(ToolCall("final_result", json.dumps({"city": "Paris", "celsius": 21}), id="call_out"),)),
    )
    async with openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["alice"], max_retries=0) as client:
        model = OpenAIChatModel(
            "chat", provider=OpenAIProvider(openai_client=client)
        )  # (closed here, with its sockets)
        agent = PydanticAgent(model, output_type=Forecast)

        @agent.tool_plain
        def get_forecast(city: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """The weather in a city."""
            return f"sunny, 21 C in {city}"

        if stream:
            async with agent.run_stream("Weather in Paris?") as streamed:
                output = await streamed.get_output()
        else:
            output = (await agent.run("Weather in Paris?")).output
    assert output == Forecast(city="Paris", celsius=21)
    assert {"get_forecast", "final_result"} <= set(offered(provider.requests[0].body))
    assert tool_results(provider.requests[1].body) == {"call_pa": "sunny, 21 C in Paris"}
    await one_chat(live, ["assistant", "tool", "assistant", "tool"])  # the output tool's call waits, unanswered
