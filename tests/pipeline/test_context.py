"""The context budget (CONTRACT §4 item 5): tool results cut for the model, earlier turns summarised into a
stored `summary`, an overflow refused before the call, and a provider's context-length error answered
by one harder compaction and one retry. The model is a `FunctionModel` that measures every request it
gets, with a tokenizer of its own (o200k), and refuses one that would not fit its window."""
# pyright: reportTypedDictNotRequiredAccess=false
# (an answer's optional keys are read as present: a missing one is a KeyError, which fails the test)

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.context import (
    AGENT,
    BUDGET,
    CONTEXT,
    WINDOW,
    Model,
    agent_runtime,
    ask,
    is_summariser,
)
from tests.support.runtimes import ALICE, end_of, runs_of, turn
from yao_agent.events import Compaction, StreamEnd
from yao_agent.messages import SUMMARY_HEADING, ChatMessage
from yao_agent.pipeline import Runtime
from yao_agent.pipeline.window import CUT_NOTE
from yao_agent.store import SqlStore
from yao_agent.testing import FunctionModel, RecordedRequest, Reply


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
async def rt(tmp_path: Path, store: SqlStore, model: Model) -> AsyncIterator[Runtime]:
    runtime = agent_runtime(tmp_path, store, FunctionModel(model))
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()
        await runtime.tools.aclose()


async def history(rt: Runtime, chat_id: str = "c1") -> list[ChatMessage]:
    return await rt.store.history(ALICE, chat_id)


@pytest.mark.parametrize("counted", ["estimated", "exactly"])
async def test_a_chat_far_past_its_window_keeps_going_and_keeps_everything(
    tmp_path: Path, store: SqlStore, model: Model, counted: str
) -> None:
    """40 turns, each fetching 1,600 tokens, through a window of 2,000: the run counts with the estimate
    (a model named `text`) or exactly (`gpt-4o-mini`, tiktoken's o200k)."""
    name = "gpt-4o-mini" if counted == "exactly" else "text"
    double = FunctionModel(model)
    connector = f"type: openai\nmodel: {name}\nbase_url: {double.base_url}\napi_key: sk-x\n"
    rt = agent_runtime(tmp_path, store, double, **{"connectors/fake/model.yml": connector})
    turns = 40
    compactions: list[Compaction] = []
    for number in range(1, turns + 1):
        events = await ask(rt, number)
        assert end_of(events).status == "completed", end_of(events)
        compactions += [e for e in events if isinstance(e, Compaction)]

    # every request fitted the budget; the window was reached again and again
    assert max(model.sizes) <= BUDGET
    assert len(compactions) >= 5 and model.summarised
    # every message is still stored: 4 a turn (question, tool call, result, answer), and the summaries
    stored = await history(rt)
    kept = [m for m in stored if m.role != "summary"]
    assert len(kept) == 4 * turns
    assert [m.content for m in kept if m.role == "user"] == [f"turn {n}: fetch the data" for n in range(1, turns + 1)]
    results = [m for m in kept if m.role == "tool"]
    assert [m.content for m in results] == [f"turn {n} data " * 400 for n in range(1, turns + 1)]  # whole
    summaries = [m for m in stored if m.role == "summary"]
    assert [s.id for s in summaries] == [c.summary_message_id for c in compactions]
    for event in compactions:
        assert event.tokens_after < event.tokens_before and event.connector == "fake.model"
        assert event.messages_summarised > 0
    _check_coverage(stored, summaries, model.summarised)
    await rt.engines.aclose()
    await rt.tools.aclose()


def _check_coverage(stored: list[ChatMessage], summaries: list[ChatMessage], asked: list[RecordedRequest]) -> None:
    """Each summary covers from the chat's first message to just before the turns kept whole, and its
    summariser read every turn it newly covers (and the summary before it)."""
    ids = [m.id for m in stored]
    previous_last = -1
    for summary, request in zip(summaries, asked, strict=True):
        assert summary.summarises is not None
        first, last = (ids.index(i) for i in summary.summarises)
        assert first == 0 and last > previous_last
        after = stored[last + 1]
        assert after.role in ("user", "summary")  # the cut falls before a user turn: no call parted from its result
        transcript = request.messages[1]["content"]
        for message in stored[previous_last + 1 : last + 1]:
            if message.role == "user":
                assert str(message.content) in transcript
        if previous_last >= 0:
            assert "[summary of the conversation before this part]" in transcript
        previous_last = last


