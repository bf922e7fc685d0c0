"""Tools in the pipeline: the retry loop, the tool loop, loop detection, pairing on every exit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import ALICE, app_files, close, end_of, make_runtime, runs_of, stored, turn
from tests.support.tools import ASSISTANT, SERVERS_PY, call, in_process, tooled
from tests.support.waits import free_port, reached, wait_until
from yao_agent.events import Event, ToolResult
from yao_agent.messages import provider_messages
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.pipeline.guards import repeats_in_window, step_signature
from yao_agent.pipeline.turns import RETRY_PROMPT
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel
from yao_agent.tools import ToolManager, ToolOutcome, ToolSpec


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


async def test_a_tool_round_then_the_answer(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)), Reply(text="It is 5."))
    events = await turn(tooled_rt, "what is 2+3?", assistant="tooled")
    assert end_of(events).status == "completed"
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert (result.tool_call_id, result.server, result.tool, result.result, result.error) == (
        "c1", "testing", "add", "5", None)  # fmt: skip
    assert fake.requests[0].tools is not None and "testing__add" in [
        t["function"]["name"] for t in fake.requests[0].tools
    ]
    assert fake.requests[1].messages[-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "testing__add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]  # fmt: skip
    assert [r[0] for r in await stored(tooled_rt)] == ["user", "assistant", "tool", "assistant"]


async def test_a_provider_call_id_the_store_cannot_hold_is_replaced_by_ours(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "x" * 300),)), Reply(text="It is 5."))
    events = await turn(tooled_rt, "what is 2+3?", assistant="tooled")
    assert end_of(events).status == "completed"
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.tool_call_id.startswith("call_") and len(result.tool_call_id) < 128
    called, answered = fake.requests[1].messages[-2:]
    assert called["tool_calls"][0]["id"] == answered["tool_call_id"] == result.tool_call_id  # still paired
    assert [r[0] for r in await stored(tooled_rt)] == ["user", "assistant", "tool", "assistant"]


EXPECTED = "(expected a JSON object matching the tool's schema)"


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        (
            '{"a": 2, "b": ',
            f"Error: invalid JSON in the arguments: Expecting value at line 1 column 15 {EXPECTED}"
            '; the arguments received were: {"a": 2, "b": ',
        ),
        ("[2, 3]", f"Error: the arguments are an array, not an object {EXPECTED}; the arguments received were: [2, 3]"),
        ({"a": "two", "b": 3}, "Error: arguments.a: 'two' is not of type 'integer'"),
        ({"a": 2}, "Error: arguments: 'b' is a required property"),
    ],
)
async def test_bad_arguments_go_back_to_the_model_in_plain_words(
    tooled_rt: Runtime, fake: ScriptedModel, arguments: object, told: str
) -> None:
    bad = call("testing__add", arguments, "c1")
    fake.enqueue(
        Reply(tool_calls=(bad,)), Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c2"),)), Reply(text="5.")
    )
    events = await turn(tooled_rt, "add", assistant="tooled")
    assert end_of(events).status == "completed"
    sent = bad.arguments if isinstance(arguments, dict) else "{}"  # not a JSON object: never sent back as it came
    assert fake.requests[1].messages[-3:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "testing__add", "arguments": sent}}]},
        {"role": "tool", "tool_call_id": "c1", "content": told},
        {"role": "system", "content": RETRY_PROMPT},
    ]  # fmt: skip
    assert [(e.attempt, e.error is None) for e in events if isinstance(e, ToolResult)] == [(1, False), (2, True)]


async def test_a_retry_of_two_parallel_calls_shows_the_model_both_results(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    good, bad = call("testing__add", {"a": 1, "b": 2}, "ok"), call("testing__add", {"a": "x", "b": 2}, "bad")
    fake.enqueue(Reply(tool_calls=(good, bad)), Reply(tool_calls=(call("testing__add", {"a": 4, "b": 2}, "fix"),)),
                 Reply(text="3 and 6."))  # fmt: skip
    end = end_of(await turn(tooled_rt, "add both", assistant="tooled"))
    assert end.status == "completed"
    assert fake.requests[1].messages[-4:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "ok", "type": "function", "function": {"name": "testing__add", "arguments": good.arguments}},
            {"id": "bad", "type": "function", "function": {"name": "testing__add", "arguments": bad.arguments}}]},
        {"role": "tool", "tool_call_id": "ok", "content": "3"},
        {"role": "tool", "tool_call_id": "bad", "content": "Error: arguments.a: 'x' is not of type 'integer'"},
        {"role": "system", "content": RETRY_PROMPT},
    ]  # fmt: skip
    assert [m["content"] for m in fake.requests[2].messages if m["role"] == "tool"][-1] == "6"


async def test_a_tool_reported_error_is_retried(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__refuse", {"reason": "policy"}, "c1"),)), Reply(text="Cannot."))
    events = await turn(tooled_rt, "try", assistant="tooled")
    assert end_of(events).status == "completed"  # the model answered in text instead of retrying
    assert fake.requests[1].messages[-2]["content"] == "Error executing tool refuse: refused: policy"


async def test_three_failing_attempts_end_with_tool_error(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    bad = [Reply(tool_calls=(call("testing__add", {"a": "x", "b": 1}, f"c{n}"),)) for n in range(3)]
    fake.enqueue(*bad)
    end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "tool_error")
    assert end.error["message"].startswith("tool calls failed after 3 attempts: testing__add: ")
    assert len(fake.requests) == 3
    history = provider_messages(await tooled_rt.store.history(ALICE, "c1"))
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]


async def test_unknown_tool_and_protocol_errors_are_not_retried(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__nope", {}, "c1"), call("testing__protocol_fail", {}, "c2"))))
    end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "tool_error")
    assert "unknown tool 'testing__nope'" in end.error["message"]
    assert len(fake.requests) == 1
    rows = await tooled_rt.store.history(ALICE, "c1")
    assert sorted(m.tool_call_id or "" for m in rows if m.role == "tool") == ["c1", "c2"]


async def test_parallel_calls_finish_out_of_order_and_stay_paired(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    slow, quick = call("testing__nap", {"seconds": 0.3, "label": "slow"}, "s"), call(
        "testing__nap", {"seconds": 0.01, "label": "quick"}, "q")  # fmt: skip
    fake.enqueue(Reply(tool_calls=(slow, quick)), Reply(text="both woke"))
    events = await turn(tooled_rt, "nap", assistant="tooled")
    assert [(e.tool_call_id, e.result) for e in events if isinstance(e, ToolResult)] == [
        ("q", "woke quick"), ("s", "woke slow")]  # fmt: skip
    sent = fake.requests[1].messages
    assert [(m["tool_call_id"], m["content"]) for m in sent if m["role"] == "tool"] == [
        ("s", "woke slow"), ("q", "woke quick")]  # fmt: skip


async def test_cancel_during_a_slow_tool_pairs_every_call(
    tooled_rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    markers = [tmp_path / "n1", tmp_path / "n2"]
    naps = tuple(call("testing__nap_marked", {"seconds": 30, "marker": str(m)}, m.name) for m in markers)
    fake.enqueue(Reply(tool_calls=naps), Reply(text="after"))
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "sleep"}], chat_id="c1")
    )
    reading = asyncio.create_task(collect(handle.events()))
    await wait_until(lambda: all(reached(m, "started") for m in markers))  # both tools are running
    handle.cancel()
    events = await reading
    assert (end_of(events).status, end_of(events).reason) == ("cancelled", "cancelled")
    await wait_until(lambda: all(reached(m, "cancelled") for m in markers))  # stopped, not waited for
    rows = await tooled_rt.store.history(ALICE, "c1")
    assert [(m.tool_call_id, m.content) for m in rows if m.role == "tool"] == [("n1", "cancelled"), ("n2", "cancelled")]
    await turn(tooled_rt, "again", assistant="tooled")
    sent = fake.requests[-1].messages
    assert {m["tool_call_id"] for m in sent if m["role"] == "tool"} == {"n1", "n2"}


async def test_the_tool_loop_stops_at_max_turns_and_answers_without_tools(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(*[Reply(tool_calls=(call("testing__echo", {"text": f"step {n}"}, f"c{n}"),)) for n in range(4)])
    fake.enqueue(Reply(text="Summary of four steps."))
    end = end_of(await turn(tooled_rt, "loop please", assistant="tooled"))
    assert end.status == "completed"
    assert len(fake.requests) == 5  # 1 + mcp.max_turns (3) tool turns, then the last word
    last = fake.requests[-1]
    assert (
        last.tools is None
        and last.messages[-1]["role"] == "system"
        and "Do not call tools" in last.messages[-1]["content"]
    )


async def test_tool_calls_in_the_last_word_are_answered_not_run(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(*[Reply(tool_calls=(call("testing__echo", {"text": f"step {n}"}, f"c{n}"),)) for n in range(4)])
    fake.enqueue(Reply(text="One more look…", tool_calls=(call("testing__echo", {"text": "again"}, "extra"),)))
    events = await turn(tooled_rt, "loop please", assistant="tooled")
    assert end_of(events).status == "completed"
    [shown] = [e for e in events if isinstance(e, ToolResult) and e.tool_call_id == "extra"]
    assert shown.result is None and shown.error is not None and shown.error.startswith("not run")
    fake.enqueue(Reply(text="ok"))
    await turn(tooled_rt, "and now?", assistant="tooled")
    sent = fake.requests[-1].messages
    called = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert sorted(called) == sorted(m["tool_call_id"] for m in sent if m["role"] == "tool")  # all paired


async def test_without_the_tool_loop_the_reply_stands(tooled_rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    (tooled_rt.app.root / "assistants" / "tooled" / "assistant.yml").write_text(
        "name: Tooled\nmcp: {servers: [testing], tool_loop: false}\n"
    )
    from yao_agent.dsl import load_app

    tooled_rt.app = load_app(tooled_rt.app.root)
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "c1"),)))
    end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
    assert end.status == "completed" and len(fake.requests) == 1


async def test_max_turns_guard(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    files = app_files(fake.base_url, limits="{max_turns: 2}")
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=5)
    tooled_rt = make_runtime(tmp_path / "app", store, files, model=fake)
    tooled_rt.tools = ToolManager(tooled_rt.app.mcps, root=tooled_rt.app.root, in_process={"testing": testing_server})
    fake.enqueue(*[Reply(tool_calls=(call("testing__echo", {"text": "x"}, f"c{n}"),)) for n in range(3)])
    end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "max_turns")
    assert end.error["message"] == "the run reached its limit of 2 model calls (limits.max_turns)"
    assert len(fake.requests) == 2
    await tooled_rt.tools.aclose()
    await tooled_rt.engines.aclose()


@pytest.mark.parametrize(
    ("steps", "looping"),
    [
        ([], False),
        (["a"] * 5, False),  # five steps alike are not more than five
        (["a"] * 6, True),
        (["a", "b"] * 5, False),
        (["a"] * 6 + ["b"] * 5, False),  # the last ten steps hold five a's and five b's
        (["a"] * 6 + ["b"] * 6, True),
        (["a"] * 6 + list("bcdefghijk"), False),  # the a's fell out of the window
        (["a", "b", "a", "a", "c", "a", "a", "a"], True),  # six a's in eight steps, not in a row
    ],
)
def test_loop_detection_table(steps: list[str], looping: bool) -> None:
    assert (repeats_in_window(steps) is not None) is looping


ECHO = ("testing__echo", '{"text": "x", "times": 2}', "xx", None)


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ([ECHO], [ECHO], True),
        ([ECHO], [("testing__echo", '{ "times":2,\n "text":"x" }', "xx", None)], True),  # key order, spacing
        ([ECHO, ("testing__add", "", "0", None)], [("testing__add", "{}", "0", None), ECHO], True),  # call order
        ([ECHO], [("testing__echo", '{"text": "x", "times": 2}', "xy", None)], False),  # another output
        ([ECHO], [("testing__echo", '{"text": "x", "times": 3}', "xx", None)], False),  # another input
        ([ECHO], [("testing__say", '{"text": "x", "times": 2}', "xx", None)], False),  # another tool
        ([("t", "{bad", None, "e")], [("t", "{ bad", None, "e")], False),  # invalid JSON: only the same text
        ([ECHO], [ECHO, ECHO], False),  # a step of two calls is not a step of one
    ],
)
def test_a_step_signature_is_its_calls_names_inputs_and_outputs(
    one: list[tuple[str, str, object, str | None]], other: list[tuple[str, str, object, str | None]], same: bool
) -> None:
    assert (step_signature(one) == step_signature(other)) is same


async def loop_friendly(tooled_rt: Runtime) -> None:
    (tooled_rt.app.root / "assistants" / "tooled" / "assistant.yml").write_text(
        "name: Tooled\nmcp: {servers: [testing], max_turns: 20}\n"
    )
    from yao_agent.dsl import load_app

    tooled_rt.app = load_app(tooled_rt.app.root)


async def test_loop_detection_stops_the_run(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    await loop_friendly(tooled_rt)
    spellings = ['{"text": "again", "times": 1}', '{"times": 1, "text": "again"}', '{ "text":"again","times":1 }']
    same = [Reply(tool_calls=(call("testing__echo", spellings[n % 3], f"c{n}"),)) for n in range(8)]
    fake.enqueue(*same)
    end = end_of(await turn(tooled_rt, "loop", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "loop_detected")
    assert end.error["message"] == (
        "the model repeated the same tool calls with the same results more than 5 times in its last 10 tool steps"
    )
    assert len(fake.requests) == 6  # the sixth identical step is one too many, however its arguments are spelt


async def test_loop_detection_counts_steps_not_calls(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    await loop_friendly(tooled_rt)
    twice = [Reply(tool_calls=tuple(call("testing__echo", {"text": "x"}, f"c{n}{m}") for m in range(2)))
             for n in range(5)]  # fmt: skip
    fake.enqueue(*twice, Reply(text="Ten echoes in five steps."))
    end = end_of(await turn(tooled_rt, "echo", assistant="tooled"))
    assert end.status == "completed"  # ten identical calls, but in five steps
    assert len(fake.requests) == 6


async def test_resume_after_a_tool_failure_runs_the_calls_again(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__protocol_fail", {}, "c1"),)))
    end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
    assert end.reason == "tool_error"
    point = await tooled_rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "failed")]


async def test_resume_after_a_cancelled_tool_round_runs_the_calls_again(
    tooled_rt: Runtime, fake: ScriptedModel
) -> None:
    naps = (call("testing__nap", {"seconds": 0.4, "label": "one"}, "n1"),)
    fake.enqueue(Reply(tool_calls=naps), Reply(text="Rested."))
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "rest"}], chat_id="c1")
    )
    async for event in handle.events():
        if event.type == "message_end" and event.kind == "tool_call":
            handle.cancel()
    point = await tooled_rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "cancelled")]

    events = [e async for e in (await runs_of(tooled_rt).resume(ALICE, "c1")).events()]
    assert end_of(events).status == "completed"
    assert [(e.tool_call_id, e.result) for e in events if isinstance(e, ToolResult)] == [("n1", "woke one")]
    assert len(fake.requests) == 2
    assert [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"] == ["woke one"]  # not "cancelled"
    assert await stored(tooled_rt) == [
        ("user", "rest", "completed"),
        ("assistant", None, "completed"),
        ("tool", "woke one", "completed"),  # in the place of the "cancelled" stored before: one result per call
        ("assistant", "Rested.", "completed"),
    ]


async def tool_rows(tooled_rt: Runtime) -> list[tuple[str | None, object]]:
    """(call id, content) of every stored tool result, in order."""
    return [(m.tool_call_id, m.content) for m in await tooled_rt.store.history(ALICE, "c1") if m.role == "tool"]


def results_of(events: list[Event]) -> list[tuple[str, object, str | None]]:
    return [(e.tool_call_id, e.result, e.error) for e in events if isinstance(e, ToolResult)]


async def test_a_protocol_error_ends_the_run_and_says_which_server(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__protocol_fail", {}, "c1"),)))
    end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
    said = "MCP server 'testing' failed the call to 'protocol_fail': custom protocol error"
    assert (end.status, end.reason) == ("failed", "tool_error")
    assert end.error == {"message": f"a tool call failed and cannot be retried: testing__protocol_fail: {said}"}
    assert await tool_rows(tooled_rt) == [("c1", f"Error: {said}")]
    assert len(fake.requests) == 1


async def test_a_tool_that_times_out_ends_the_run(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    tooled_rt = in_process(tooled(tmp_path / "app", store, fake, mcp="command: python\ntimeout_s: 1\n"))
    fake.enqueue(Reply(tool_calls=(call("testing__nap", {"seconds": 30}, "n1"),)))
    try:
        end = end_of(await turn(tooled_rt, "sleep", assistant="tooled"))
        assert end.reason == "tool_error"
        assert end.error == {
            "message": "a tool call failed and cannot be retried: testing__nap: tool timed out after 1 s"
        }
        assert await tool_rows(tooled_rt) == [("n1", "Error: tool timed out after 1 s")]
    finally:
        await close(tooled_rt)


async def test_an_unreachable_server_leaves_its_tools_out_and_the_model_is_told(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    tooled_rt = tooled(tmp_path / "app", store, fake, mcp=f"transport: http\nurl: http://127.0.0.1:{free_port()}/mcp\n")
    fake.enqueue(Reply(text="I cannot check that right now."))
    try:
        end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
        assert (end.status, end.reason) == ("completed", "completed")
        [request] = fake.requests
        assert request.tools is None
        [note] = [m for m in request.messages if m["role"] == "system" and "unavailable" in m["content"]]
        assert "The tools of 'testing' are unavailable right now" in note["content"]
        assert "MCP server 'testing' (mcps/testing.yml) is unreachable: ConnectError" in caplog.text
    finally:
        await close(tooled_rt)


async def test_one_broken_server_fails_only_the_calls_of_its_tools(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    assistant = "name: Tooled\nmcp:\n  servers: [testing, broken]\n"
    tooled_rt = in_process(tooled(tmp_path / "app", store, fake, assistant=assistant,
                           more={"mcps/broken.yml": "command: /nonexistent/mcp-server\n"}))  # fmt: skip
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)), Reply(text="It is 5."))
    try:
        assert end_of(await turn(tooled_rt, "add", assistant="tooled")).status == "completed"  # broken is never needed
        offered = [t["function"]["name"] for t in fake.requests[0].tools or ()]
        assert "testing__add" in offered and not [name for name in offered if name.startswith("broken__")]
        fake.enqueue(Reply(tool_calls=(call("broken__anything", {}, "c2"),)))
        end = end_of(await turn(tooled_rt, "use the broken one", assistant="tooled"))
        assert (end.status, end.reason) == ("failed", "tool_error")
        assert "MCP server 'broken'" in end.error["message"] and "/nonexistent/mcp-server" in end.error["message"]
    finally:
        await close(tooled_rt)


async def test_a_stdio_server_in_the_pipeline_and_its_death_mid_call(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    tooled_rt = tooled(tmp_path / "app", store, fake, mcp=f"command: python\nargs: [{SERVERS_PY}]\n")
    try:
        fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "a1"),)), Reply(text="It is 5."))
        events = await turn(tooled_rt, "add", assistant="tooled")
        assert end_of(events).status == "completed" and results_of(events) == [("a1", "5", None)]
        assert fake.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "a1", "content": "5"}

        fake.enqueue(Reply(tool_calls=(call("testing__die", {}, "d1"),)))
        end = end_of(await turn(tooled_rt, "die", assistant="tooled"))
        lost = (
            "MCP server 'testing' stopped during the call to 'die' (the connection closed); "
            "it will be restarted on its next use"
        )
        assert end.reason == "tool_error"
        assert end.error == {"message": f"a tool call failed and cannot be retried: testing__die: {lost}"}
        assert (await tool_rows(tooled_rt))[-1] == ("d1", f"Error: {lost}")

        fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "a2"),)), Reply(text="It is 2."))
        events = await turn(tooled_rt, "add again", assistant="tooled")  # the server is started again
        assert end_of(events).status == "completed" and results_of(events) == [("a2", "2", None)]
    finally:
        await close(tooled_rt)


async def test_cancel_keeps_the_result_of_a_call_that_had_finished(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    slow, quick = call("testing__nap", {"seconds": 1, "label": "slow"}, "s"), call(
        "testing__nap", {"seconds": 0.01, "label": "quick"}, "q")  # fmt: skip
    fake.enqueue(Reply(tool_calls=(slow, quick)), Reply(text="Both woke."))
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "nap"}], chat_id="c1")
    )
    events: list[Event] = []
    async for event in handle.events():
        events.append(event)
        if isinstance(event, ToolResult) and event.tool_call_id == "q":
            handle.cancel()
    assert end_of(events).reason == "cancelled"
    assert results_of(events) == [("q", "woke quick", None), ("s", None, "cancelled")]  # the client sees both
    assert await tool_rows(tooled_rt) == [("q", "woke quick"), ("s", "cancelled")]

    events = [e async for e in (await runs_of(tooled_rt).resume(ALICE, "c1")).events()]
    assert results_of(events) == [("s", "woke slow", None)]  # only the call that had no result runs again
    assert [(m["tool_call_id"], m["content"]) for m in fake.requests[-1].messages if m["role"] == "tool"] == [
        ("q", "woke quick"), ("s", "woke slow")]  # fmt: skip


async def test_a_run_timeout_during_a_slow_tool_pairs_it_with_a_failed_result(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    tooled_rt = in_process(tooled(tmp_path / "app", store, fake, limits="{max_turns: 10, timeout_s: 2}"))
    quick, slow = call("testing__nap", {"seconds": 0.01, "label": "quick"}, "q"), call(
        "testing__nap", {"seconds": 60}, "s")  # fmt: skip
    fake.enqueue(Reply(tool_calls=(quick, slow)))
    try:
        events = await turn(tooled_rt, "nap", assistant="tooled")
        end = end_of(events)
        assert (end.reason, end.error) == ("timeout", {"message": "the run took longer than 2 s (limits.timeout_s)"})
        assert results_of(events) == [("q", "woke quick", None), ("s", None, "failed: timeout")]
        assert isinstance(events[-2], ToolResult) and (events[-2].server, events[-2].tool) == ("testing", "nap")
        assert await tool_rows(tooled_rt) == [("q", "woke quick"), ("s", "failed: timeout")]
    finally:
        await close(tooled_rt)


class BuggyAdd(ToolManager):
    """The tool manager with a bug in `add`, which raises once the `nap_marked` sibling has started."""

    def __init__(self, tooled_rt: Runtime, marker: Path) -> None:
        super().__init__(tooled_rt.app.mcps, root=tooled_rt.app.root, in_process={"testing": testing_server})
        self.marker = marker

    async def call(self, spec: ToolSpec, arguments: str) -> ToolOutcome:
        if spec.tool == "add":
            await wait_until(lambda: reached(self.marker, "started"))
            raise RuntimeError("a bug in a tool call")
        return await super().call(spec, arguments)


async def test_a_call_that_raises_stops_its_siblings(tooled_rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    await tooled_rt.tools.aclose()
    tooled_rt.tools = BuggyAdd(tooled_rt, tmp_path / "nap")
    nap = call("testing__nap_marked", {"seconds": 30, "marker": str(tmp_path / "nap")}, "n1")
    fake.enqueue(Reply(tool_calls=(nap, call("testing__add", {"a": 1, "b": 1}, "b1"))))
    handle = await runs_of(tooled_rt).start(
        RunRequest("tooled", ALICE, [{"role": "user", "content": "go"}], chat_id="c1")
    )
    events: list[Event] = []
    with pytest.raises(RuntimeError, match="a bug in a tool call"):
        async for event in handle.events():
            events.append(event)
    end = end_of(events)
    assert (end.reason, end.error) == ("internal_error", {"message": "internal error: RuntimeError"})
    assert await tool_rows(tooled_rt) == [("n1", "failed: internal_error"), ("b1", "failed: internal_error")]
    await wait_until(lambda: reached(tmp_path / "nap", "cancelled"))  # the sibling was stopped, not left running
    assert not reached(tmp_path / "nap", "finished")


async def test_next_sees_the_corrected_reply_and_only_its_results(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    tooled_rt = in_process(tooled(
        tmp_path / "app", store, fake, assistant="name: Tooled\nhook: hooks/next.js\nmcp: {servers: [testing]}\n",
        more={"hooks/next.js": "function Next(ctx, p) { return p.tools.length ? {data: p} : null }\n"}))  # fmt: skip
    bad, good = call("testing__add", {"a": "x", "b": 1}, "c1"), call("testing__add", {"a": 2, "b": 3}, "c2")
    fake.enqueue(Reply(tool_calls=(bad,)), Reply(tool_calls=(good,)), Reply(text="It is 5."))
    try:
        end = end_of(await turn(tooled_rt, "add", assistant="tooled"))
        assert end.status == "completed" and len(fake.requests) == 3  # the hook only observes: the loop goes on
        seen = end.next
        [_, _, _, corrected, _, _] = await tooled_rt.store.history(ALICE, "c1")
        assert seen["completion"] == {
            "message_id": corrected.id, "content": None, "reasoning": None,
            "tool_calls": [{"id": "c2", "name": "testing__add", "arguments": good.arguments}],
        }  # fmt: skip
        assert seen["tools"] == [{"tool_call_id": "c2", "server": "testing", "tool": "add",
                                  "arguments": good.arguments, "result": "5", "error": None}]  # fmt: skip
        assert seen["messages"] == [
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "testing__add", "arguments": bad.arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Error: arguments.a: 'x' is not of type 'integer'"},
        ]  # fmt: skip
    finally:
        await close(tooled_rt)
