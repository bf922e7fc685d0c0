"""Stage 8, tools: run the model's tool calls, and let it correct the ones that failed.

Calls of one reply run concurrently; each result is paired with its call id, streamed as a
`tool_result` and stored as a `tool` message. Retryable failures (invalid JSON, arguments that break
the tool's schema, an error the tool reported) go back to the model with a plain-words request to
correct the call; at most `limits.max_tool_retries` executions. A non-retryable failure (unknown
tool, unreachable server, protocol error, timeout) ends the run with `tool_error`. If the model
answers in text instead of retrying, that answer ends the round normally.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from yao_agent.dsl.specs import McpUse
from yao_agent.errors import ToolError
from yao_agent.events import ToolResult
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.pipeline import guards
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord
from yao_agent.tools import ToolOutcome, ToolSpec
from yao_agent.tools.outcome import failure

RETRY_PROMPT = (
    "One or more of your tool calls failed; the error is in each tool result above. Correct the call "
    "(its arguments must match the tool's JSON Schema) and call the tool again, or answer without it."
)


@dataclass
class Round:
    """What one reply's tool calls came to, across retries: the model's last reply and its results."""

    reply: ChatMessage  # the last reply: the model's correction, if it retried
    results: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # the last attempt's only
    answered_in_text: bool = False  # the model answered instead of retrying: the turn is over


@dataclass
class _Done:
    """One finished call: what the pipeline knows, what `tool_result` said, the stored `tool` message."""

    outcome: ToolOutcome
    result: dict[str, Any]
    message: ChatMessage


async def offered(rt: Runtime, state: RunState) -> list[ToolSpec]:
    """The tools this run may use: the Create hook's `mcp_servers`, else the assistant's; listed once."""
    if state.tools is None:
        uses: Sequence[McpUse] = state.options.get("mcp_servers", state.assistant.mcp.servers)
        state.tools = await rt.tools.tools_for(uses) if uses else []
    return state.tools


async def run(rt: Runtime, state: RunState, reply: ChatMessage, model_turn: Any) -> Round:
    """Execute `reply`'s calls; on retryable failures, ask the model to fix them (bounded)."""
    limit = rt.app.config.limits.max_tool_retries
    done = Round(reply)
    for attempt in range(1, limit + 1):
        outcomes = await execute(rt, state, reply.tool_calls, attempt)
        done.results = [r for _, r in outcomes]
        failed = [(call, o) for call, (o, _) in zip(reply.tool_calls, outcomes, strict=True) if not o.ok]
        if not failed:
            return done
        if any(not outcome.retryable for _, outcome in failed):
            raise ToolError(_summary("a tool call failed and cannot be retried", failed))
        if attempt == limit:
            raise ToolError(_summary(f"tool calls failed after {limit} attempts", failed))
        reply = await model_turn(rt, state, [{"role": "system", "content": RETRY_PROMPT}])
        done.reply, done.results = reply, []
        if not reply.tool_calls:
            done.answered_in_text = True
            return done
    return done


def _summary(head: str, failed: Sequence[tuple[ToolCall, ToolOutcome]]) -> str:
    return head + ": " + "; ".join(f"{call.name}: {outcome.error}" for call, outcome in failed)


async def execute(
    rt: Runtime, state: RunState, calls: Sequence[ToolCall], attempt: int
) -> list[tuple[ToolOutcome, dict[str, Any]]]:
    """Run calls concurrently (cancelling the task reaches each running call); results keep call order.

    Each result is kept as its call finishes, so a round cut short (cancel, timeout, a bug) still
    stores the results it got; only the calls that had none are left for `close` to pair.
    """
    tools = await offered(rt, state)
    step = state.buffer.begin("tool", {"calls": [c.to_dict() for c in calls], "attempt": attempt}, state.thread_id)
    finished: dict[int, _Done] = {}
    try:
        await _run_all(rt, state, calls, tools, attempt, finished)
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
    return [(d.outcome, d.result) for d in done]


async def _run_all(
    rt: Runtime, state: RunState, calls: Sequence[ToolCall], tools: Sequence[ToolSpec], attempt: int,
    finished: dict[int, _Done],
) -> None:  # fmt: skip
    async def one(index: int, call: ToolCall) -> None:
        finished[index] = await _one(rt, state, call, tools, attempt)

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
    step.input = {"calls": [c.to_dict() for i, c in enumerate(calls) if i not in finished], "attempt": attempt}
    cancelled = isinstance(exc, asyncio.CancelledError)
    error = None if cancelled else {"message": type(_first(exc)).__name__}
    state.buffer.end(step, "cancelled" if cancelled else "failed", error=error)


def _first(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups a failed task group raises."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], exc)
        return _first(group.exceptions[0]) if group.exceptions else group
    return exc


async def _one(rt: Runtime, state: RunState, call: ToolCall, tools: Sequence[ToolSpec], attempt: int) -> _Done:
    spec = rt.tools.find(call.name, tools)
    if spec is None:
        names = ", ".join(t.name for t in tools) or "none"
        outcome = failure(f"unknown tool '{call.name}' (offered: {names})", retryable=False)
    else:
        outcome = await rt.tools.call(spec, call.arguments)
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