async def test_a_tool_result_over_its_limit_is_cut_for_the_model_and_stored_whole(rt: Runtime, model: Model) -> None:
    end = end_of(await ask(rt, 1))
    assert end.status == "completed"
    answer_request = model.requests[-1]
    result = answer_request.messages[-1]
    assert result["role"] == "tool"
    note = re.search(r"\[… cut: showed (\d+) of (\d+) tokens; the full result is stored\]$", result["content"])
    assert note is not None and result["content"].startswith("turn 1 data turn 1 data")
    shown, total = int(note[1]), int(note[2])
    assert shown <= 300 < total and CUT_NOTE.format(shown=shown, total=total) in result["content"]
    [stored] = [m for m in await history(rt) if m.role == "tool"]
    assert stored.content == "turn 1 data " * 400


async def test_the_next_run_loads_the_latest_summary_and_what_follows(rt: Runtime, model: Model) -> None:
    number = 0
    while not model.summarised:
        number += 1
        await ask(rt, number)
    stored = await history(rt)
    [summary] = [m for m in stored if m.role == "summary"]
    assert summary.summarises is not None
    after = stored.index(next(m for m in stored if m.id == summary.summarises[1])) + 1
    await ask(rt, number + 1)
    first = model.requests[-2]  # the next run's first call (then its answer's)
    assert first.messages[0]["content"].startswith("You are Agent.")
    assert first.messages[1] == {"role": "system", "content": SUMMARY_HEADING + str(summary.content)}
    expected = [m.content for m in stored[after:] if m.role == "user"] + [f"turn {number + 1}: fetch the data"]
    assert [m["content"] for m in first.messages if m["role"] == "user"] == expected
    assert not any("turn 1:" in str(m["content"]) for m in first.messages if m["role"] == "user")


async def test_a_failed_summary_is_let_by_while_the_request_still_fits(
    rt: Runtime, model: Model, caplog: pytest.LogCaptureFixture
) -> None:
    model.summariser_down = True
    number, ends = 0, list[StreamEnd]()
    while "could not be summarised" not in caplog.text:
        number += 1
        ends.append(end_of(await ask(rt, number)))
    assert ends[-1].status == "completed"
    assert not [m for m in await history(rt) if m.role == "summary"]
    view = await runs_of(rt).run_view(ALICE, "c1", ends[-1].run_id)
    assert view is not None
    assert "recovered" in [s["status"] for s in view.to_api()["steps"] if s["type"] == "llm"]


async def test_a_request_that_cannot_fit_ends_the_run_before_the_call(rt: Runtime, model: Model) -> None:
    events = await turn(rt, "turn 1: " + "lorem ipsum dolor " * 2000, assistant="agent")
    end = end_of(events)
    assert (end.status, end.reason) == ("failed", "context_overflow")
    assert "more than the 1800 the model's window leaves" in end.error["message"]
    assert model.sizes == []  # the doomed call was never made
    assert [m.role for m in await history(rt)] == ["user"]  # the input is kept


async def test_a_providers_context_error_compacts_harder_and_retries_once(
    tmp_path: Path, store: SqlStore, model: Model
) -> None:
    """The provider's window is smaller than the connector says (no `context` budget here at all)."""
    model.window = 1500
    agent = AGENT.replace(f"context: {CONTEXT}", "context: {tool_result_max_tokens: 300, keep_recent_turns: 3}")
    rt = agent_runtime(tmp_path, store, FunctionModel(model), **{"assistants/agent/assistant.yml": agent})
    ends: list[StreamEnd] = []
    for number in range(1, 8):
        events = await ask(rt, number)
        ends.append(end_of(events))
        if any(isinstance(e, Compaction) for e in events):
            break
    assert ends[-1].status == "completed"
    transitions = await _transitions(rt, ends[-1].run_id)
    assert "compact_retry" in transitions
    # the refused call is one the run went past; then the summary (no transition) and the retry
    view = (await runs_of(rt).run_view(ALICE, "c1", ends[-1].run_id)).to_api()  # pyright: ignore[reportOptionalMemberAccess]
    statuses = [(s.get("transition"), s["status"]) for s in view["steps"] if s["type"] == "llm"]
    retry = statuses.index(("compact_retry", "completed"))
    assert statuses[retry - 2][1] == "recovered" and statuses[retry - 1] == (None, "completed")
    await rt.engines.aclose()
    await rt.tools.aclose()


async def test_a_second_context_error_ends_the_run(tmp_path: Path, store: SqlStore, model: Model) -> None:
    refusing = {"on": False}
    model.refuse = lambda request: refusing["on"] and not is_summariser(request)
    rt = agent_runtime(tmp_path, store, FunctionModel(model))
    for number in (1, 2, 3):
        assert end_of(await ask(rt, number)).status == "completed"
    refusing["on"] = True
    events = await ask(rt, 4)
    end = end_of(events)
    assert (end.status, end.reason) == ("failed", "context_overflow")
    assert [e for e in events if isinstance(e, Compaction)]  # it did compact, then was refused again
    assert (await _transitions(rt, end.run_id))[-1] == "compact_retry"
    await rt.engines.aclose()
    await rt.tools.aclose()


