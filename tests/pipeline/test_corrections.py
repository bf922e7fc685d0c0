"""Defects users and a randomized fault run hit first: resume pairing, invalid tool JSON, Next hooks
that only observe, handled failures mistaken for the place a run stopped."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.pairing import request_problems, stored_problems
from tests.support.runtimes import ALICE, close, end_of, runs_of, turn
from tests.support.tools import call, in_process, tooled
from yao_agent.events import Event, MessageEnd, ToolResult
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


async def assert_valid(tooled_rt: Runtime, fake: ScriptedModel, chat_id: str = "c1") -> None:
    assert stored_problems(await tooled_rt.store.history(ALICE, chat_id)) == []
    for number, request in enumerate(fake.requests):
        assert request_problems(request.messages) == [], f"request {number}"


async def resumed(tooled_rt: Runtime, chat_id: str = "c1") -> list[Event]:
    return [e async for e in (await runs_of(tooled_rt).resume(ALICE, chat_id)).events()]


async def test_resume_after_tool_error_reruns_the_last_attempt_and_keeps_one_result_per_call(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(*[Reply(tool_calls=(call("testing__add", {"a": "x", "b": 1}, f"c{n}"),)) for n in range(3)])
    end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
    assert end.reason == "tool_error"
    point = await tooled_rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "failed")]

    # The resume continues the same run: its retries are spent, so the last attempt runs again, fails
    # again, and the run ends as it did — without asking the model for another try.
    events = await resumed(tooled_rt)
    assert (end_of(events).status, end_of(events).reason) == ("failed", "tool_error")
    first = next(e for e in events if isinstance(e, ToolResult))
    assert first.tool_call_id == "c2"  # the call of the attempt that ended the run, not the round's first
    assert len(fake.requests) == 3
    results = [(m.tool_call_id, m.content) for m in await tooled_rt.store.history(ALICE, "c1") if m.role == "tool"]
    assert [r[0] for r in results] == ["c0", "c1", "c2"]  # c2's result replaced in its place
    await assert_valid(tooled_rt, fake)

    fake.enqueue(Reply(text="again"))
    await turn(tooled_rt, "and again", assistant="tooled")
    await assert_valid(tooled_rt, fake)


async def test_repeated_resumes_replace_the_result_in_its_place(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__protocol_fail", {}, "p1"),)))
    assert end_of(await turn(tooled_rt, "go", assistant="tooled")).reason == "tool_error"
    for _ in range(3):
        assert end_of(await resumed(tooled_rt)).reason == "tool_error"
    rows = await tooled_rt.store.history(ALICE, "c1")
    assert [(m.role, m.tool_call_id) for m in rows] == [("user", None), ("assistant", None), ("tool", "p1")]
    await assert_valid(tooled_rt, fake)


async def test_resume_after_a_cancelled_round_keeps_one_result_per_call(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    from yao_agent.pipeline import RunRequest

    naps = (call("testing__nap", {"seconds": 0.01, "label": "quick"}, "q"), call("testing__nap", {"seconds": 0.5}, "s"))
    fake.enqueue(Reply(tool_calls=naps), Reply(text="Rested."))
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "rest"}], chat_id="c1")
    )
    async for event in handle.events():
        if isinstance(event, ToolResult) and event.tool_call_id == "q":
            handle.cancel()
    events = await resumed(tooled_rt)
    assert end_of(events).status == "completed"
    rows = await tooled_rt.store.history(ALICE, "c1")
    assert [(m.tool_call_id, m.content) for m in rows if m.role == "tool"] == [("q", "woke quick"), ("s", "woke")]
    await assert_valid(tooled_rt, fake)


# The last three parse in Python, but readers differ on them (a key twice: which wins; NaN and a number no
# double holds: no JSON at all): no tool runs with one reading of them, and no provider is sent them again.
@pytest.mark.parametrize(
    "sent", ['{"city": "Par', "[1, 2]", '"Paris"', "null", '{"a": 1e999, "b": 1}', '{"a": 1, "a": 2, "b": 3}',
             '{"a": NaN, "b": 1}'],
)  # fmt: skip
async def test_invalid_arguments_are_answered_quoting_them_and_stored_as_an_empty_object(
    tooled_rt: Runtime, fake: ScriptedModel, sent: str
) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__add", sent, "c1"),)), Reply(text="Sorry, I could not."))
    events = await turn(tooled_rt, "add", assistant="tooled")
    assert end_of(events).status == "completed"
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.error is not None and sent[:200] in result.error
    [shown] = [e for e in events if isinstance(e, MessageEnd) and e.kind == "tool_call"]
    assert shown.content["arguments"] == "{}"
    [reply] = [m for m in await tooled_rt.store.history(ALICE, "c1") if m.tool_calls]
    assert reply.tool_calls[0].arguments == "{}"
    sent_back = fake.requests[1].messages
    assert sent_back[-3]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert sent in sent_back[-2]["content"]  # the model is told what it wrote
    fake.enqueue(Reply(text="ok"))
    await turn(tooled_rt, "later", assistant="tooled")
    await assert_valid(tooled_rt, fake)


async def test_a_long_invalid_argument_is_quoted_to_200_characters(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    sent = '{"text": "' + "x" * 500
    fake.enqueue(Reply(tool_calls=(call("testing__echo", sent, "c1"),)), Reply(text="Sorry."))
    events = await turn(tooled_rt, "echo", assistant="tooled")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.error is not None and sent[:200] in result.error and sent[:201] not in result.error


async def test_empty_arguments_mean_no_arguments(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__protocol_fail", "", "c1"),)))
    await turn(tooled_rt, "go", assistant="tooled")
    [reply] = [m for m in await tooled_rt.store.history(ALICE, "c1") if m.tool_calls]
    assert reply.tool_calls[0].arguments == "{}"


OBSERVER = """\
    async function Next(ctx, payload) {
      await ctx.log("info", "replied " + (payload.completion.content || "").length + " chars");
    }
