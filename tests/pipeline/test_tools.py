"""Tools in the pipeline: the retry loop, the tool loop, loop detection, pairing on every exit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.pipeline.conftest import app_files, make_runtime
from tests.pipeline.helpers import ALICE, end_of, stored, turn
from tests.tools.servers import server as testing_server
from yao_agent.events import ToolResult
from yao_agent.messages import provider_messages
from yao_agent.pipeline import RunRequest, Runtime, start, start_resume
from yao_agent.pipeline.guards import repeats_in_window
from yao_agent.pipeline.tool_round import RETRY_PROMPT
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

ASSISTANT = "name: Tooled\nmcp:\n  servers: [testing]\n  max_turns: {max_turns}\n"


@pytest.fixture
async def rt(tmp_path: Path, store: SqlStore, fake: FakeProvider) -> AsyncIterator[Runtime]:
    files = app_files(fake.base_url, limits="{max_turns: 10, max_tool_retries: 3}")
    files["mcps/testing.yml"] = "command: python\nargs: [-m, tests.tools.servers]\n"
    files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=3)
    runtime = make_runtime(tmp_path / "app", store, files)
    runtime.tools = ToolManager(runtime.app.mcps, root=runtime.app.root, in_process={"testing": testing_server})
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()
        await runtime.tools.aclose()


def call(name: str, arguments: object, call_id: str) -> ToolCall:
    return ToolCall(name, arguments if isinstance(arguments, str) else json.dumps(arguments), id=call_id)


async def test_a_tool_round_then_the_answer(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)), Reply(text="It is 5."))
    events = await turn(rt, "what is 2+3?", assistant="tooled")
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
    assert [r[0] for r in await stored(rt)] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"a": 2, "b": ', "invalid JSON in the arguments"),
        ({"a": "two", "b": 3}, "'two' is not of type 'integer'"),
        ({"a": 2}, "'b' is a required property"),
    ],
)
async def test_bad_arguments_go_back_to_the_model_in_plain_words(
    rt: Runtime, fake: FakeProvider, arguments: object, told: str
) -> None:
    fake.enqueue(
        Reply(tool_calls=(call("testing__add", arguments, "c1"),)),
        Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c2"),)),
        Reply(text="Fixed: 5."),
    )
    events = await turn(rt, "add", assistant="tooled")
    assert end_of(events).status == "completed"
    retry = fake.requests[1].messages
    assert retry[-3]["tool_calls"][0]["id"] == "c1"
    assert retry[-2]["role"] == "tool" and retry[-2]["tool_call_id"] == "c1" and told in retry[-2]["content"]
    assert retry[-1] == {"role": "system", "content": RETRY_PROMPT}
    assert [(e.attempt, e.error is None) for e in events if isinstance(e, ToolResult)] == [(1, False), (2, True)]


async def test_a_tool_reported_error_is_retried(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__refuse", {"reason": "policy"}, "c1"),)), Reply(text="Cannot."))
    events = await turn(rt, "try", assistant="tooled")
    assert end_of(events).status == "completed"  # the model answered in text instead of retrying
    assert fake.requests[1].messages[-2]["content"] == "Error executing tool refuse: refused: policy"


async def test_three_failing_attempts_end_with_tool_error(rt: Runtime, fake: FakeProvider) -> None:
    bad = [Reply(tool_calls=(call("testing__add", {"a": "x", "b": 1}, f"c{n}"),)) for n in range(3)]
    fake.enqueue(*bad)
    end = end_of(await turn(rt, "add", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "tool_error")
    assert end.error["message"].startswith("tool calls failed after 3 attempts: testing__add: ")
    assert len(fake.requests) == 3
    history = provider_messages(await rt.store.history(ALICE, "c1"))
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]


async def test_unknown_tool_and_protocol_errors_are_not_retried(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__nope", {}, "c1"), call("testing__protocol_fail", {}, "c2"))))
    end = end_of(await turn(rt, "go", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "tool_error")
    assert "unknown tool 'testing__nope'" in end.error["message"]
    assert len(fake.requests) == 1
    rows = await rt.store.history(ALICE, "c1")
    assert sorted(m.tool_call_id or "" for m in rows if m.role == "tool") == ["c1", "c2"]


async def test_parallel_calls_finish_out_of_order_and_stay_paired(rt: Runtime, fake: FakeProvider) -> None:
    slow, quick = call("testing__nap", {"seconds": 0.3, "label": "slow"}, "s"), call(
        "testing__nap", {"seconds": 0.01, "label": "quick"}, "q")  # fmt: skip
    fake.enqueue(Reply(tool_calls=(slow, quick)), Reply(text="both woke"))
    events = await turn(rt, "nap", assistant="tooled")
    assert [(e.tool_call_id, e.result) for e in events if isinstance(e, ToolResult)] == [
        ("q", "woke quick"), ("s", "woke slow")]  # fmt: skip
    sent = fake.requests[1].messages
    assert [(m["tool_call_id"], m["content"]) for m in sent if m["role"] == "tool"] == [
        ("s", "woke slow"), ("q", "woke quick")]  # fmt: skip


async def test_cancel_during_a_slow_tool_pairs_every_call(rt: Runtime, fake: FakeProvider) -> None:
    naps = (call("testing__nap", {"seconds": 30}, "n1"), call("testing__nap", {"seconds": 30}, "n2"))
    fake.enqueue(Reply(tool_calls=naps), Reply(text="after"))
    handle = await start(rt, RunRequest("tooled", ALICE, [{"role": "user", "content": "sleep"}], chat_id="c1"))
    events = []
    async for event in handle.events():
        events.append(event)
        if event.type == "message_end" and event.kind == "tool_call":  # type: ignore[union-attr]
            await asyncio.sleep(0.2)
            handle.cancel()
    assert (end_of(events).status, end_of(events).reason) == ("cancelled", "cancelled")
    rows = await rt.store.history(ALICE, "c1")
    assert [(m.tool_call_id, m.content) for m in rows if m.role == "tool"] == [("n1", "cancelled"), ("n2", "cancelled")]
    await turn(rt, "again", assistant="tooled")
    sent = fake.requests[-1].messages
    assert {m["tool_call_id"] for m in sent if m["role"] == "tool"} == {"n1", "n2"}


async def test_the_tool_loop_stops_at_max_turns_and_answers_without_tools(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(*[Reply(tool_calls=(call("testing__echo", {"text": f"step {n}"}, f"c{n}"),)) for n in range(4)])
    fake.enqueue(Reply(text="Summary of four steps."))
    end = end_of(await turn(rt, "loop please", assistant="tooled"))
    assert end.status == "completed"
    assert len(fake.requests) == 5  # 1 + mcp.max_turns (3) tool turns, then the last word
    last = fake.requests[-1]
    assert (
        last.tools is None
        and last.messages[-1]["role"] == "system"
        and "Do not call tools" in last.messages[-1]["content"]
    )


async def test_without_the_tool_loop_the_reply_stands(rt: Runtime, fake: FakeProvider, tmp_path: Path) -> None:
    (rt.app.root / "assistants" / "tooled" / "assistant.yml").write_text(
        "name: Tooled\nmcp: {servers: [testing], tool_loop: false}\n"
    )
    from yao_agent.dsl import load_app

    rt.app = load_app(rt.app.root)
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "c1"),)))
    end = end_of(await turn(rt, "add", assistant="tooled"))
    assert end.status == "completed" and len(fake.requests) == 1


async def test_max_turns_guard(tmp_path: Path, store: SqlStore, fake: FakeProvider) -> None:
    files = app_files(fake.base_url, limits="{max_turns: 2}")
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=5)
    rt = make_runtime(tmp_path / "app", store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    fake.enqueue(*[Reply(tool_calls=(call("testing__echo", {"text": "x"}, f"c{n}"),)) for n in range(3)])
    end = end_of(await turn(rt, "go", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "max_turns")
    assert end.error["message"] == "the run reached its limit of 2 model calls (limits.max_turns)"
    assert len(fake.requests) == 2
    await rt.tools.aclose()
    await rt.engines.aclose()


@pytest.mark.parametrize(
    ("history", "looping"),
    [
        ([], False),
        (["a"] * 5, False),  # five times is not more than five
        (["a"] * 6, True),
        (["a", "b"] * 5, False),
        (["a"] * 6 + ["b"] * 5, False),  # the last ten hold five a's and five b's
        (["a"] * 6 + ["b"] * 6, True),
        (["a"] * 6 + list("bcdefghijk"), False),  # the a's fell out of the window
    ],
)
def test_loop_detection_table(history: list[str], looping: bool) -> None:
    assert (repeats_in_window(history) is not None) is looping


async def test_loop_detection_stops_the_run(rt: Runtime, fake: FakeProvider, tmp_path: Path) -> None:
    (rt.app.root / "assistants" / "tooled" / "assistant.yml").write_text(
        "name: Tooled\nmcp: {servers: [testing], max_turns: 20}\n"
    )
    from yao_agent.dsl import load_app

    rt.app = load_app(rt.app.root)
    same = [Reply(tool_calls=(call("testing__echo", {"text": "again"}, f"c{n}"),)) for n in range(8)]
    fake.enqueue(*same)
    end = end_of(await turn(rt, "loop", assistant="tooled"))
    assert (end.status, end.reason) == ("failed", "loop_detected")
    assert len(fake.requests) == 6  # the sixth identical call and result is one too many


async def test_resume_after_a_tool_failure_runs_the_calls_again(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__protocol_fail", {}, "c1"),)))
    end = end_of(await turn(rt, "go", assistant="tooled"))
    assert end.reason == "tool_error"
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "failed")]


async def test_resume_after_a_cancelled_tool_round_runs_the_calls_again(rt: Runtime, fake: FakeProvider) -> None:
    naps = (call("testing__nap", {"seconds": 0.4, "label": "one"}, "n1"),)
    fake.enqueue(Reply(tool_calls=naps), Reply(text="Rested."))
    handle = await start(rt, RunRequest("tooled", ALICE, [{"role": "user", "content": "rest"}], chat_id="c1"))
    async for event in handle.events():
        if event.type == "message_end" and event.kind == "tool_call":  # type: ignore[union-attr]
            handle.cancel()
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("tool", "cancelled")]

    events = [e async for e in (await start_resume(rt, ALICE, "c1")).events()]
    assert end_of(events).status == "completed"
    assert [(e.tool_call_id, e.result) for e in events if isinstance(e, ToolResult)] == [("n1", "woke one")]
    assert len(fake.requests) == 2
    assert [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"] == ["woke one"]  # not "cancelled"
    assert await stored(rt) == [
        ("user", "rest", "completed"),
        ("assistant", None, "completed"),
        ("tool", "cancelled", "completed"),
        ("tool", "woke one", "completed"),
        ("assistant", "Rested.", "completed"),
    ]