async def test_with_nothing_to_compact_a_context_error_ends_the_run_without_a_retry(
    tmp_path: Path, store: SqlStore, model: Model
) -> None:
    model.refuse = lambda request: True
    rt = agent_runtime(tmp_path, store, FunctionModel(model))
    end = end_of(await ask(rt, 1))
    assert (end.status, end.reason) == ("failed", "context_overflow")
    assert len(model.sizes) == 1
    await rt.engines.aclose()
    await rt.tools.aclose()


async def test_without_a_window_nothing_is_cut_or_summarised(tmp_path: Path, store: SqlStore, model: Model) -> None:
    model.window = 10**6
    agent = AGENT.replace(f"context: {CONTEXT}", "context: {tool_result_max_tokens: 10}")
    rt = agent_runtime(tmp_path, store, FunctionModel(model), **{"assistants/agent/assistant.yml": agent})
    for number in range(1, 6):
        assert end_of(await ask(rt, number)).status == "completed"
    assert not model.summarised
    assert model.requests[-1].messages[-1]["content"] == "turn 5 data " * 400
    await rt.engines.aclose()
    await rt.tools.aclose()


async def test_the_connectors_window_is_the_default_and_summaries_may_come_from_another_connector(
    tmp_path: Path, store: SqlStore, model: Model
) -> None:
    agent = AGENT.replace(f"context: {CONTEXT}", "context: {reserve_output_tokens: 200, tool_result_max_tokens: 300, "
                          "keep_recent_turns: 2, summarize_with: 'use::light'}")  # fmt: skip
    double = FunctionModel(model)
    connector = f"type: openai\nmodel: text\nbase_url: {double.base_url}\napi_key: sk-x\n"
    rt = agent_runtime(tmp_path, store, double, **{
        "assistants/agent/assistant.yml": agent,
        "connectors/fake/model.yml": connector + f"capabilities: {{max_input_tokens: {WINDOW}}}\n",
        "connectors/fake/light.yml": connector,
        "app.yml": "roles:\n  default: fake.model\n  light: fake.light\n",
    })  # fmt: skip
    number = 0
    while not model.summarised:
        number += 1
        assert end_of(await ask(rt, number)).status == "completed"
    assert max(model.sizes) <= BUDGET
    assert [r.connector for r in model.requests if is_summariser(r)] == ["fake.light"]
    assert {r.connector for r in model.requests if not is_summariser(r)} == {"fake.model"}
    await rt.engines.aclose()
    await rt.tools.aclose()


async def test_a_summary_whose_first_link_is_down_records_the_failed_try(
    tmp_path: Path, store: SqlStore, model: Model
) -> None:
    """The summariser's chain falls back past a link that is down: that try is a step of the run's own
    (`recovered`, who failed how), before the summary the next link wrote."""
    agent = AGENT.replace("keep_recent_turns: 2}", "keep_recent_turns: 2, summarize_with: 'use::light'}")
    down = Reply(status=503, error_message="down")
    double = FunctionModel(lambda request: down if request.connector == "fake.down" else model(request))
    connector = f"type: openai\nmodel: text\nbase_url: {double.base_url}\napi_key: sk-x\n"
    rt = agent_runtime(tmp_path, store, double, **{
        "assistants/agent/assistant.yml": agent,
        "connectors/fake/light.yml": connector,
        "connectors/fake/down.yml": connector.replace("model: text", "model: down"),
        "app.yml": "roles:\n  default: fake.model\n  light: [fake.down, fake.light]\n",
    })  # fmt: skip
    try:
        number, end = 0, None
        while not model.summarised:
            number += 1
            end = end_of(await ask(rt, number))
            assert end.status == "completed"
        assert end is not None
        view = await runs_of(rt).run_view(ALICE, "c1", end.run_id)
        steps: list[dict[str, Any]] = [dict(s) for s in view.to_api()["steps"] if s["type"] == "llm"]
        at = next(i for i, s in enumerate(steps) if s.get("connector") == "fake.down")
        tried, summary = steps[at], steps[at + 1]
        assert (tried["status"], tried["model"], tried["error"]["kind"]) == ("recovered", "down", "server")
        assert (summary["status"], summary["connector"]) == ("completed", "fake.light")
        assert summary["fallbacks"] == [{"from": "fake.down", "to": "fake.light", "reason": tried["error"]["message"]}]
    finally:
        await rt.engines.aclose()
        await rt.tools.aclose()


async def _transitions(rt: Runtime, run_id: str) -> list[Any]:
    view = await runs_of(rt).run_view(ALICE, "c1", run_id)
    assert view is not None
    return [step.get("transition") for step in view.to_api()["steps"] if step["type"] == "llm"]
