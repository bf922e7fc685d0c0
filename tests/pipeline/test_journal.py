"""The step journal: each step is in the store the moment it completes, and a run that never reached its
flush (its process died) resumes after its last committed step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tests.support.runtimes import ALICE, close, end_of, runs_of, stored, turn
from tests.support.tools import call, in_process, tooled
from tests.support.waits import reached, wait_until
from yao_agent.events import Event, ToolResult
from yao_agent.identity import OPERATOR, Identity
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.records import Approval, LeaseRelease, RunRecord, StepRecord
from yao_agent.store.step_inputs import ToolRound
from yao_agent.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


class DiesBeforeItsFlush(SqlStore):
    """A store whose process "dies" before a run's flush: the journal's commits are all the run leaves."""

    @classmethod
    def over(cls, store: SqlStore) -> DiesBeforeItsFlush:
        return cls(store.db)

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None:  # fmt: skip
        return None


async def tool_results(tooled_rt: Runtime, count: int) -> None:
    async def committed() -> bool:
        return sum(1 for r in await stored(tooled_rt) if r[0] == "tool") >= count

    await wait_until(committed)


def held(tally: Path, label: str, hold: Path, call_id: str) -> ToolCall:
    return call("testing__tally", {"path": str(tally), "label": label, "hold": str(hold)}, call_id)


def counted(tally: Path, label: str, call_id: str) -> ToolCall:
    return call("testing__tally", {"path": str(tally), "label": label}, call_id)


async def step_rows(tooled_rt: Runtime, chat_id: str = "c1") -> list[tuple[str, str, str | None]]:
    run = await tooled_rt.store.latest_run(ALICE, chat_id)
    assert run is not None
    view = await tooled_rt.store.run_view(ALICE, chat_id, run.id)
    assert view is not None
    return [(s.type, s.status, s.transition) for s in view.steps]


async def test_steps_are_stored_while_the_run_goes_on(tooled_rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    tally, hold = tmp_path / "tally", tmp_path / "hold"
    fake.enqueue(
        Reply(tool_calls=(counted(tally, "a", "c1"),)),
        Reply(tool_calls=(counted(tally, "b", "c2"), held(tally, "c", hold, "c3"))),
        Reply(text="All counted."),
    )
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "count"}], chat_id="c1")
    )
    reading = asyncio.create_task(_drain(handle.events()))
    await wait_until(lambda: reached(hold, "started"))  # c3 is running: the run is not over
    await tool_results(tooled_rt, 2)  # c2 finished alongside it: its result is committed as it finishes
    assert await stored(tooled_rt) == [
        ("user", "count", "completed"),
        ("assistant", None, "completed"),
        ("tool", "counted a", "completed"),
        ("assistant", None, "completed"),
        ("tool", "counted b", "completed"),
    ]
    assert await step_rows(tooled_rt) == [("llm", "completed", "first"), ("tool", "completed", None),
                                   ("llm", "completed", "tool_results")]  # fmt: skip
    run = await tooled_rt.store.latest_run(ALICE, "c1")
    assert run is not None and run.status == "running"
    hold.write_text("go")
    events = await reading
    assert end_of(events).status == "completed"
    assert [(m[0], m[1]) for m in await stored(tooled_rt)][-2:] == [
        ("tool", "counted c"),
        ("assistant", "All counted."),
    ]
    assert [s[:2] for s in await step_rows(tooled_rt)] == [
        ("llm", "completed"),
        ("tool", "completed"),
        ("llm", "completed"),
        ("tool", "completed"),
        ("llm", "completed"),
    ]  # fmt: skip — no step twice
    assert tally.read_text().split() == ["a", "b", "c"]


async def _drain(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def dead_run(tmp_path: Path, store: SqlStore, fake: ScriptedModel, replies: Sequence[Reply]) -> Runtime:
    """A run whose process "died" before its flush (its last model call failed, and nothing was flushed),
    then recovered as the next command that opens the store does."""
    runtime = in_process(tooled(tmp_path / "app", DiesBeforeItsFlush.over(store), fake))
    fake.enqueue(*replies, Reply(status=500, error_message="gone"))
    await turn(runtime, "count", assistant="tooled")
    assert await store.recover_interrupted(OPERATOR, lambda _owner, _beat: True) != []
    return runtime


async def resumed(tooled_rt: Runtime, store: SqlStore) -> list[Event]:
    tooled_rt.store = store  # the next process flushes as usual
    return [e async for e in (await runs_of(tooled_rt).resume(ALICE, "c1")).events()]


async def test_a_killed_run_after_a_round_of_results_asks_the_model_with_them(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    tally = tmp_path / "tally"
    tooled_rt = await dead_run(tmp_path, store, fake, [Reply(tool_calls=(counted(tally, "a", "c1"),))])
    try:
        point = await store.resume_point(ALICE, "c1")
        assert point is not None and point.run.status == "interrupted"
        assert [(s.type, s.status, s.transition) for s in point.steps] == [("llm", "interrupted", "tool_results")]
        fake.enqueue(Reply(text="Counted."))
        events = await resumed(tooled_rt, store)
        assert end_of(events).status == "completed"
        assert len(fake.requests) == 3  # the reply with the call is never asked for again
        assert fake.requests[-1].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "counted a"}
        assert tally.read_text().split() == ["a"]
        assert [(m[0], m[1]) for m in await stored(tooled_rt)] == [("user", "count"), ("assistant", None),
                                                          ("tool", "counted a"), ("assistant", "Counted.")]  # fmt: skip
        assert (await step_rows(tooled_rt))[0][2] == "tool_results"
    finally:
        await close(tooled_rt)


async def test_a_killed_run_with_a_complete_answer_is_not_asked_again(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    runtime = in_process(tooled(tmp_path / "app", DiesBeforeItsFlush.over(store), fake))
    fake.enqueue(Reply(text="Done."))
    await turn(runtime, "count", assistant="tooled")
    assert await store.recover_interrupted(OPERATOR, lambda _owner, _beat: True) != []
    try:
        point = await store.resume_point(ALICE, "c1")
        assert point is not None and [(s.type, s.status) for s in point.steps] == [("llm", "interrupted")]
        events = await resumed(runtime, store)
        assert end_of(events).status == "completed"
        assert len(fake.requests) == 1
        assert [(m[0], m[1]) for m in await stored(runtime)] == [("user", "count"), ("assistant", "Done.")]
        assert await store.resume_point(ALICE, "c1") is None
    finally:
        await close(runtime)


async def test_a_killed_round_runs_only_its_calls_without_a_result(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    """The reply's calls: one committed its result, one was in flight. A stand-in result keeps the chat
    valid until the resume runs that one call again, in its place."""
    tally, hold = tmp_path / "tally", tmp_path / "hold"
    runtime = in_process(tooled(tmp_path / "app", DiesBeforeItsFlush.over(store), fake))
    fake.enqueue(Reply(tool_calls=(counted(tally, "b", "c2"), held(tally, "c", hold, "c3"))))
    handle = await runs_of(runtime).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "count"}], chat_id="c1")
    )
    reading = asyncio.create_task(_drain(handle.events()))
    await wait_until(lambda: reached(hold, "started"))
    await tool_results(runtime, 1)
    handle.cancel()  # the process "dies": nothing is flushed
    await reading
    try:
        assert await store.recover_interrupted(OPERATOR, lambda _owner, _beat: True) != []
        point = await store.resume_point(ALICE, "c1")
        assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "interrupted")]
        assert isinstance(given := point.steps[0].input, ToolRound) and given.ids == ["c3"]
        rows = await stored(runtime)
        assert [(r[0], r[1][:12] if r[1] else r[1]) for r in rows] == [
            ("user", "count"), ("assistant", None), ("tool", "counted b"), ("tool", "interrupted:")]  # fmt: skip
        hold.write_text("go")
        fake.enqueue(Reply(text="All counted."))
        events = await resumed(runtime, store)
        assert end_of(events).status == "completed"
        assert [(e.tool_call_id, e.result) for e in events if isinstance(e, ToolResult)] == [("c3", "counted c")]
        assert tally.read_text().split() == ["b", "c"]
        assert len(fake.requests) == 2
        assert [m["content"] for m in fake.requests[-1].messages if m["role"] == "tool"] == ["counted b", "counted c"]
        assert [(m[0], m[1]) for m in await stored(runtime)] == [
            ("user", "count"), ("assistant", None), ("tool", "counted b"), ("tool", "counted c"),
            ("assistant", "All counted.")]  # fmt: skip
    finally:
        await close(runtime)
