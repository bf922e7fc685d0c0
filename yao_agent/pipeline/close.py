"""Stage 10, close: the run's outcome, and the one `stream_end` a root run sends after its flush."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from yao_agent.base.redact import redact
from yao_agent.errors import HookError, ModelError, OverBudget, PromptError, RunError
from yao_agent.events import StreamEnd, ToolResult
from yao_agent.messages import ChatMessage, iso_time
from yao_agent.pipeline import client_tools
from yao_agent.pipeline.approvals import WAITING
from yao_agent.pipeline.outcomes import Wait
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.step_inputs import ToolRound
from yao_agent.vocabulary import UNFINISHED_STEPS, StepStatus, ToolCallOutcome, end_status

if TYPE_CHECKING:
    from yao_agent.shapes import UsageOut

log = logging.getLogger("yao_agent.run")


async def settle(rt: Runtime, state: RunState, outcome: BaseException | Wait | None) -> None:
    """Turn how the work ended (None: it finished) into the run's single final status and terminal reason.

    Calls left without a result get one, stored and streamed (before `stream_end`), so the client
    sees every call answered, as the stored chat has it — also in a completed run, whose last reply
    may ask for tools when no more may run.
    """
    run = state.run
    if outcome is None:
        run.status, run.reason, run.error = "completed", "completed", None
    elif isinstance(outcome, asyncio.CancelledError):
        run.status, run.reason, run.error = "cancelled", "cancelled", None
    elif isinstance(outcome, Wait):  # not a failure: the run goes on when a person (or the client) answers
        run.status, run.reason, run.error = "waiting", "client_tools" if outcome.client else "approval_required", None
    elif isinstance(outcome, RunError):
        run.status, run.reason, run.error = "failed", outcome.reason, error_detail(outcome)
        # Clients show a failure in plain words with the run id; the details are here, for whoever runs the server.
        log.warning("run %s of chat %s (%s) failed: %s: %s", run.id, run.chat_id, run.assistant_id, run.reason,
                    run.error["message"], extra={"run_outcome": True})  # fmt: skip
    else:
        log.error("run %s failed on an unexpected error", run.id, exc_info=outcome)
        run.status, run.reason = "failed", "internal_error"
        run.error = {"message": f"internal error: {type(outcome).__name__}"}
    if run.status != "completed":
        status: StepStatus = run.status if run.status in ("cancelled", "waiting") else "failed"
        state.buffer.settle(status, run.error)
        _open_round(state, status)
    for event in pair_open_calls(rt, state):
        if run.status != "waiting":  # a waiting call's stand-in is stored; its `approval_request` was the news
            await state.emit(event)
    run.ended_at = rt.clock()
    run.duration_ms = int((rt.monotonic() - state.started_mono) * 1000)
    run.usage = state.usage.as_dict()
    run.next = state.next


def _open_round(state: RunState, status: StepStatus) -> None:
    """Calls of a complete reply that no tool step took up (the run stopped between the reply and its
    round, e.g. cancelled while the reply was committed) get an unfinished `tool` step, so a resume runs
    them instead of asking the model again."""
    answered = {m.tool_call_id for m in state.buffer.messages if m.role == "tool"}
    for step in state.buffer.steps:
        if isinstance(step.input, ToolRound) and step.status in UNFINISHED_STEPS:
            answered.update(step.input.ids)
    for message in state.buffer.messages:
        open_calls = tuple(c for c in message.tool_calls if c.id not in answered)
        if open_calls and message.status == "completed":
            step = state.buffer.begin("tool", ToolRound(open_calls), message.thread_id)
            state.buffer.end(step, status, error=state.run.error)


def pair_open_calls(rt: Runtime, state: RunState) -> list[ToolResult]:
    """Give every tool call of this run that has no result a synthesized one, so the chat stays valid.

    Returns the `tool_result` events that announce them.
    """
    answered = {m.tool_call_id for m in state.buffer.messages if m.role == "tool"}
    why = {"completed": "not run: no more tool calls were allowed in this run", "cancelled": "cancelled",
           "waiting": WAITING}.get(state.run.status, f"failed: {state.run.reason}")  # fmt: skip
    status = state.run.status
    unrun: ToolCallOutcome = status if status in ("waiting", "cancelled") else "not_run"
    events: list[ToolResult] = []
    theirs = client_tools.names(state) if status == "waiting" else frozenset[str]()
    for message in list(state.buffer.messages):
        for call in message.tool_calls:
            if call.id in answered:
                continue
            answered.add(call.id)
            state.buffer.unrun[call.id] = unrun
            # A client's call waits for its client, also while the reply's other calls wait for a person.
            said = client_tools.STAND_IN if message.thread_id is None and call.name in theirs else why
            state.buffer.add(ChatMessage(
                id=rt.ids.new("msg"), role="tool", content=said, run_id=state.run_id, tool_call_id=call.id,
                thread_id=message.thread_id, created_at=rt.clock()))  # fmt: skip
            spec = rt.tools.locate(call.name)
            server, tool = (spec.server, spec.tool) if spec is not None else ("", call.name)
            events.append(ToolResult(state.run_id, call.id, server, tool, None, why, _attempt_of(state, call.id),
                                     message.thread_id))  # fmt: skip
    return events


def _attempt_of(state: RunState, call_id: str) -> int:
    """The execution the call was part of (a tool step that did not complete keeps its calls), else 1."""
    for step in reversed(state.buffer.steps):
        if isinstance(step.input, ToolRound) and call_id in step.input.ids:
            return step.input.attempt
    return 1


def error_detail(error: RunError) -> dict[str, Any]:
    """What a run's error shows (in `stream_end`, the store, the OpenAI error body): never a secret."""
    if isinstance(error, HookError | PromptError):
        return {**error.detail(), "message": redact(error.message)}
    if isinstance(error, ModelError):  # what kind of failure: a client tells its own mistake from the provider's
        return {"message": redact(error.message), "kind": error.kind}
    if isinstance(error, OverBudget):  # when a resume may go on (HTTP's Retry-After)
        return {"message": error.message, "resets_at": iso_time(error.resets_at)}
    return {"message": redact(error.message)}


def stream_end(state: RunState) -> StreamEnd:
    """How the run ended: its stream's last event, and (with its messages) its result, `RunHandle.result`."""
    run = state.run
    return StreamEnd(
        run_id=run.id, status=end_status(run.status), reason=run.reason or "internal_error",
        usage=cast("UsageOut", run.usage),  # what `settle` wrote: the run's usage, `RunUsage.as_dict`
        duration_ms=run.duration_ms or 0, error=run.error, next=run.next, output=output_of(state),
        approvals=[a.request() for a in state.waiting] if run.reason == "approval_required" else None,
        client_calls=client_tools.shown(state) if run.reason == client_tools.REASON else None,
    )  # fmt: skip


def output_of(state: RunState) -> Any:
    """The final answer's value, for a run that completed with an output schema (else None: not sent)."""
    return state.output if state.run.status == "completed" else None
