"""Stage 8, tools: run the model's tool calls, and let it correct the ones that failed.

Calls of one reply run concurrently; each result is paired with its call id, streamed as a
`tool_result` and stored as a `tool` message. Retryable failures (invalid JSON, arguments that break
the tool's schema, an error the tool reported) go back to the model with a plain-words request to
correct the call; at most `limits.max_tool_retries` executions. A round's attempt returns what it
came to — `Executed` (every call has its result) or `Correct` (the model is to be asked, which the turn
machine does: transition `tool_retry`). A non-retryable failure (unknown tool, unreachable server,
protocol error, timeout) ends the run with `tool_error`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from yao_agent.errors import ToolError
from yao_agent.events import ToolResult
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.pipeline import approvals, client_tools, guard, guards, journal, search
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord
from yao_agent.store.step_inputs import ToolRound
from yao_agent.tools import Offer, ToolOutcome, ToolSpec
from yao_agent.tools.outcome import failure
from yao_agent.tools.validate import invalid_arguments

log = logging.getLogger("yao_agent.tools")


@dataclass(frozen=True, slots=True)
class Executed:
    """Every call of the reply has its result (an error the model may read is a result too)."""

    results: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Correct:
    """Some calls failed in a way the model may correct, and attempts are left: it is asked to."""


RoundOutcome = Executed | Correct


@dataclass
class _Done:
    """One finished call: what the pipeline knows, what `tool_result` said, the stored `tool` message."""

    outcome: ToolOutcome
    result: dict[str, Any]
    message: ChatMessage


async def offered(rt: Runtime, state: RunState) -> Offer:
    """The tools this run may use: the Create hook's `mcp_servers`, else the assistant's; listed once.

    A server that cannot be started is left out (with a warning naming it): the model is told its tools
    are unavailable, and a run that needs none of them goes on as usual."""
    if state.tools is None:
        chosen = state.options.mcp_servers
        uses = chosen if chosen is not None else state.assistant.mcp.servers
        state.tools = await rt.tools.offer(uses) if uses else Offer([])
        if search.offers_tool(state):
            state.tools = Offer([*state.tools.tools, search.TOOL], state.tools.unavailable)
        client_tools.check_names(state, state.tools.tools)  # (a Create hook's servers may bring a clash)
        for message in state.tools.unavailable.values():
            log.warning("run %s: the tools of a server are not offered: %s", state.run_id, message)
    return state.tools


def unavailable_note(offer: Offer) -> list[dict[str, Any]]:
    """A system message telling the model which tool servers could not be reached, so it can say so."""
    if not offer.unavailable:
        return []
    names = ", ".join(f"'{server}'" for server in offer.unavailable)
    text = (f"The tools of {names} are unavailable right now (the server could not be reached). If the user "
            "needs them, say that they are unavailable; do not pretend to have used them.")  # fmt: skip
    return [{"role": "system", "content": text}]


async def run_round(
    rt: Runtime, state: RunState, reply: ChatMessage, replacing: Mapping[str, str] | None = None
) -> RoundOutcome:
    """Execute `reply`'s calls as the round's next attempt (`state.tool_attempt` counts those that failed).

    `replacing` (a resumed round: call id → the stored result it replaces) is for a first attempt only:
    a correction the model makes is a new reply with new calls."""
    limit = rt.app.config.limits.max_tool_retries
    attempt = state.tool_attempt + 1
    step, outcomes = await execute(rt, state, reply.tool_calls, attempt, replacing)
    failed = [(call, o) for call, (o, _) in zip(reply.tool_calls, outcomes, strict=True) if not o.ok]
    if not failed:
        state.tool_attempt = 0
        await journal.commit(rt, state, steps=[step])  # the round's results were committed one by one
        return Executed([r for _, r in outcomes])
    if any(not outcome.retryable for _, outcome in failed):
        raise ToolError(_summary("a tool call failed and cannot be retried", failed))
    if attempt == limit:
        raise ToolError(_summary(f"tool calls failed after {limit} attempts", failed))
    state.buffer.recovered(step)  # the model is asked to correct it: a resume never runs it again
    state.tool_attempt = attempt  # before the commit: a resume counts this attempt
    await journal.commit(rt, state, steps=[step])
    return Correct()


def _summary(head: str, failed: Sequence[tuple[ToolCall, ToolOutcome]]) -> str:
    return head + ": " + "; ".join(f"{call.name}: {outcome.error}" for call, outcome in failed)


async def execute(
    rt: Runtime, state: RunState, calls: Sequence[ToolCall], attempt: int, replacing: Mapping[str, str] | None = None
) -> tuple[StepRecord, list[tuple[ToolOutcome, dict[str, Any]]]]:
    """Run calls concurrently (cancelling the task reaches each running call); results keep call order.

    Each result is kept as its call finishes, so a round cut short (cancel, timeout, a bug) still
    stores the results it got; only the calls that had none are left for `close` to pair.
    """
    tools = (await offered(rt, state)).tools
    step = state.buffer.begin("tool", ToolRound(tuple(calls), attempt), state.thread_id)
    finished: dict[int, _Done] = {}
    try:
        await _run_all(rt, state, calls, tools, attempt, finished, replacing or {})
    except BaseExceptionGroup as group:  # a call raised (a bug): its siblings were stopped
        _cut_short(state, step, calls, attempt, finished, group)
        raise _first(group) from None
    except BaseException as exc:
        _cut_short(state, step, calls, attempt, finished, exc)
        raise
    done = [finished[index] for index in range(len(calls))]
    _keep(state, done)
    errors = [d.result["error"] for d in done if d.result["error"]]
    state.buffer.end(step, "failed" if errors else "completed", output={"errors": errors} if errors else None,
                     error={"message": "; ".join(errors)} if errors else None)  # fmt: skip
    pairs = zip(calls, done, strict=True)
    state.signatures.append(
        guards.step_signature((c.name, c.arguments, d.outcome.result, d.outcome.error) for c, d in pairs)
    )
    return step, [(d.outcome, d.result) for d in done]


async def _run_all(
    rt: Runtime, state: RunState, calls: Sequence[ToolCall], tools: Sequence[ToolSpec], attempt: int,
    finished: dict[int, _Done], replacing: Mapping[str, str],
) -> None:  # fmt: skip
    journaled = [0]  # how many of the calls, from the first, have their result committed

    async def one(index: int, call: ToolCall) -> None:
        done = await _one(rt, state, call, tools, attempt)
        stored = replacing.get(call.id)
        if stored is not None:  # a resumed call: its result takes the place of the one stored before
            done.message.id, done.message.replaces = stored, True
        finished[index] = done
        ready: list[ChatMessage] = []
        while journaled[0] in finished:  # committed in call order (a result waits for the earlier calls')
            ready.append(finished[journaled[0]].message)
            journaled[0] += 1
        if ready and len(finished) < len(calls):  # the last result goes with the round's own commit (run_round),
            await journal.commit(rt, state, ready)  # which also carries what the round decided (pipeline/carry.py)

    async with asyncio.TaskGroup() as group:  # one call failing (or a cancel) stops the others
        for index, call in enumerate(calls):
            group.create_task(one(index, call), name=f"tool call {call.id}")


def _keep(state: RunState, done: Sequence[_Done]) -> None:
    """Store and show the model the results, in call order, whatever order they finished in."""
    for item in done:
        state.buffer.add(item.message)
        state.conversation.append(item.message.to_provider())


def _cut_short(
    state: RunState, step: StepRecord, calls: Sequence[ToolCall], attempt: int, finished: dict[int, _Done],
    exc: BaseException,
) -> None:  # fmt: skip
    """The round stopped early: keep what finished; a resume runs only the calls that had no result."""
    _keep(state, [finished[index] for index in sorted(finished)])
    step.input = ToolRound(tuple(c for i, c in enumerate(calls) if i not in finished), attempt)
    cancelled = isinstance(exc, asyncio.CancelledError)
    error = None if cancelled else {"message": type(_first(exc)).__name__}
    state.buffer.end(step, "cancelled" if cancelled else "failed", error=error)


def _not_offered(rt: Runtime, state: RunState, name: str, tools: Sequence[ToolSpec]) -> str:
    """Why a call names no offered tool: its server could not be reached (say which, and why), or no such tool."""
    unavailable: Mapping[str, str] = state.tools.unavailable if state.tools is not None else {}
    why = unavailable.get(rt.tools.server_of(name) or "")
    if why is not None:
        return why
    return f"unknown tool '{name}' (offered: {', '.join(t.name for t in tools) or 'none'})"


def _first(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups a failed task group raises."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], exc)
        return _first(group.exceptions[0]) if group.exceptions else group
    return exc


async def _one(rt: Runtime, state: RunState, call: ToolCall, tools: Sequence[ToolSpec], attempt: int) -> _Done:
    spec = rt.tools.find(call.name, tools)
    said_no = approvals.denied(state, call.id)
    brought = client_tools.result_of(state, call.id)
    if brought is not None:  # a call of the client's own tool: the client ran it and sent this
        outcome = ToolOutcome(result=brought, error=None, retryable=False)
    elif said_no is not None:  # a person denied it: the model is told so, and the tool never sees the call
        outcome = ToolOutcome(result=said_no, error=None, retryable=False)
        state.buffer.unrun[call.id] = "denied"
    elif spec is None:
        outcome = failure(_not_offered(rt, state, call.name, tools), retryable=False)
    elif call.invalid is not None:
        outcome = failure(invalid_arguments(call.invalid), retryable=True)
    elif spec == search.TOOL:
        outcome = await search.tool_call(rt, state, call.arguments)
    else:
        arguments = await guard.tool_arguments(rt, state, call.arguments)
        outcome = await guard.tool_result(rt, state, await rt.tools.call(spec, arguments))
    server, tool = (spec.server, spec.tool) if spec is not None else ("", call.name)
    result = {"tool_call_id": call.id, "server": server, "tool": tool, "arguments": call.arguments,
              "result": outcome.result, "error": outcome.error}  # fmt: skip
    await state.emit(ToolResult(state.run_id, call.id, server, tool, outcome.result, outcome.error, attempt,
                                state.thread_id))  # fmt: skip
    message = ChatMessage(
        id=rt.ids.new("msg"),
        role="tool",
        content=outcome.text(),
        run_id=state.run_id,
        tool_call_id=call.id,
        thread_id=state.thread_id,
        created_at=rt.clock(),
        hidden=state.hidden,
    )
    return _Done(outcome, result, message)
