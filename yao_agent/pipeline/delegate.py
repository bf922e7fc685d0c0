"""Child runs: a hook hands the conversation to another assistant (`delegate`) or asks one (`ctx.call`).

A child runs the same stages as a nested stack: its messages carry its `thread_id`, it writes into
the root run's buffer (the root flushes once), and it never sends `stream_start`/`stream_end`.
Depth is bounded by `limits.max_delegate_depth`, which also stops delegation cycles.

Each child run is a `delegate` step whose input says who asked (`from_thread`) and how (`via`), so
a resume can find the step a run stopped at even when it stopped inside a child it handed over to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.errors import DelegateError, HookError, OverBudget, RunError, UsageError
from yao_agent.messages import ChatMessage, parse_input
from yao_agent.pipeline import close, connector
from yao_agent.pipeline.answers import Delegation
from yao_agent.pipeline.outcomes import End, Wait
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import ResumePoint, StepRecord
from yao_agent.store.step_inputs import ChildRun, Via

# The stages a child runs: the turn loop, handed in by the stage that drives runs (never imported here).
Converse = Callable[[Runtime, RunState, StepRecord | None], Awaitable[End]]


class Children:
    """The child runs of one run tree, each run with `converse` (the same stages as its parent's)."""

    def __init__(self, rt: Runtime, converse: Converse) -> None:
        self.rt = rt
        self.converse = converse

    async def hand_over(self, state: RunState, target: Delegation) -> Wait | None:
        """`delegate`: the child's reply is this turn's reply (and the conversation continues with it); the
        child's `Wait` if it stopped for a person's approval."""
        child, waits = await self._child_run(state, target.assistant_id, target.messages, hidden=state.hidden,
                                             via="delegate")  # fmt: skip
        if waits is None:
            _adopt(state, child)
        return waits

    async def call(self, state: RunState, assistant_id: str, messages: Any) -> dict[str, Any]:
        """`ctx.call`: ask another assistant; its turns are kept (hidden from later model calls).

        A child that fails is an error the hook can catch, worded for its author. A delegation that cannot
        happen at all (unknown assistant, too deep, a cycle) is not: it ends the run with `delegate_error`.
        """
        try:
            child, _ = await self._child_run(state, assistant_id, messages, hidden=True, via="call")  # (never waits:
            # a ctx.call child that would is a delegate_error, approvals.py)
        except (DelegateError, OverBudget):  # the run ends: a budget reached holds the hook's next calls too
            raise
        except RunError as exc:
            raise RunError(f"assistant '{assistant_id}' failed with {_described(exc)}", reason=exc.reason) from None
        reply = _last_reply(child)
        return {
            "assistant_id": assistant_id,
            "thread_id": child.thread_id,
            "content": reply.content if reply is not None else None,
            "message_id": reply.id if reply is not None else None,
            "next": child.next,
        }

    async def resume(self, parent: RunState, target: StepRecord) -> Wait | None:
        """The run stopped inside a child `parent` handed over to: hand over again to that same thread and
        resume the child at `target`, so nothing before it (Create, the hand-over, the child's model) reruns."""
        point = parent.request.resume
        steps = point.steps if point is not None else ()
        delegation = _towards(steps, parent.thread_id, target.thread_id)
        if delegation is None or delegation.thread_id is None:
            raise DelegateError("the delegation this run stopped in is no longer recorded; start a new turn")
        given = delegation.input
        if not isinstance(given, ChildRun):
            raise DelegateError("the delegation this run stopped in is no longer recorded; start a new turn")
        assistant_id = given.assistant_id
        messages = [dict(m) for m in given.messages] if given.messages else None
        thread_id = delegation.thread_id
        conversation = None if messages is None else [*messages, *_thread_messages(parent.root, thread_id)]
        child = _child(self.rt, parent, assistant_id, thread_id, messages, hidden=parent.hidden,
                       conversation=conversation)  # fmt: skip
        step = parent.buffer.begin("delegate", _step_input(parent, assistant_id, messages, "delegate"), thread_id)
        waits = await self._run(child, step, resume_at=target)
        if waits is None:
            _adopt(parent, child)
        return waits

    async def _child_run(self, parent: RunState, assistant_id: str, messages: Any, *, hidden: bool,
                         via: Via) -> tuple[RunState, Wait | None]:  # fmt: skip
        limit = self.rt.app.config.limits.max_delegate_depth
        if parent.depth + 1 > limit:
            chain = " → ".join(s.assistant.id for s in _lineage(parent)) + f" → {assistant_id}"
            raise DelegateError(f"delegation deeper than {limit} (limits.max_delegate_depth): {chain}")
        try:
            given = parse_input(messages, where="delegate messages") if messages is not None else None
        except UsageError as exc:
            raise DelegateError(str(exc)) from None
        thread_id = self.rt.ids.new("thread")
        child = _child(self.rt, parent, assistant_id, thread_id, given, hidden=hidden)
        step = parent.buffer.begin("delegate", _step_input(parent, assistant_id, given, via), thread_id)
        return child, await self._run(child, step)

    async def _run(self, child: RunState, step: StepRecord, resume_at: StepRecord | None = None) -> Wait | None:
        """The child's stages; its step ends with it, failed or not (a caught `ctx.call` failure included),
        or waiting for a person's approval."""
        try:
            await connector.resolve(self.rt, child)
            ended = await self.converse(self.rt, child, resume_at)
        except RunError as exc:
            child.buffer.end(step, "failed", error=close.error_detail(exc))
            raise
        except Exception as exc:
            child.buffer.end(step, "failed", error={"message": f"internal error: {type(exc).__name__}"})
            raise
        if isinstance(ended, Wait):
            child.buffer.end(step, "waiting")  # where the decision's continuation hands over again
            return ended
        reply = _last_reply(child)
        child.buffer.end(step, "completed", output={"thread_id": child.thread_id, "reply": reply.id if reply else None})
        return None


def _adopt(state: RunState, child: RunState) -> None:
    reply = _last_reply(child)
    if reply is not None:
        state.conversation.append(reply.to_provider())
    if child.next is not None:
        state.next = child.next  # the child answered, so its Next data is the run's


def _described(exc: RunError) -> str:
    if isinstance(exc, HookError):
        where = f"{exc.file}:{exc.line}" if exc.line else exc.file
        return f"{exc.reason} ({where}): {exc.message}"
    return f"{exc.reason}: {exc.message}"


def _child(
    rt: Runtime, parent: RunState, assistant_id: str, thread_id: str, given: list[dict[str, Any]] | None, *,
    hidden: bool, conversation: list[dict[str, Any]] | None = None,
) -> RunState:  # fmt: skip
    who = parent.identity
    spec = rt.app.assistants.get(assistant_id)
    if spec is None or not spec.access.allows(who.user_id, who.team_id):
        # The id may come from the request, and this error reaches the caller: an assistant they may not use
        # is unknown to them, as over HTTP, and only a few they may use are named.
        visible = rt.app.assistants_for(who.user_id, who.team_id)
        raise DelegateError(unknown("assistant", assistant_id, visible, HANDFUL))
    if conversation is None:
        conversation = given if given is not None else list(parent.conversation)
    ctx = replace(parent.ctx, assistant=spec, thread_id=thread_id, depth=parent.depth + 1, hidden=hidden,
                  parent=parent)  # fmt: skip
    return RunState(ctx=ctx, input=[], stored=True, conversation=conversation, metadata=dict(parent.metadata),
                    locale=parent.locale, children=parent.children, spend=parent.spend)  # fmt: skip


def _step_input(parent: RunState, assistant_id: str, given: list[dict[str, Any]] | None, via: Via) -> ChildRun:
    return ChildRun(assistant_id, given, via, parent.thread_id)


def resume_target(point: ResumePoint | None) -> StepRecord | None:
    """The step a run stopped at: the root's first unfinished step or, when that is a hand-over, the
    first unfinished step of that child (and so on down). A `ctx.call` child is never the place: its
    failure went to the hook that asked, and that hook's own step tells whether the run stopped there."""
    if point is None:
        return None
    thread: str | None = None
    while True:
        own = [s for s in point.steps if _owner(s) == thread and _via(s) != "call"]
        if not own:
            return None
        if own[0].type != "delegate":
            return own[0]
        thread = own[0].thread_id


def _towards(steps: tuple[StepRecord, ...], start: str | None, thread: str | None) -> StepRecord | None:
    """The hand-over of `start`'s that leads down to `thread`."""
    by_thread = {s.thread_id: s for s in steps if s.type == "delegate"}
    current = by_thread.get(thread)
    while current is not None and _owner(current) != start:
        current = by_thread.get(_owner(current))
    return current


def _thread_messages(root: RunState, thread_id: str) -> list[dict[str, Any]]:
    # A reply cut off mid-stream is never sent to a model as an answer (a resume may continue it: cut.py).
    cut = {m.id for m in root.history if m.role == "assistant" and m.status == "incomplete"}
    return [m.to_provider() for m in root.history if m.thread_id == thread_id and not m.withheld and m.id not in cut]


def _owner(step: StepRecord) -> str | None:
    """The thread a step belongs to (a `delegate` step carries its child's thread id)."""
    if step.type != "delegate":
        return step.thread_id
    return step.input.from_thread if isinstance(step.input, ChildRun) else None


def _via(step: StepRecord) -> Via | None:
    return step.input.via if isinstance(step.input, ChildRun) else None


def _lineage(state: RunState) -> list[RunState]:
    chain: list[RunState] = []
    current: RunState | None = state
    while current is not None:
        chain.append(current)
        current = current.parent
    return chain[::-1]


def _last_reply(child: RunState) -> ChatMessage | None:
    for message in reversed(child.buffer.messages):
        if message.thread_id == child.thread_id and message.role == "assistant" and message.status == "completed":
            return message
    return None
