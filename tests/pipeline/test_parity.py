"""Streaming and non-streaming are one loop: every fake-provider scenario stores the same chat either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import ALICE, app_files, make_runtime, runs_of
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

SCENARIOS: dict[str, Reply | str] = {
    "text": "text",
    "echo": "echo",
    "chunks:N": "chunks:30",
    "tool": "tool",
    "tool2": "tool2",
    "reasoning": "reasoning",
    "e400": "e400",
    "e401": "e401",
    "e429": "e429",
    "e500": "e500",
    "e503": "e503",
    "context": "context",
    "drop": "drop",
    # the built-in stall/slow scenarios wait 30 s; the same behaviour, shorter:
    "stall": Reply(text="Hello world", stall_after=2, stall_s=2),
    "slow": Reply(text="Hello world", first_byte_delay_s=2),
    "slowstream": Reply(text="s" * 20, chunk_size=1, delay_s=0.01),
    # paced like clock:N:MS, with fixed text in place of the moments, which differ from run to run:
    "clock:N:MS": Reply(text="1.5 " * 5, chunk_size=4, delay_s=0.01),
}


def test_every_scenario_is_covered() -> None:
    from yao_agent.testing import SCENARIO_NAMES

    assert set(SCENARIOS) == set(SCENARIO_NAMES)


async def _chat(rt: Runtime, chat_id: str) -> tuple[Any, list[tuple[Any, ...]]]:
    run = await rt.store.latest_run(ALICE, chat_id)
    assert run is not None
    messages = [
        (
            m.role,
            m.content,
            m.status,
            m.reasoning,
            [(c.name, c.arguments) for c in m.tool_calls],
            m.tool_call_id is not None,
        )
        for m in await rt.store.history(ALICE, chat_id)
    ]
    return (run.status, run.reason, run.usage), messages


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_streaming_and_not_store_the_same_chat(
    name: str, tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = app_files(fake.base_url)
    files["connectors/fake/model.yml"] = files["connectors/fake/model.yml"].replace("timeout_s: 5", "timeout_s: 0.5")
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    request = [{"role": "user", "content": "What's the weather in Paris?"}]
    fake.enqueue(SCENARIOS[name])
    events = [e async for e in runs_of(rt).stream(RunRequest("chat", ALICE, request, chat_id="streamed"))]
    fake.enqueue(SCENARIOS[name])
    result = await runs_of(rt).run(RunRequest("chat", ALICE, request, chat_id="drained"))
    await rt.engines.aclose()
    streamed, drained = await _chat(rt, "streamed"), await _chat(rt, "drained")
    assert streamed == drained
    assert events[-1].type == "stream_end" and (events[-1].status, events[-1].reason) == (result.status, result.reason)
    assert streamed[1][0][:2] == ("user", "What's the weather in Paris?")