"""


def hooked_tools(tmp_path: Path, store: SqlStore, fake: ScriptedModel, hook: str, on_error: str = "fail") -> Runtime:
    assistant = (f"name: Tooled\nhook: hooks/next.js\nhook_policy: {{on_error: {on_error}}}\n"
                 "mcp: {servers: [testing]}\n")  # fmt: skip
    return in_process(tooled(tmp_path / "app", store, fake, assistant=assistant,
                             more={"hooks/next.js": textwrap.dedent(hook)}))  # fmt: skip


@pytest.mark.parametrize("hook", [OBSERVER, "function Next() { return {data: {seen: true}} }"])
async def test_a_next_hook_that_only_observes_leaves_the_tool_loop_on(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, hook: str
) -> None:
    tooled_rt = hooked_tools(tmp_path, store, fake, hook)
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)), Reply(text="It is 5."))
    try:
        events = await turn(tooled_rt, "what is 2+3?", assistant="tooled")
        end = end_of(events)
        assert end.status == "completed" and len(fake.requests) == 2
        assert [m.content for m in await tooled_rt.store.history(ALICE, "c1")][-1] == "It is 5."
        if "data" in hook:
            assert end.next == {"seen": True}
    finally:
        await close(tooled_rt)


async def test_next_stop_ends_the_run_even_with_tool_results_waiting(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    tooled_rt = hooked_tools(tmp_path, store, fake, "function Next() { return {stop: true, data: 'enough'} }")
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)), Reply(text="never"))
    try:
        end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
        assert (end.status, end.reason, end.next) == ("completed", "completed", "enough")
        assert len(fake.requests) == 1
        await assert_valid(tooled_rt, fake)
    finally:
        await close(tooled_rt)


@pytest.mark.parametrize("returned", ["{stop: 'yes'}", "{stop: true, continue: {messages: []}}"])
async def test_a_bad_stop_is_a_hook_error(tmp_path: Path, store: SqlStore, fake: ScriptedModel, returned: str) -> None:
    tooled_rt = hooked_tools(tmp_path, store, fake, f"function Next() {{ return {returned} }}")
    fake.enqueue(Reply(text="hi"))
    try:
        end = end_of(await turn(tooled_rt, "hi", assistant="tooled"))
        assert end.reason == "hook_error" and "stop" in end.error["message"]
    finally:
        await close(tooled_rt)


async def test_an_ignored_hook_failure_is_not_where_a_later_failure_resumes(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    hook = """\
        function Next(ctx, payload) { if (payload.tools.length) throw new Error("observer broke"); return null }
    """
    tooled_rt = hooked_tools(tmp_path, store, fake, hook, on_error="ignore")
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)),
                 Reply(tool_calls=(call("testing__protocol_fail", {}, "c2"),)))  # fmt: skip
    try:
        end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
        assert end.reason == "tool_error"
        point = await tooled_rt.store.resume_point(ALICE, "c1")
        assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "failed")]
        events = await resumed(tooled_rt)
        assert [e.tool_call_id for e in events if isinstance(e, ToolResult)][:1] == ["c2"]
        await assert_valid(tooled_rt, fake)
    finally:
        await close(tooled_rt)


def test_the_pairing_checker_catches_what_it_should() -> None:
    bad = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": '{"x": 1'}}]},
        {"role": "user", "content": "y"},
        {"role": "tool", "tool_call_id": "a", "content": "late"},
    ]  # fmt: skip
    problems = request_problems(bad)
    assert len(problems) == 3, json.dumps(problems)


async def test_images_to_a_model_that_cannot_read_them_fail_the_run_naming_it(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    picture = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    end = end_of(await turn(tooled_rt, [{"role": "user", "content": picture}], assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "model_error")
    assert end.error == {"message": "connector fake.model cannot read images (its capabilities.vision is false)",
                         "kind": "bad_request"}  # fmt: skip
    assert fake.requests == []
    [kept] = await tooled_rt.store.history(ALICE, "c1")
    assert (kept.role, kept.content, kept.hidden) == ("user", picture, True)  # kept, shown, never sent again

    # Fixed: the stored picture went with every later turn, so the chat failed the same way for ever.
    fake.enqueue(Reply(text="Only words, then."))
    end = end_of(await turn(tooled_rt, "Never mind, in words", assistant="tooled"))
    assert (end.status, fake.requests[-1].messages[-1]) == (
        "completed",
        {"role": "user", "content": "Never mind, in words"},
    )
    assert "image_url" not in str(fake.requests[-1].messages)


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ('{"city": "Par', True),
        ("[1]", True),
        ("", False),  # no arguments: stored as {}
        ('  {"city": "Paris"}', False),
    ],
)
def test_request_messages_must_carry_object_arguments(arguments: str, refused: bool) -> None:
    from yao_agent.errors import UsageError
    from yao_agent.messages import parse_input

    given = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "t", "arguments": arguments}}]}]  # fmt: skip
    if refused:
        with pytest.raises(UsageError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: expected a JSON"):
            parse_input(given)
    else:
        [_, call] = parse_input(given)
        assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == (
            {} if not arguments else {"city": "Paris"}
        )
