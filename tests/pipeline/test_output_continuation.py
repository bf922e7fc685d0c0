"""A reply the provider cuts at its output limit (`finish_reason: length`) is continued (CONTRACT §4.7):
one streamed message, one stored message, one `output_recovery` step per continuation, within
`limits.max_output_continuations` and `limits.max_turns`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.apps import make_app
from tests.support.runtimes import ALICE, app_files, close, end_of, make_runtime, runs_of, turn
from tests.support.tools import call, in_process, tooled
from yao_agent.dsl import check_app, load_app
from yao_agent.events import Event, MessageDelta, MessageEnd, MessageStart, ToolResult
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.pipeline.llm import CONTINUE_PROMPT, CUT_CALL_NOTE
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ScriptedModel

ASK = {"role": "user", "content": CONTINUE_PROMPT}


def runtime(root: Path, store: SqlStore, model: ScriptedModel | FakeProvider, limits: str, engine: str = "") -> Runtime:
    files = app_files(model.base_url, limits=limits)
    if engine:
        files["connectors/fake/model.yml"] += f"engine: {engine}\n"
    return make_runtime(root, store, files, model=model)


@pytest.fixture
async def capped(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Runtime]:
    """At most one continuation."""
    rt = runtime(tmp_path / "app", store, fake, "{max_turns: 10, max_output_continuations: 1}")
    try:
        yield rt
    finally:
        await rt.engines.aclose()


def of_kind(events: list[Event], kind: str) -> tuple[list[MessageStart], list[MessageDelta], list[MessageEnd]]:
    """The starts, deltas and ends the stream showed for messages of `kind`."""
    return (
        [e for e in events if isinstance(e, MessageStart) and e.kind == kind],
        [e for e in events if isinstance(e, MessageDelta) and e.kind == kind],
        [e for e in events if isinstance(e, MessageEnd) and e.kind == kind],
    )


async def llm_steps(rt: Runtime, run_id: str, chat_id: str = "c1") -> list[tuple[str | None, str, Any]]:
    """(transition, status, finish) of each `llm` step, as the run's API shows it (finish: from the step)."""
    view = await runs_of(rt).run_view(ALICE, chat_id, run_id)
    shown = [s for s in view.to_api()["steps"] if s["type"] == "llm"]
    finishes = [cast("dict[str, Any]", s.output or {}).get("finish") for s in view.steps if s.type == "llm"]
    return [(s.get("transition"), s["status"], finish) for s, finish in zip(shown, finishes, strict=True)]


async def assistant_messages(rt: Runtime, chat_id: str = "c1") -> list[tuple[Any, Any, str, list[str]]]:
    """(content, reasoning, status, tool call ids) of each stored assistant message."""
    return [
        (m.content, m.reasoning, m.status, [c.id for c in m.tool_calls])
        for m in await runs_of(rt).messages(ALICE, chat_id)
        if m.role == "assistant"
    ]


async def test_a_cut_reply_is_continued_into_one_message(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(
        Reply(text="Once upon a ", finish_reason="length"),
        Reply(text="time there", finish_reason="length"),
        Reply(text=" was a fox."),
    )
    events = await turn(rt, "tell me a story")
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    starts, deltas, ends = of_kind(events, "text")
    assert len(starts) == 1 and len(ends) == 1
    assert {d.message_id for d in deltas} == {starts[0].message_id} == {ends[0].message_id}
    assert (ends[0].content, ends[0].status) == ("Once upon a time there was a fox.", "completed")
    assert await assistant_messages(rt) == [("Once upon a time there was a fox.", None, "completed", [])]
    [stored] = [m for m in await runs_of(rt).messages(ALICE, "c1") if m.role == "assistant"]
    assert stored.id == starts[0].message_id
    assert await llm_steps(rt, end.run_id) == [
        ("first", "completed", "length"), ("output_recovery", "completed", "length"),
        ("output_recovery", "completed", "stop")]  # fmt: skip
    first, second, third = fake.requests
    asked = first.messages
    assert second.messages == [*asked, {"role": "assistant", "content": "Once upon a "}, ASK]
    assert third.messages == [*asked, {"role": "assistant", "content": "Once upon a time there"}, ASK]
    assert end.usage == {
        "input_tokens": 33,
        "output_tokens": 21,
        "total_tokens": 54,
        "cost_usd": None,
        "calls": 3,
    }  # every call counted (the fake model has no published price)


async def test_the_next_turn_sends_the_whole_reply_once(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Hel", finish_reason="length"), Reply(text="lo."), Reply(text="Bye."))
    await turn(rt, "hi")
    await turn(rt, "again")
    assert fake.requests[-1].messages[1:] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "again"},
    ]


