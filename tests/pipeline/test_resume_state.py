"""A resume continues the same run's state (CONTRACT §4): a run killed after any committed step and
resumed makes the same tool executions, asks the same approvals, spends no more model calls and ends
with the same reason as the run that was never killed.

The kill is a store whose process "dies" right after its k-th journal commit: the run is stopped there
and nothing more is written (no flush), as after `kill -9`; the next process marks the run interrupted
and resumes it. Each scenario is run once whole, for the reference, and then killed after each of the
commits the whole run made. tests/pipeline/test_journal_kill.py kills real processes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import ALICE, close, end_of, runs_of
from tests.support.tools import call, in_process, tooled
from yao_agent.base.jsonvalue import as_mapping
from yao_agent.connectors import CallOptions
from yao_agent.dsl.specs import McpUse
from yao_agent.events import ApprovalRequest, Event, StreamEnd
from yao_agent.identity import OPERATOR, Identity
from yao_agent.ids import RandomIds
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunRequest, Runtime, carry, permission
from yao_agent.pipeline.options import RunOptions
from yao_agent.store import SqlStore
from yao_agent.store.records import Approval, LeaseRelease, RunRecord, StepRecord
from yao_agent.testing import RecordedRequest, Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


class DiesAfter(SqlStore):
    """A store whose process dies right after its `commits`-th journal commit (never, with None)."""

    def __init__(self, store: SqlStore, commits: int | None) -> None:
        super().__init__(store.db)
        self.left, self.dead, self.commits = commits, False, 0
        self.kill: Callable[[], None] = lambda: None

    async def commit_steps(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        carry: Any = None,
    ) -> None:  # fmt: skip
        if self.dead:
            return
        await super().commit_steps(identity, run, new, done, carry)
        self.commits += 1
        if self.left is not None and self.commits == self.left:
            self.dead = True
            self.kill()  # the run stops at its next await: what it does after this commit is lost

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None:  # fmt: skip
        if not self.dead:
            await super().finish_run(identity, run, new, done, waiting, release)


@dataclass
class Outcome:
    status: str
    reason: str | None
    executions: list[str]  # the tally's lines: one per tool execution
    approvals: list[str]  # the tool calls a person was asked about, by tool name and label
    model_calls: int
    commits: int


@dataclass(frozen=True)
class Scenario:
    name: str
    model: Callable[[RecordedRequest, Path], Reply]
    limits: str = "{max_turns: 10, max_tool_retries: 3}"
    hook: str | None = None
    tool_turns: int = 20


def lines(tally: Path) -> list[str]:
    return tally.read_text().split() if tally.exists() else []


def results(record: RecordedRequest) -> int:
    return sum(1 for m in record.messages if m.get("role") == "tool")


def tallied(tally: Path, label: str, call_id: str) -> Reply:
    return Reply(tool_calls=(call("testing__tally", {"path": str(tally), "label": label}, call_id),))


def new_labels(record: RecordedRequest, tally: Path) -> Reply:
    """Always one more call, each with a new label (no loop): only max_turns stops it."""
    n = results(record)
    return tallied(tally, f"x{n}", f"c{n}")


def same_call(record: RecordedRequest, tally: Path) -> Reply:
    """The same call with the same result, again and again: the loop detector stops it."""
    return tallied(tally, "same", f"c{results(record)}")


def bad_arguments(record: RecordedRequest, tally: Path) -> Reply:
    """A call whose arguments never fit the tool's schema: the tool retries run out."""
    n = results(record)
    return Reply(tool_calls=(call("testing__add", {"a": "one", "b": n}, f"c{n}"),))


def pay_once(record: RecordedRequest, tally: Path) -> Reply:
    """A payment, then the answer; a Create hook says the payment needs a person."""
    return tallied(tally, "pay", "p1") if results(record) == 0 else Reply(text="Paid.")


APPROVAL_HOOK = "function Create(ctx, messages, options) { return {require_approval: ['testing__tally']}; }\n"
CHOOSING_HOOK = (
    "function Create(ctx, messages, options) {\n"
    "  ctx.memory.set('created', (ctx.memory.get('created') || 0) + 1);\n"
    "  return {temperature: 0.25, metadata: {plan: 'gold'}};\n}\n"
)

