"""A connector's `capabilities` decide what reaches the provider, and which requests it cannot take."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.support.connectors import ENGINES, EngineName, assemble, drain, fake_connector
from yao_agent.connectors import CallOptions, Engines, Fallback, ModelRequest, stream_call
from yao_agent.dsl.specs import Capabilities, ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply

PICTURE = {"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]}  # fmt: skip
TOOL = {"type": "function", "function": {"name": "t", "description": "a tool", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
STRUCTURED = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA}}


def able(connector: ConnectorSpec, **caps: Any) -> ConnectorSpec:
    return dataclasses.replace(connector, capabilities=Capabilities(**caps))


async def sent(connector: ConnectorSpec, provider: FakeProvider, **options: Any) -> dict[str, Any]:
    """The body the provider received for one call with `options` and one tool offered."""
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], options=CallOptions.of(options))
    engines = Engines()
    try:
        async for _ in stream_call([connector], request, engines=engines):
            pass
    finally:
        await engines.aclose()
    return provider.requests[-1].body


async def test_images_to_a_connector_without_vision_fail_naming_it(provider: FakeProvider) -> None:
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(provider.base_url)], [PICTURE])
    assert str(caught.value) == "connector fake.model cannot read images (its capabilities.vision is false)"
    assert provider.requests == []  # refused before a doomed request


async def test_a_chain_skips_the_links_that_cannot_read_images(provider: FakeProvider) -> None:
    blind = fake_connector(provider.base_url, connector_id="a.blind", model="blind")
    seeing = able(fake_connector(provider.base_url, connector_id="b.seeing", model="seeing"), vision=True)
    provider.enqueue(Reply(text="A cat."))
    events = await drain([blind, seeing], [PICTURE])
    [skipped] = [e for e in events if isinstance(e, Fallback)]
    assert (skipped.from_connector, skipped.to_connector) == ("a.blind", "b.seeing")
    assert skipped.reason == "skipped: connector a.blind cannot read images (its capabilities.vision is false)"
    assert assemble(events).content == "A cat." and [r.model for r in provider.requests] == ["seeing"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_without_tool_calls_no_tools_are_offered(provider: FakeProvider, engine: EngineName) -> None:
    connector = able(fake_connector(provider.base_url, engine=engine), tool_calls=False)
    body = await sent(connector, provider, tool_choice="auto", parallel_tool_calls=True)
    assert {"tools", "tool_choice", "parallel_tool_calls"} & set(body) == set()


async def test_reasoning_effort_reaches_only_reasoning_models(provider: FakeProvider) -> None:
    plain = fake_connector(provider.base_url)
    assert "reasoning_effort" not in await sent(plain, provider, reasoning_effort="high")
    thinker = able(plain, reasoning=True)
    assert (await sent(thinker, provider, reasoning_effort="high"))["reasoning_effort"] == "high"


@pytest.mark.parametrize("engine", ENGINES)
async def test_max_tokens_above_the_models_limit_are_lowered(provider: FakeProvider, engine: EngineName) -> None:
    connector = able(fake_connector(provider.base_url, engine=engine), max_output_tokens=1000)
    assert (await sent(connector, provider, max_tokens=50_000))["max_tokens"] == 1000
    assert (await sent(connector, provider, max_tokens=200))["max_tokens"] == 200


async def test_structured_output_goes_as_the_parameter_or_as_words(provider: FakeProvider) -> None:
    native = fake_connector(provider.base_url)
    body = await sent(native, provider, response_format=STRUCTURED)
    assert body["response_format"] == STRUCTURED
    assert body["messages"] == [{"role": "user", "content": "hi"}]

    worded = able(native, structured_output=False)
    body = await sent(worded, provider, response_format=STRUCTURED)
    assert "response_format" not in body
    instruction = body["messages"][-1]
    assert instruction["role"] == "system" and json.dumps(SCHEMA, separators=(",", ":")) in instruction["content"]

    body = await sent(worded, provider, response_format={"type": "json_object"})
    assert body["messages"][-1] == {"role": "system", "content": "Answer with one JSON object only, no other text."}
