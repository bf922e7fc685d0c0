"""Tool approvals (CONTRACT §4.8): calls that wait for a person before they run.

Which calls: those of the tools an assistant's `mcp.servers` entry lists under `approve` (`all`: every
tool of that server) — also when a Create hook chose the servers — and those the Create hook named in
`require_approval` (a tool's name as the model calls it, its bare name, or `all`). When a reply asks
for one, none of the reply's calls runs: the round is recorded as a `waiting` tool step (what the
continuation runs), the calls get stand-in results at close (the chat stays valid to send), an
`approval_request` is streamed per call that needs a person, and the run ends `waiting` (the turn
loop's `Wait`).

A decision continues the run as a resume of it (runs.py): approved calls run, denied ones are answered
`denied: <reason>` without running, calls that needed nobody run, and the model goes on (transition
`approved`). A call left undecided — a continuation of a run whose flush was lost — waits again.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from yao_agent.base.jsonvalue import as_list, as_mapping, strict_loads
from yao_agent.dsl.specs import APPROVE_ALL, McpUse
from yao_agent.errors import DelegateError, UsageError
from yao_agent.events import ApprovalRequest
from yao_agent.messages import ToolCall
from yao_agent.pipeline.outcomes import Wait
from yao_agent.pipeline.state import RunState
from yao_agent.store.approvals import denial
from yao_agent.store.records import Approval
from yao_agent.store.step_inputs import ToolRound
from yao_agent.tools import ToolSpec

WAITING = "waiting: this call needs a person's approval before it runs"
DEFAULT_DENIAL = "not approved"


def needing(state: RunState, calls: Sequence[ToolCall], tools: Sequence[ToolSpec]) -> list[Approval]:
    """The calls that wait for a person (undecided ones: a decided call is never asked about again)."""
    decided = decisions(state)
    rules = _rules(state)
    out: list[Approval] = []
    for call in calls:
        spec = next((t for t in tools if t.name == call.name), None)
        if spec is None or call.id in decided or not _needs(rules, spec):
            continue
        out.append(Approval(state.run_id, call.id, spec.server, spec.tool, shown_arguments(call), state.thread_id))
    return out


async def wait(state: RunState, calls: Sequence[ToolCall], waiting: Sequence[Approval], attempt: int) -> Wait:
    """Stop the run before any of the reply's calls runs: the round is kept for the continuation, and
    each call that needs a person is announced."""
    if state.hidden:  # a ctx.call child: its hook waits for an answer, and nobody can be asked meanwhile
        names = ", ".join(f"{a.server}__{a.tool}" for a in waiting)
        raise DelegateError(
            f"assistant '{state.assistant.id}' was asked through ctx.call to use {names}, which needs a "
            "person's approval; a ctx.call cannot wait for one (delegate to the assistant instead)"
        )
    # The continuation skips Create: its policy goes with the round.
    given = ToolRound(tuple(calls), attempt, state.options.require_approval or ())
    step = state.buffer.begin("tool", given, state.thread_id)
    state.buffer.end(step, "waiting", output={"approvals": [a.tool_call_id for a in waiting]})
    for item in waiting:
        await state.emit(ApprovalRequest(state.run_id, item.tool_call_id, item.server, item.tool, item.arguments,
                                         item.thread_id))  # fmt: skip
    state.root.waiting.extend(waiting)
    return Wait(tuple(waiting))


def to_store(state: RunState) -> list[Approval]:
    """The calls the run waits for, each with the id of its stand-in result (written at close), which a
    decision's continuation replaces in place: the history shows the decision with the result."""
    results = {m.tool_call_id: m.id for m in [*state.root.history, *state.buffer.messages] if m.role == "tool"}
    return [replace(a, message_id=results.get(a.tool_call_id)) for a in state.waiting]


def decisions(state: RunState) -> Mapping[str, Approval]:
    """The decided approvals the run continues with (a decision's continuation), by call id."""
    point = state.root.request.resume
    return {a.tool_call_id: a for a in point.approvals if a.status != "pending"} if point is not None else {}