async def test_continuations_are_capped(capped: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="one ", finish_reason="length"), Reply(text="two ", finish_reason="length"),
                 Reply(text="never asked"))  # fmt: skip
    end = end_of(await turn(capped, "count"))
    assert (end.status, end.reason) == ("completed", "completed")  # the cut reply stands
    assert len(fake.requests) == 2 and fake.pending == 1
    assert await assistant_messages(capped) == [("one two ", None, "completed", [])]
    assert await llm_steps(capped, end.run_id) == [
        ("first", "completed", "length"), ("output_recovery", "completed", "length")]  # fmt: skip


async def test_zero_continuations_turns_it_off(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    rt = runtime(tmp_path / "app", store, fake, "{max_output_continuations: 0}")
    fake.enqueue(Reply(text="cut sh", finish_reason="length"), Reply(text="never asked"))
    end = end_of(await turn(rt, "go"))
    await rt.engines.aclose()
    assert (end.status, end.reason) == ("completed", "completed")
    assert len(fake.requests) == 1
    assert await assistant_messages(rt) == [("cut sh", None, "completed", [])]
    assert await llm_steps(rt, end.run_id) == [("first", "completed", "length")]


async def test_max_turns_ends_the_continuations_not_the_run(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    rt = runtime(tmp_path / "app", store, fake, "{max_turns: 2}")  # 3 continuations by default
    fake.enqueue(*[Reply(text=f"{n} ", finish_reason="length") for n in range(4)])
    end = end_of(await turn(rt, "count"))
    await rt.engines.aclose()
    assert (end.status, end.reason) == ("completed", "completed")
    assert len(fake.requests) == 2
    assert await assistant_messages(rt) == [("0 1 ", None, "completed", [])]


async def test_reasoning_is_continued_in_its_own_message(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(reasoning="Let me ", finish_reason="length"), Reply(reasoning="think.", text="Yes."))
    events = await turn(rt, "well?")
    starts, _, ends = of_kind(events, "reasoning")
    assert len(starts) == 1 and [(e.content, e.status) for e in ends] == [("Let me think.", "completed")]
    assert await assistant_messages(rt) == [("Yes.", "Let me think.", "completed", [])]
    # Nothing was said yet: no empty assistant message is sent (some providers refuse one).
    assert fake.requests[1].messages == [*fake.requests[0].messages, ASK]


async def test_a_continuation_drops_a_structured_output_constraint(rt: Runtime, fake: ScriptedModel) -> None:
    """A JSON-schema constraint would make the model start a new value rather than finish this one."""
    fake.enqueue(Reply(text='{"a": ', finish_reason="length"), Reply(text="1}"))
    options = {"response_format": {"type": "json_object"}, "temperature": 0.5}
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "json"}], chat_id="c1", options=options)
    result = await runs_of(rt).run(request)
    assert result.status == "completed"
    assert result.messages[-1]["content"] == '{"a": 1}'
    first, second = fake.requests
    assert first.body["response_format"] == {"type": "json_object"}
    assert "response_format" not in second.body and second.body["temperature"] == 0.5


