"""Approvals (CONTRACT §4.8): calls of tools listed in `approve` wait for a person; the run ends `waiting`,
the chat is free, and a decision continues the run — in this process or any other."""
# pyright: reportTypedDictNotRequiredAccess=false
# (an answer's optional keys are read as present: a missing one is a KeyError, which fails the test)

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.runtimes import ALICE, close, end_of, runs_of, stored, turn
from tests.support.tools import APPROVING, call, in_process, tooled
from yao_agent.errors import ApprovalConflict, NotFound, UsageError
from yao_agent.events import ApprovalRequest, Event, StreamEnd, ToolResult
from yao_agent.identity import Identity
from yao_agent.ids import RandomIds
from yao_agent.pipeline import Runtime
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

BOB = Identity("bob")


@pytest.fixture
async def rt(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Runtime]:
    runtime = in_process(tooled(tmp_path / "app", store, fake, assistant=APPROVING))
    try:
        yield runtime
    finally:
        await close(runtime)


def tally(path: Path, label: str, call_id: str) -> ToolCall:
    return call("testing__tally", {"path": str(path), "label": label}, call_id)


def counted(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def waiting_turn(rt: Runtime, fake: ScriptedModel, path: Path) -> list[Event]:
    """A reply asking for a tally (approval needed) and an add (none needed): the run waits for a person."""
    fake.enqueue(Reply(tool_calls=(tally(path, "paid", "t1"), call("testing__add", {"a": 2, "b": 3}, "a1"))))
    return await turn(rt, "pay and add", assistant="tooled")


async def drained(runs: Runs, decisions: object, chat_id: str = "c1") -> list[Event]:
    handle = await runs.decide(ALICE, chat_id, decisions)
    return [event async for event in handle.events()]


async def test_a_call_to_approve_stops_the_run_before_any_call_runs(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    events = await waiting_turn(rt, fake, ledger)
    asked = [e for e in events if isinstance(e, ApprovalRequest)]
    assert [(a.tool_call_id, a.server, a.tool, a.arguments) for a in asked] == [
        ("t1", "testing", "tally", {"path": str(ledger), "label": "paid"})
    ]
    end = end_of(events)
    assert (end.status, end.reason, end.error) == ("waiting", "approval_required", None)
    assert end.approvals == [{"tool_call_id": "t1", "server": "testing", "tool": "tally",
                              "arguments": {"path": str(ledger), "label": "paid"}}]  # fmt: skip
    assert not [e for e in events if isinstance(e, ToolResult)]  # neither call ran: the add waits with it
    assert counted(ledger) == []
    # The chat stays valid (each call has a result that says it waits) and is free: no run holds it.
    history = await rt.store.history(ALICE, "c1")
    assert [(m.role, m.tool_call_id) for m in history] == [("user", None), ("assistant", None), ("tool", "t1"),
                                                           ("tool", "a1")]  # fmt: skip
    assert all(str(m.content).startswith("waiting:") for m in history if m.role == "tool")
    assert not runs_of(rt).process.running(ALICE, "c1")
    point = await runs_of(rt).conversations.approvals(ALICE, "c1")
    assert [a.request() for a in point.pending] == end.approvals
    assert point.run.status == "waiting"


async def test_approving_runs_every_call_once_and_the_model_goes_on(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = end_of(await waiting_turn(rt, fake, ledger))
    fake.enqueue(Reply(text="Paid, and 2+3 is 5."))
    events = await drained(runs_of(rt), [{"tool_call_id": "t1", "approve": True}])
    results = {e.tool_call_id: (e.result, e.error) for e in events if isinstance(e, ToolResult)}
    assert results == {"t1": ("counted paid", None), "a1": ("5", None)}
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    assert counted(ledger) == ["paid"]
    # One result per call (the stand-ins were replaced in place), then the answer.
    assert await stored(rt) == [("user", "pay and add", "completed"), ("assistant", None, "completed"),
                                ("tool", "counted paid", "completed"), ("tool", "5", "completed"),
                                ("assistant", "Paid, and 2+3 is 5.", "completed")]  # fmt: skip
    tool_messages = [m for m in fake.requests[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["counted paid", "5"]
    # Who decided is in the history, with the call's result; the model call is an `approved` one.
    decided = [m.approval for m in await rt.store.history(ALICE, "c1") if m.tool_call_id == "t1"]
    assert decided[0] is not None and decided[0]["approved"] is True and decided[0]["by"] == ALICE.user_id
    run = await rt.store.latest_run(ALICE, "c1")
    assert run is not None and run.resumed_from == first.run_id
    view = await rt.store.run_view(ALICE, "c1", run.id)
    assert view is not None
    assert [(s.type, s.transition) for s in view.steps if s.type == "llm"] == [("llm", "approved")]
    with pytest.raises(NotFound):
        await runs_of(rt).conversations.approvals(ALICE, "c1")  # nothing waits any more


async def test_a_denied_call_never_runs_and_the_model_reads_why(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await waiting_turn(rt, fake, ledger)
    fake.enqueue(Reply(text="I did not pay."))
    events = await drained(runs_of(rt), [{"tool_call_id": "t1", "approve": False, "reason": "too costly"}])
    assert end_of(events).status == "completed"
    assert counted(ledger) == []
    sent = {m["tool_call_id"]: m["content"] for m in fake.requests[-1].messages if m["role"] == "tool"}
    assert sent == {"t1": "denied: too costly", "a1": "5"}  # the call that needed nobody ran
    decided = [m.approval for m in await rt.store.history(ALICE, "c1") if m.tool_call_id == "t1"]
    assert decided[0] is not None
    assert (decided[0]["approved"], decided[0].get("reason"), decided[0]["by"]) == (False, "too costly", ALICE.user_id)


async def test_a_denial_without_a_reason_says_not_approved(rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    await waiting_turn(rt, fake, tmp_path / "ledger")
    fake.enqueue(Reply(text="OK."))
    await drained(runs_of(rt), [{"tool_call_id": "t1", "approve": False}])
    assert ("tool", "denied: not approved", "completed") in await stored(rt)


@pytest.mark.parametrize(
    ("decisions", "said"),
    [
        ([], "expected a list"),
        ({"tool_call_id": "t1", "approve": True}, "expected a list"),
        ([{"tool_call_id": "zz", "approve": True}], "no pending call 'zz'"),
        ([{"tool_call_id": "t1", "approve": "yes"}], "decisions[0].approve: expected true or false"),
        ([{"tool_call_id": "t1", "approve": True}, {"tool_call_id": "t1", "approve": False}], "decided twice"),
        ([{"tool_call_id": "t1", "approve": True, "why": "x"}], "unknown field 'why'"),
        ([{"tool_call_id": "t1", "approve": True, "reason": "x"}], "only a denial has a reason"),
        ([{"tool_call_id": "t1", "approve": False, "reason": "no\x00"}], "expected printable text"),
        ([{"tool_call_id": "t1", "approve": False, "reason": "x" * 2001}], "at most 2000 characters"),
    ],
)
async def test_malformed_decisions_are_refused_and_nothing_is_decided(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path, decisions: object, said: str
) -> None:
    await waiting_turn(rt, fake, tmp_path / "ledger")
    with pytest.raises(UsageError, match=said.replace("[", r"\[").replace("]", r"\]")):
        await runs_of(rt).decide(ALICE, "c1", decisions)
    assert [a.tool_call_id for a in (await runs_of(rt).conversations.approvals(ALICE, "c1")).pending] == ["t1"]


async def test_partial_decisions_are_refused_naming_the_missing_calls(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    fake.enqueue(Reply(tool_calls=(tally(ledger, "one", "t1"), tally(ledger, "two", "t2"))))
    assert end_of(await turn(rt, "pay twice", assistant="tooled")).status == "waiting"
    with pytest.raises(UsageError, match="every pending call must be decided; missing: t2"):
        await runs_of(rt).decide(ALICE, "c1", [{"tool_call_id": "t1", "approve": True}])
    assert counted(ledger) == []
    fake.enqueue(Reply(text="One paid."))
    decisions = [{"tool_call_id": "t1", "approve": True}, {"tool_call_id": "t2", "approve": False, "reason": "twice"}]
    assert end_of(await drained(runs_of(rt), decisions)).status == "completed"
    assert counted(ledger) == ["one"]


async def test_a_second_decision_finds_nothing_left_to_decide(rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    await waiting_turn(rt, fake, tmp_path / "ledger")
    point = await runs_of(rt).conversations.approvals(ALICE, "c1")
    fake.enqueue(Reply(text="Paid."))
    await drained(runs_of(rt), [{"tool_call_id": "t1", "approve": True}])
    with pytest.raises(NotFound, match="no pending approvals"):
        await runs_of(rt).decide(ALICE, "c1", [{"tool_call_id": "t1", "approve": False}])
    # Two people deciding at once: the store takes one decision per pending call, and refuses the other.
    with pytest.raises(ApprovalConflict, match="decided already"):
        await rt.store.decide_approvals(ALICE, "c1", point.run.id, point.pending)


async def test_a_resume_cannot_run_calls_nobody_approved(rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    await waiting_turn(rt, fake, tmp_path / "ledger")
    with pytest.raises(ApprovalConflict, match="waits for a person to approve testing__tally"):
        await runs_of(rt).resume(ALICE, "c1")
    with pytest.raises(NotFound, match="waits for approvals"):
        await runs_of(rt).resume_point(ALICE, "c1")
    assert counted(tmp_path / "ledger") == []


async def test_a_new_message_denies_what_waits(rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    await waiting_turn(rt, fake, ledger)
    fake.enqueue(Reply(text="Never mind then."))
    end = end_of(await turn(rt, "actually, forget it", assistant="tooled"))
    assert end.status == "completed"
    assert counted(ledger) == []
    sent = fake.requests[-1].messages
    results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert results == {"t1": "denied: the user sent a new message", "a1": "not run: the user sent a new message"}
    assert sent[-1] == {"role": "user", "content": "actually, forget it"}
    with pytest.raises(NotFound):
        await runs_of(rt).conversations.approvals(ALICE, "c1")
    decided = [m.approval for m in await rt.store.history(ALICE, "c1") if m.tool_call_id == "t1"]
    assert decided[0] is not None and decided[0].get("reason") == "the user sent a new message"


async def test_another_tenant_sees_no_approvals(rt: Runtime, fake: ScriptedModel, tmp_path: Path) -> None:
    await waiting_turn(rt, fake, tmp_path / "ledger")
    with pytest.raises(NotFound, match="no chat 'c1'"):
        await runs_of(rt).conversations.approvals(BOB, "c1")
    with pytest.raises(NotFound, match="no chat 'c1'"):
        await runs_of(rt).decide(BOB, "c1", [{"tool_call_id": "t1", "approve": True}])
    assert [a.tool_call_id for a in (await runs_of(rt).conversations.approvals(ALICE, "c1")).pending] == ["t1"]


async def test_a_decision_after_a_restart_continues_the_run(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    ledger = tmp_path / "ledger"
    before = in_process(tooled(tmp_path / "app", store, fake, assistant=APPROVING))
    try:
        await waiting_turn(before, fake, ledger)
    finally:
        await close(before)
    after = in_process(tooled(tmp_path / "app2", store, fake, assistant=APPROVING))
    after.ids = RandomIds()  # another process: its own ids
    try:
        fake.enqueue(Reply(text="Paid."))
        events = await drained(Runs(after), [{"tool_call_id": "t1", "approve": True}])
        assert end_of(events).status == "completed"
        assert counted(ledger) == ["paid"]
    finally:
        await close(after)


async def test_a_create_hook_can_require_approval(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    hook = "function Create(ctx, messages, options) { return {require_approval: ['testing__add']}; }\n"
    assistant = "name: Tooled\nhook: hooks/policy.js\nmcp:\n  servers: [testing]\n  max_turns: 3\n"
    runtime = in_process(tooled(tmp_path / "app", store, fake, assistant=assistant,
                                more={"hooks/policy.js": hook}))  # fmt: skip
    try:
        fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "a1"),)))
        events = await turn(runtime, "add", assistant="tooled")
        assert [e.tool for e in events if isinstance(e, ApprovalRequest)] == ["add"]
        fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 2}, "a2"),)))
        events = await drained(runs_of(runtime), [{"tool_call_id": "a1", "approve": True}])
        # The hook's policy holds in the continuation, which skips Create: the next add waits too.
        assert [e.tool_call_id for e in events if isinstance(e, ApprovalRequest)] == ["a2"]
        assert isinstance(events[-1], StreamEnd) and events[-1].status == "waiting"
    finally:
        await close(runtime)


async def test_a_ctx_call_cannot_wait_for_a_person(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    hook = ("async function Create(ctx, messages, options) {\n"
            "  await ctx.call('tooled', [{role: 'user', content: 'pay'}]);\n  return null;\n}\n")  # fmt: skip
    more = {"hooks/asker.js": hook, "assistants/asker/assistant.yml": "name: Asker\nhook: hooks/asker.js\n"}
    runtime = in_process(tooled(tmp_path / "app", store, fake, assistant=APPROVING, more=more))
    try:
        fake.enqueue(Reply(tool_calls=(tally(tmp_path / "ledger", "x", "t1"),)))
        end = end_of(await turn(runtime, "go", assistant="asker"))
        assert (end.status, end.reason) == ("failed", "delegate_error")
        assert "needs a person's approval; a ctx.call cannot wait for one" in end.error["message"]
        assert counted(tmp_path / "ledger") == []
    finally:
        await close(runtime)


async def test_a_delegated_assistant_waits_and_its_decision_continues_inside_it(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    hook = "function Create(ctx, messages, options) { return {delegate: {assistant_id: 'tooled'}}; }\n"
    more = {"hooks/front.js": hook, "assistants/front/assistant.yml": "name: Front\nhook: hooks/front.js\n"}
    runtime = in_process(tooled(tmp_path / "app", store, fake, assistant=APPROVING, more=more))
    ledger = tmp_path / "ledger"
    try:
        fake.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"),)))
        events = await turn(runtime, "pay", assistant="front")
        asked = [e for e in events if isinstance(e, ApprovalRequest)]
        assert [a.tool_call_id for a in asked] == ["t1"] and asked[0].thread_id is not None
        assert end_of(events).status == "waiting"
        fake.enqueue(Reply(text="Paid."))
        events = await drained(runs_of(runtime), [{"tool_call_id": "t1", "approve": True}])
        assert (end_of(events).status, counted(ledger)) == ("completed", ["paid"])
        answer = [m for m in await runtime.store.history(ALICE, "c1") if m.role == "assistant" and m.content]
        assert answer[-1].content == "Paid." and answer[-1].thread_id == asked[0].thread_id
        # The front assistant's Create hook did not run again: one hand-over, continued inside it.
        assert len(fake.requests) == 2
    finally:
        await close(runtime)


async def test_a_decision_is_shown_with_its_own_result_when_a_provider_reuses_call_ids(
    rt: Runtime, fake: ScriptedModel, tmp_path: Path
) -> None:
    fake.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "x1"),)), Reply(text="2."))
    await turn(rt, "add", assistant="tooled")
    fake.enqueue(Reply(tool_calls=(tally(tmp_path / "ledger", "paid", "x1"),)), Reply(text="Paid."))
    await turn(rt, "pay", assistant="tooled")
    await drained(runs_of(rt), [{"tool_call_id": "x1", "approve": True}])
    shown = [(m.content, m.approval is not None) for m in await rt.store.history(ALICE, "c1") if m.role == "tool"]
    assert shown == [("2", False), ("counted paid", True)]
