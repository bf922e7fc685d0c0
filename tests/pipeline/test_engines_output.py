"""Structured output and the context budget through both model engines (the `openai` SDK and litellm),
over real HTTP to the loopback fake provider: what the in-process doubles test in depth holds on the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, runs_of, turn
from yao_agent.events import Compaction
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

CITY = """\
name: City
output:
  schema: {type: object, properties: {name: {type: string}, population: {type: integer}}, required: [name, population]}
"""
# A small window, so that the third turn of long messages has the first ones summarised.
SMALL = (
    "name: Small\ncontext: {max_input_tokens: 700, reserve_output_tokens: 100, compact_at: 0.6, keep_recent_turns: 1}\n"
)
# A large declared window: only the provider's own context error makes this one compact.
LARGE = "name: Large\ncontext: {max_input_tokens: 100000, keep_recent_turns: 3}\n"
LONG = "Please remember this sentence about the harbour, the tides and the old lighthouse keeper. " * 6


@pytest.fixture(params=["openai", "litellm"])
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> AsyncIterator[Runtime]:
    files = app_files(provider.base_url)
    files["connectors/fake/model.yml"] += f"engine: {request.param}\n"
    files |= {"assistants/city/assistant.yml": CITY, "assistants/small/assistant.yml": SMALL,
              "assistants/large/assistant.yml": LARGE}  # fmt: skip
    runtime = make_runtime(tmp_path / "app", store, files, model=provider)
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()


async def transitions(rt: Runtime, chat_id: str, run_id: str) -> list[str | None]:
    view = await runs_of(rt).run_view(ALICE, chat_id, run_id)
    return [s.get("transition") for s in view.to_api()["steps"] if s["type"] == "llm"]


async def test_an_answer_failing_the_schema_is_corrected(rt: Runtime, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='{"name": "Lima"}'), Reply(text='{"name": "Lima", "population": 10000000}'))
    end = end_of(await turn(rt, "Lima?", assistant="city"))
    assert (end.status, end.output) == ("completed", {"name": "Lima", "population": 10000000})
    first, second = provider.requests
    assert first.body["response_format"]["json_schema"]["schema"]["required"] == ["name", "population"]
    assert "'population' is a required property" in json.dumps(second.messages[-1])
    assert await transitions(rt, "c1", end.run_id) == ["first", "output_retry"]


async def test_earlier_turns_are_summarised_to_fit_the_window(rt: Runtime, provider: FakeProvider) -> None:
    provider.enqueue(*[Reply(text="Noted.") for _ in range(8)])
    events = [await turn(rt, f"{n}. {LONG}", assistant="small") for n in range(1, 4)]
    assert all(end_of(e).status == "completed" for e in events)
    [compaction] = [e for run in events for e in run if isinstance(e, Compaction)]
    assert compaction.tokens_after < compaction.tokens_before
    last = provider.requests[-1].messages
    assert any("Summary of the earlier conversation" in str(m["content"]) for m in last)
    assert not any(str(m["content"]).startswith("1. ") for m in last)  # the first turn went into the summary
    stored = [m for m in await rt.store.history(ALICE, "c1") if m.role == "user"]
    assert len(stored) == 3  # every message is still stored


async def test_a_providers_context_error_compacts_and_retries(rt: Runtime, provider: FakeProvider) -> None:
    provider.enqueue(*[Reply(text=f"Answer {n}.") for n in (1, 2, 3)])
    for n in (1, 2, 3):
        assert end_of(await turn(rt, f"{n}. {LONG}", assistant="large")).status == "completed"
    too_long = Reply(status=400, error_code="context_length_exceeded", error_message="maximum context length")
    provider.enqueue(too_long, Reply(text="The summary."), Reply(text="Answer 4."))
    end = end_of(await turn(rt, f"4. {LONG}", assistant="large"))
    assert (end.status, end.reason) == ("completed", "completed")
    assert await transitions(rt, "c1", end.run_id) == ["first", None, "compact_retry"]
    assert "The summary." in json.dumps(provider.requests[-1].messages)
