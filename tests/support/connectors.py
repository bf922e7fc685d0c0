"""Connectors pointed at the loopback fake provider, and a way to drain a call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from yao_agent.connectors import CallEvent, Engines, FailedTry, Fallback, ModelRequest, RetryPolicy, stream_call
from yao_agent.connectors.assemble import Assembled
from yao_agent.dsl.envvars import EnvValue
from yao_agent.dsl.specs import Capabilities, ConnectorSpec

EngineName = Literal["openai", "litellm"]
ENGINES: tuple[EngineName, ...] = ("openai", "litellm")
NO_RETRY = RetryPolicy(max_attempts=1)


def fake_connector(
    base_url: str,
    *,
    model: str = "text",
    engine: Literal["auto", "openai", "litellm"] = "openai",
    connector_id: str = "fake.model",
    timeout_s: float = 5.0,
    tool_calls: bool = True,
    api_key: str = "sk-test-key-0123456789",
) -> ConnectorSpec:
    return ConnectorSpec(
        id=connector_id,
        type="openai",
        file=f"connectors/{connector_id.replace('.', '/')}.yml",
        model=model,
        api_key=EnvValue(api_key, "test api_key", secret=True),
        base_url=EnvValue(base_url, "test base_url"),
        timeout_s=timeout_s,
        engine=engine,
        capabilities=Capabilities(tool_calls=tool_calls),
    )


class Sleeps:
    """An injected sleep that records what the retry policy asked for and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


async def drain(
    chain: Sequence[ConnectorSpec],
    messages: Sequence[Mapping[str, Any]] = ({"role": "user", "content": "hi"},),
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    engines: Engines | None = None,
    policy: RetryPolicy = NO_RETRY,
    sleep: Sleeps | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[CallEvent]:
    own = engines is None
    engines = engines or Engines()
    events: list[CallEvent] = []
    try:
        request = ModelRequest(messages=list(messages), tools=list(tools))
        async for event in stream_call(
            chain, request, engines=engines, policy=policy, sleep=sleep or Sleeps(), environ=environ
        ):
            events.append(event)
    finally:
        if own:
            await engines.aclose()
    return events


def assemble(events: Sequence[CallEvent]) -> Assembled:
    out = Assembled()
    for event in events:
        if not isinstance(event, Fallback | FailedTry):
            out.add(event)
    return out


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