def denied(state: RunState, call_id: str) -> str | None:
    """A denied call's result (`denied: <reason>`); None for a call nobody denied."""
    found = decisions(state).get(call_id)
    if found is None or found.status != "denied":
        return None
    return denial(found.reason or DEFAULT_DENIAL)


def parse_decisions(given: Any, pending: Sequence[Approval], by: str, now: float) -> list[Approval]:
    """A person's decisions, one for each pending call (UsageError, naming what is wrong, otherwise)."""
    listed = as_list(given)
    if not isinstance(given, list) or not listed:
        raise UsageError("decisions: expected a list of {tool_call_id, approve, reason?}, one per pending call")
    waiting = {a.tool_call_id: a for a in pending}
    out: dict[str, Approval] = {}
    for index, item in enumerate(listed):
        call_id, approve, reason = _decision(item, index)
        if call_id not in waiting:
            raise UsageError(f"decisions[{index}]: no pending call '{call_id}' (pending: {', '.join(waiting)})")
        if call_id in out:
            raise UsageError(f"decisions[{index}]: '{call_id}' is decided twice")
        status = "approved" if approve else "denied"
        out[call_id] = replace(waiting[call_id], status=status, reason=reason, decided_by=by, decided_at=now)
    missing = [call_id for call_id in waiting if call_id not in out]
    if missing:
        raise UsageError(f"decisions: every pending call must be decided; missing: {', '.join(missing)}")
    return list(out.values())


def _decision(item: Any, index: int) -> tuple[str, bool, str | None]:
    where, data = f"decisions[{index}]", as_mapping(item)
    if not isinstance(item, Mapping):
        raise UsageError(f"{where}: expected an object {{tool_call_id, approve, reason?}}")
    call_id, approve, reason = data.get("tool_call_id"), data.get("approve"), data.get("reason")
    extra = sorted(set(data) - {"tool_call_id", "approve", "reason"})
    if extra:
        raise UsageError(f"{where}: unknown field {extra[0]!r} (expected tool_call_id, approve, reason)")
    if not isinstance(call_id, str) or not call_id:
        raise UsageError(f"{where}.tool_call_id: expected the id of a pending call")
    if not isinstance(approve, bool):
        raise UsageError(f"{where}.approve: expected true or false")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 2000 or _unprintable(reason)):
        raise UsageError(f"{where}.reason: expected printable text of at most 2000 characters")
    if approve and reason:
        raise UsageError(f"{where}.reason: only a denial has a reason")
    return call_id, approve, (reason.strip() or None) if reason else None


def _unprintable(text: str) -> bool:
    """Control characters (NUL among them, which PostgreSQL cannot store) and lone surrogates; a line
    break or a tab is text."""
    return any(unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t" for c in text)


def _rules(state: RunState) -> tuple[tuple[McpUse, ...], frozenset[str]]:
    """The assistant's own `approve` entries and a Create hook's (a hook adds approvals, never removes
    them), and the tools the hook named in `require_approval`."""
    chosen = state.options.mcp_servers or ()
    return (*state.assistant.mcp.servers, *chosen), frozenset(state.options.require_approval or ())


def _needs(rules: tuple[tuple[McpUse, ...], frozenset[str]], spec: ToolSpec) -> bool:
    uses, named = rules
    if APPROVE_ALL in named or spec.name in named or spec.tool in named:
        return True
    return any(use.server == spec.server and use.needs_approval(spec.tool) for use in uses)


def shown_arguments(call: ToolCall) -> Any:
    """The call's arguments as a person reads them: the JSON object the model wrote, or — when it wrote
    none, or one that readers could read differently (NaN, `1e999`, a key given twice) — its very text,
    so the person sees what the model sent (such a call runs no tool: it is answered with an error)."""
    if call.invalid is not None:
        return call.invalid
    return strict_loads(call.arguments)