STOPPING_HOOK = (  # Next: after the third tool result, enough: the run ends there
    "function Next(ctx, payload, options) {\n"
    "  const results = payload.messages.filter(m => m.role === 'tool').length + payload.tools.length;\n"
    "  return results >= 3 ? {stop: true, data: {results: results}} : null;\n}\n"
)

SCENARIOS = [
    Scenario("max_turns", new_labels, limits="{max_turns: 5, max_tool_retries: 3}"),
    Scenario("tool_loop_last_word", new_labels, tool_turns=2),
    Scenario("loop_detected", same_call, limits="{max_turns: 30, max_tool_retries: 3}"),
    Scenario("tool_retries", bad_arguments),
    Scenario("create_requires_approval", pay_once, hook=APPROVAL_HOOK),
    Scenario("next_hook_stops", new_labels, hook=STOPPING_HOOK),
]


async def play(tmp_path: Path, store: SqlStore, scenario: Scenario, kill_after: int | None, chat_id: str) -> Outcome:
    """The scenario's run, killed after `kill_after` commits (then recovered and resumed), approvals
    approved as they are asked, until it ends."""
    tally = tmp_path / f"tally-{chat_id}"
    model = ScriptedModel(default=lambda record: scenario.model(record, tally))
    dying = DiesAfter(store, kill_after)
    assistant = f"name: Tooled\nmcp:\n  servers: [testing]\n  max_turns: {scenario.tool_turns}\n"
    more: dict[str, str] = {}
    if scenario.hook is not None:
        assistant += "hook: hooks/policy.js\n"
        more["hooks/policy.js"] = scenario.hook
    rt = in_process(tooled(tmp_path / f"app-{chat_id}", dying, model, limits=scenario.limits, assistant=assistant,
                           more=more))  # fmt: skip
    rt.ids = RandomIds()  # the plays share one store
    try:
        return await _until_it_ends(rt, dying, chat_id, tally, model)
    finally:
        await close(rt)


async def _until_it_ends(rt: Runtime, store: DiesAfter, chat_id: str, tally: Path, model: ScriptedModel) -> Outcome:
    runs, asked = runs_of(rt), list[str]()
    handle = await runs.start(RunRequest("tooled", ALICE, [{"role": "user", "content": "go"}], chat_id=chat_id))
    for _ in range(10):
        store.kill = handle.cancel
        events: list[Event] = [e async for e in handle.events()]
        asked += [f"{e.tool}:{as_mapping(e.arguments).get('label')}" for e in events if isinstance(e, ApprovalRequest)]
        end = end_of(events)
        if store.dead:  # the next process: the dead one's run is interrupted, and resumed
            store.dead, store.left = False, None
            assert await store.recover_interrupted(OPERATOR, lambda _owner, _beat: True) != []
            handle = await runs.resume(ALICE, chat_id)
        elif end.status == "waiting":
            point = await runs.conversations.approvals(ALICE, chat_id)
            handle = await runs.decide(ALICE, chat_id, [{"tool_call_id": a.tool_call_id, "approve": True}
                                                        for a in point.pending])  # fmt: skip
        else:
            return Outcome(end.status, end.reason, lines(tally), asked, len(model.requests), store.commits)
    raise AssertionError("the run did not end within 10 resumes")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_a_run_killed_after_any_commit_and_resumed_does_what_the_whole_run_did(
    tmp_path: Path, store: SqlStore, scenario: Scenario
) -> None:
    whole = await play(tmp_path, store, scenario, None, "whole")
    assert whole.commits >= 2 and whole.model_calls >= 2  # a scenario with steps to be killed between
    for k in range(1, whole.commits):
        killed = await play(tmp_path, store, scenario, k, f"k{k}")
        where = f"killed after commit {k} of {whole.commits}"
        assert (killed.status, killed.reason) == (whole.status, whole.reason), where
        assert killed.executions == whole.executions, where
        assert killed.approvals == whole.approvals, where
        assert killed.model_calls == whole.model_calls, where


