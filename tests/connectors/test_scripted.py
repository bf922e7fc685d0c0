"""The offline `scripted` connector streams like a real model and fails like one, without a model SDK."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.apps import make_app
from tests.support.connectors import Sleeps, assemble, drain, fake_connector
from yao_agent.connectors import Engines, Fallback, RetryPolicy
from yao_agent.connectors.deltas import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.providers import engine_for
from yao_agent.connectors.scripted_engine import ScriptedEngine
from yao_agent.dsl import load_app
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply

WEATHER = """\
type: scripted
chunk_size: 3
delay_ms: 15
rules:
  - match: {role: tool}
    reply: "Forecast: {{ tool_results | join('; ') }}"
  - match: {user: "(?i)weather in (?P<city>\\\\w+)"}
    reasoning: "The user wants {{ match.city }}."
    tool_calls:
      - name: weather__forecast
        arguments: {city: "{{ match.city }}", days: 2}
      - name: weather__alerts
        arguments: {city: "{{ match.city }}"}
  - match: {user: "^hello"}
    reply: "You said: {{ last_user }}"
"""
# One rule per provider failure; each gives the same error a provider answering so would.
FAILURES = {
    "e400": (400, "nope"),
    "e401": (401, "bad key"),
    "e403": (403, "not allowed for this project"),
    "e404": (404, "no such model"),
    "e429": (429, "slow down"),
    "e500": (500, "boom"),
    "e503": (503, "down for maintenance"),
    "context": (400, "This model's maximum context length is 8192 tokens"),
}
FAILING = "type: scripted\nrules:\n" + "".join(
    f"  - match: {{user: '^{key}$'}}\n    error: {{status: {status}, message: \"{message}\"}}\n"
    for key, (status, message) in FAILURES.items()
)
CALL = {"id": "c1", "type": "function", "function": {"name": "weather__forecast", "arguments": "{}"}}


@pytest.fixture
def connectors(tmp_path: Path) -> dict[str, ConnectorSpec]:
    files = {"connectors/demo/weather.yml": WEATHER, "connectors/demo/failing.yml": FAILING}
    return dict(load_app(make_app(tmp_path, files)).connectors)


@pytest.fixture
def connector(connectors: dict[str, ConnectorSpec]) -> ConnectorSpec:
    return connectors["demo.weather"]


async def test_scripted_connectors_have_their_own_engine(connector: ConnectorSpec) -> None:
    assert engine_for(connector) == "scripted"
    engines = Engines()
    assert isinstance(engines.get(connector), ScriptedEngine)
    await engines.aclose()


async def test_text_streams_in_chunks_with_the_delay_between_them(connector: ConnectorSpec) -> None:
    pauses = Sleeps()
    engines = Engines({"scripted": ScriptedEngine(sleep=pauses)})
    events = await drain([connector], [{"role": "user", "content": "hello there"}], engines=engines)
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "You said: hello there" and len(texts) == 7
    assert pauses.calls == [0.015] * 6  # between pieces: the first arrives at once
    assert events[-2:] == [Finish("stop"), Usage(3, 6, 9)]


async def test_tool_calls_arrive_in_fragments_like_a_providers(connector: ConnectorSpec) -> None:
    events = await drain([connector], [{"role": "user", "content": "What's the weather in Lima?"}])
    out = assemble(events)
    assert out.reasoning_text == "The user wants Lima."
    assert isinstance(events[0], ReasoningDelta)
    forecast, alerts = out.tool_calls
    assert (forecast.name, json.loads(forecast.arguments)) == ("weather__forecast", {"city": "Lima", "days": 2})
    assert (alerts.name, json.loads(alerts.arguments)) == ("weather__alerts", {"city": "Lima"})
    assert forecast.id.startswith("call_") and forecast.id != alerts.id
    fragments = [e for e in events if isinstance(e, ToolCallDelta) and e.index == 0]
    assert len(fragments) > 3
    assert fragments[0].name == "weather__forecast" and fragments[0].id == forecast.id
    assert all(f.id is None and f.name is None for f in fragments[1:])  # later fragments carry arguments only
    assert out.finish == "tool_calls"


async def test_scripted_answers_from_tool_results(connector: ConnectorSpec) -> None:
    messages = [
        {"role": "user", "content": "weather in Lima"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lima day 1: sunny"},
    ]
    out = assemble(await drain([connector], messages))
    assert out.content == "Forecast: Lima day 1: sunny"


async def _provider_failure(provider: FakeProvider, status: int, message: str) -> ModelError:
    provider.enqueue(Reply(status=status, error_message=message, retry_after=0))
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(provider.base_url, connector_id="demo.failing")])
    return caught.value


@pytest.mark.parametrize("key", list(FAILURES))
async def test_a_scripted_error_is_the_error_a_provider_gives(
    connectors: dict[str, ConnectorSpec], provider: FakeProvider, key: str
) -> None:
    with pytest.raises(ModelError) as caught:
        await drain([connectors["demo.failing"]], [{"role": "user", "content": key}])
    scripted, real = caught.value, await _provider_failure(provider, *FAILURES[key])
    seen = [(e.kind, e.retryable, e.status, e.connector, str(e)) for e in (scripted, real)]
    assert seen[0] == seen[1]  # the provider is behind the openai engine, over HTTP


async def test_a_scripted_rate_limit_is_retried_with_back_off(connectors: dict[str, ConnectorSpec]) -> None:
    sleeps = Sleeps()
    with pytest.raises(ModelError) as caught:
        chain = [connectors["demo.failing"]]
        await drain(chain, [{"role": "user", "content": "e429"}], policy=RetryPolicy(max_attempts=3), sleep=sleeps)
    assert (caught.value.kind, caught.value.status) == ("rate_limit", 429)
    assert sleeps.calls == [0.5, 1.0]


async def test_a_scripted_server_error_falls_back_to_the_next_connector(connectors: dict[str, ConnectorSpec]) -> None:
    chain = [connectors["demo.failing"], connectors["demo.echo"]]
    events = await drain(chain, [{"role": "user", "content": "e503"}])
    [fallback] = [e for e in events if isinstance(e, Fallback)]
    assert (fallback.from_connector, fallback.to_connector) == ("demo.failing", "demo.echo")
    assert "provider error (HTTP 503): down for maintenance" in fallback.reason
    assert assemble(events).content == "You said: e503"


async def test_no_matching_rule_is_a_clear_bad_request(connector: ConnectorSpec) -> None:
    with pytest.raises(ModelError) as caught:
        await drain([connector], [{"role": "user", "content": "something else"}])
    assert (caught.value.kind, caught.value.status, caught.value.retryable) == ("bad_request", 400, False)
    assert "no rule of scripted connector demo.weather" in str(caught.value)
