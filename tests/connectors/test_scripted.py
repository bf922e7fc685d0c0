"""The offline `scripted` connector travels litellm's path like a real model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.apps import make_app
from tests.connectors.helpers import assemble, drain
from yao_agent.connectors.deltas import ReasoningDelta, TextDelta, ToolCallDelta
from yao_agent.connectors.providers import engine_for
from yao_agent.dsl import load_app
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

WEATHER = """\
type: scripted
chunk_size: 3
rules:
  - match: {role: tool}
    reply: "Forecast: {{ tool_results | join('; ') }}"
  - match: {user: "(?i)weather in (?P<city>\\\\w+)"}
    reasoning: "The user wants {{ match.city }}."
    tool_calls:
      - name: weather__forecast
        arguments: {city: "{{ match.city }}", days: 2}
  - match: {user: "(?i)limit"}
    error: {status: 429, message: slow down}
  - match: {user: "^hello"}
    reply: "You said: {{ last_user }}"
"""


CALL = {"id": "c1", "type": "function", "function": {"name": "weather__forecast", "arguments": "{}"}}


@pytest.fixture
def connector(tmp_path: Path) -> ConnectorSpec:
    app = load_app(make_app(tmp_path, {"connectors/demo/weather.yml": WEATHER}))
    return app.connectors["demo.weather"]


async def test_scripted_text_streams_in_chunks_through_litellm(connector: ConnectorSpec) -> None:
    assert engine_for(connector) == "litellm"
    events = await drain([connector], [{"role": "user", "content": "hello there"}])
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "You said: hello there" and len(texts) == 7
    assert assemble(events).usage is not None
    assert "litellm" in sys.modules


async def test_scripted_tool_call_with_templated_arguments(connector: ConnectorSpec) -> None:
    events = await drain([connector], [{"role": "user", "content": "What's the weather in Lima?"}])
    out = assemble(events)
    assert out.reasoning_text == "The user wants Lima."
    assert isinstance(events[0], ReasoningDelta)
    [call] = out.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("weather__forecast", {"city": "Lima", "days": 2})
    assert len([e for e in events if isinstance(e, ToolCallDelta)]) > 3
    assert out.finish == "tool_calls"


async def test_scripted_answers_from_tool_results(connector: ConnectorSpec) -> None:
    messages = [
        {"role": "user", "content": "weather in Lima"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lima day 1: sunny"},
    ]
    out = assemble(await drain([connector], messages))
    assert out.content == "Forecast: Lima day 1: sunny"


async def test_scripted_error_is_classified_like_a_provider_error(connector: ConnectorSpec) -> None:
    with pytest.raises(ModelError) as caught:
        await drain([connector], [{"role": "user", "content": "rate limit me"}])
    assert (caught.value.kind, caught.value.status, caught.value.retryable) == ("rate_limit", 429, True)


async def test_no_matching_rule_is_a_clear_bad_request(connector: ConnectorSpec) -> None:
    with pytest.raises(ModelError) as caught:
        await drain([connector], [{"role": "user", "content": "something else"}])
    assert caught.value.kind == "bad_request"
    assert "no rule of scripted connector demo.weather" in str(caught.value)