async def test_what_the_create_hook_chose_holds_in_the_resume_and_it_is_not_asked_again(
    tmp_path: Path, store: SqlStore
) -> None:
    """Killed after Create decided and before the model answered: the resumed call has the hook's options,
    and the hook (whose effects are the run's) ran once."""
    tally = tmp_path / "tally-k1"
    model = ScriptedModel(default=lambda record: Reply(text="Hello."))
    dying = DiesAfter(store, 1)  # the Create step is the first commit
    assistant = "name: Tooled\nhook: hooks/policy.js\n"
    rt = tooled(tmp_path / "app", dying, model, assistant=assistant, more={"hooks/policy.js": CHOOSING_HOOK})
    try:
        outcome = await _until_it_ends(rt, dying, "k1", tally, model)
        assert (outcome.status, outcome.model_calls) == ("completed", 1)
        [asked] = model.requests
        assert asked.body.get("temperature") == 0.25  # the hook's choice, made before the kill
        runs = await rt.store.runs_of(ALICE, "k1")
        assert len(runs) == 2 and runs[0].status != runs[1].status  # the killed run and its resume
        views = [await rt.store.run_view(ALICE, "k1", run.id) for run in runs]
        creates = [s for view in views if view is not None for s in view.steps if s.type == "hook_create"]
        assert len(creates) == 1
    finally:
        await close(rt)


async def test_a_call_with_arguments_that_are_no_json_is_answered_so_again_after_a_kill(
    tmp_path: Path, store: SqlStore
) -> None:
    """The call is stored with `{}` (what providers accept back) and what the model wrote beside it: the
    resumed round answers it with the same error, and never runs the tool with `{}`."""
    said = '{"oops": '

    def model(record: RecordedRequest) -> Reply:
        if results(record) == 0:
            return Reply(tool_calls=(call("testing__protocol_fail", said, "p1"),))
        return Reply(text="Sorry.")

    scripted = ScriptedModel(default=model)
    dying = DiesAfter(store, 1)  # right after the reply with the call
    rt = in_process(tooled(tmp_path / "app", dying, scripted))
    try:
        outcome = await _until_it_ends(rt, dying, "k1", tmp_path / "tally", scripted)
        assert outcome.status == "completed"
        [result] = [m for m in await rt.store.history(ALICE, "k1") if m.role == "tool"]
        assert said in str(result.content) and "invalid JSON in the arguments" in str(result.content)
    finally:
        await close(rt)


async def test_the_carry_keeps_the_runs_choices_as_the_store_can_hold_them(rt: Runtime) -> None:
    """What the store gets back is what the run had: tuples, the MCP servers a hook chose, the options in
    the order they were set."""
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "hi"}], options={"temperature": 0.2})
    state = await permission.check(rt, request)
    chosen = (McpUse("bank", ("pay", "balance"), ("pay",)), McpUse("files"))
    state.options = state.options.over(RunOptions(require_approval=("bank__pay",))).over(RunOptions(mcp_servers=chosen))
    state.turns, state.tool_turns, state.signatures, state.spend.calls = 3, 2, ["s1", "s2"], 4
    stored = json.loads(json.dumps(carry.snapshot(state)))
    assert list(stored["options"]) == ["temperature", "require_approval", "mcp_servers"]  # in the order set
    back = carry.read(stored)
    assert back is not None
    kept = RunOptions(mcp_servers=chosen, require_approval=("bank__pay",), call=CallOptions(temperature=0.2))
    assert back.options == kept
    assert (back.turns, back.tool_turns, back.signatures, back.hook_calls) == (3, 2, ("s1", "s2"), 4)
    assert carry.read({"version": 99, "turns": 3}) is None  # a carry this version does not know: none


# A carry as the run kept it before its options were typed: the hook's choices first, as Create gave them.
OLD_CARRY: dict[str, Any] = {
    "version": 1, "turns": 2, "tool_turns": 1, "tool_attempt": 0, "output_retries": 0, "signatures": ["s1"],
    "hook_calls": 1, "hook_sent_bytes": 10, "created": True,
    "options": {"connector": "fake.model", "temperature": 0.25, "max_tokens": 64, "top_p": 0.5,
                "mcp_servers": [{"server": "bank", "tools": None, "approve": ["pay"]}],
                "require_approval": ["bank__pay"]},
    "metadata": {"route": "light"}, "locale": "fr", "create_messages": None,
}  # fmt: skip