async def test_a_failed_continuation_keeps_the_whole_reply_as_incomplete(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Half a ", finish_reason="length"), Reply(status=500))
    events = await turn(rt, "go")
    end = end_of(events)
    assert (end.status, end.reason) == ("failed", "model_error")
    [done] = of_kind(events, "text")[2]
    assert (done.content, done.status) == ("Half a ", "incomplete")
    assert await assistant_messages(rt) == [("Half a ", None, "incomplete", [])]
    assert await llm_steps(rt, end.run_id) == [("first", "completed", "length"), ("output_recovery", "failed", None)]


@pytest.fixture
async def tools_rt(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Runtime]:
    rt = in_process(tooled(tmp_path / "app", store, fake))
    try:
        yield rt
    finally:
        await close(rt)


async def test_a_tool_call_cut_by_the_limit_is_dropped_and_asked_again(tools_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(
        Reply(text="Adding. ", tool_calls=(call("testing__add", '{"a": 2, "b', "cut"),), finish_reason="length"),
        Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "whole"),)),
        Reply(text="It is 5."),
    )
    events = await turn(tools_rt, "2+3?", assistant="tooled")
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    calls = of_kind(events, "tool_call")[2]
    assert [(e.content["id"], e.status) for e in calls] == [("cut", "incomplete"), ("whole", "completed")]
    assert [e.tool_call_id for e in events if isinstance(e, ToolResult)] == ["whole"]  # the cut call never ran
    assert await assistant_messages(tools_rt) == [
        ("Adding. ", None, "completed", ["whole"]), ("It is 5.", None, "completed", [])]  # fmt: skip
    again = {"role": "user", "content": CONTINUE_PROMPT + CUT_CALL_NOTE}
    assert fake.requests[1].messages[-2:] == [{"role": "assistant", "content": "Adding. "}, again]
    assert [t for t, _, _ in await llm_steps(tools_rt, end.run_id)] == ["first", "output_recovery", "tool_results"]


async def test_whole_calls_before_a_cut_one_stand_uncontinued(tools_rt: Runtime, fake: ScriptedModel) -> None:
    """An assistant message with tool calls cannot be continued before their results: the whole calls run,
    and the model, seeing no trace of the cut one, may make it again."""
    fake.enqueue(
        Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "whole"), call("testing__echo", '{"te', "cut")),
              finish_reason="length"),
        Reply(text="2."),
    )  # fmt: skip
    events = await turn(tools_rt, "1+1?", assistant="tooled")
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    assert [e.tool_call_id for e in events if isinstance(e, ToolResult)] == ["whole"]
    assert await assistant_messages(tools_rt) == [(None, None, "completed", ["whole"]), ("2.", None, "completed", [])]
    assert [t for t, _, _ in await llm_steps(tools_rt, end.run_id)] == ["first", "tool_results"]


@pytest.mark.parametrize("engine", ["openai", "litellm"])
async def test_over_http_with_either_engine(
    engine: str, tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> None:
    rt = runtime(tmp_path / "app", store, provider, "{max_turns: 10}", engine=engine)
    provider.enqueue(Reply(text="Hello ", finish_reason="length"), Reply(text="world."))
    try:
        events = await turn(rt, "hi")
    finally:
        await rt.engines.aclose()
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    starts, _, ends = of_kind(events, "text")
    assert len(starts) == 1 and [(e.content, e.status) for e in ends] == [("Hello world.", "completed")]
    assert await assistant_messages(rt) == [("Hello world.", None, "completed", [])]
    assert await llm_steps(rt, end.run_id) == [
        ("first", "completed", "length"),
        ("output_recovery", "completed", "stop"),
    ]
    first, second = provider.requests
    assert second.messages == [*first.messages, {"role": "assistant", "content": "Hello "}, ASK]


def test_the_limit_is_read_from_app_yml_and_checked(tmp_path: Path) -> None:
    files = app_files("http://127.0.0.1:9/v1", limits="{max_output_continuations: 5}")
    assert load_app(make_app_dir(tmp_path / "five", files)).config.limits.max_output_continuations == 5
    files = app_files("http://127.0.0.1:9/v1", limits="{max_turns: 10}")
    assert load_app(make_app_dir(tmp_path / "default", files)).config.limits.max_output_continuations == 3
    files = app_files("http://127.0.0.1:9/v1", limits="{max_output_continuations: -1}")
    [error] = check_app(make_app_dir(tmp_path / "bad", files)).errors
    assert "max_output_continuations" in str(error)


def make_app_dir(root: Path, files: dict[str, str]) -> Path:
    return make_app(root, files, base={})