def test_a_carry_stored_before_the_options_were_typed_is_read_and_kept_as_it_was() -> None:
    back = carry.read(OLD_CARRY)
    assert back is not None
    chosen = back.options
    assert (chosen.connector, chosen.call.temperature, chosen.call.max_tokens) == ("fake.model", 0.25, 64)
    assert chosen.mcp_servers == (McpUse("bank", None, ("pay",)),) and chosen.require_approval == ("bank__pay",)
    assert json.dumps(chosen.to_json()) == json.dumps(OLD_CARRY["options"])  # written back as it was
    # An option no run sets any more (an embedding caller's, once carried as it was) is passed over.
    odd = carry.read(OLD_CARRY | {"options": {"odd": object(), "seed": 3}})
    assert odd is not None and odd.options == RunOptions(call=CallOptions(seed=3))


def down_once(when: Callable[[RecordedRequest], bool], then: Callable[[RecordedRequest], Reply]) -> ScriptedModel:
    """A model whose first call for which `when` holds fails (a 500); every other call is `then`'s."""
    left = [1]

    def model(record: RecordedRequest) -> Reply:
        if left[0] and when(record):
            left[0] = 0
            return Reply(status=500, error_message="down for a moment")
        return then(record)

    return ScriptedModel(default=model)


async def failed_then_resumed(rt: Runtime) -> StreamEnd:
    """A run of `tooled` on chat c1 that fails on the model, then its resume's end."""
    runs = runs_of(rt)
    request = RunRequest("tooled", ALICE, [{"role": "user", "content": "go"}], chat_id="c1")
    first = end_of([e async for e in (await runs.start(request)).events()])
    assert (first.status, first.reason) == ("failed", "model_error")
    return end_of([e async for e in (await runs.resume(ALICE, "c1")).events()])


async def test_a_last_word_that_failed_is_asked_again_without_tools(tmp_path: Path, store: SqlStore) -> None:
    """The tool loop used up its turns, and the call asking the model to answer from the results failed:
    the resume asks that again, still without tools, so no tool runs past mcp.max_turns."""
    tally = tmp_path / "tally"
    scripted = down_once(lambda record: not record.tools, lambda record: new_labels(record, tally))
    assistant = "name: Tooled\nmcp:\n  servers: [testing]\n  max_turns: 1\n"
    rt = in_process(tooled(tmp_path / "app", store, scripted, assistant=assistant))
    try:
        end = await failed_then_resumed(rt)
        assert end.status == "completed"
        assert lines(tally) == ["x0", "x1"]  # the loop's two rounds, none after
        assert not scripted.requests[-1].tools
    finally:
        await close(rt)


REWRITING_HOOK = (  # Create puts a note before the conversation
    "function Create(ctx, messages, options) {\n"
    "  return {messages: [{role: 'system', content: 'be brief'}].concat(messages)};\n}\n"
)


async def test_the_conversation_create_wrote_never_hides_the_replies_that_followed(
    tmp_path: Path, store: SqlStore
) -> None:
    """Create rewrote the conversation, the model called a tool, and the next call failed: the resume
    asks with the tool's result (from the stored chat), and the tool does not run again."""
    tally = tmp_path / "tally"
    scripted = down_once(
        lambda record: results(record) == 1,
        lambda record: tallied(tally, "once", "c0") if results(record) == 0 else Reply(text="Counted once."),
    )
    assistant = "name: Tooled\nhook: hooks/policy.js\nmcp:\n  servers: [testing]\n  max_turns: 5\n"
    rt = in_process(tooled(tmp_path / "app", store, scripted, assistant=assistant,
                           more={"hooks/policy.js": REWRITING_HOOK}))  # fmt: skip
    try:
        end = await failed_then_resumed(rt)
        assert end.status == "completed"
        assert lines(tally) == ["once"]
        assert results(scripted.requests[-1]) == 1
    finally:
        await close(rt)
