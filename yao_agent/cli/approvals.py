"""`yao-agent approvals` and `yao-agent approve`: the tool calls a chat's run waits for, and a person's
decision on them (CONTRACT §4.8, §7).

`approve` approves every pending call but those given with `--deny ID[:REASON]` (the id runs up to the
first colon: providers' call ids have none), stores the decisions as the caller, and streams the
continuation as `resume` does. Anything wrong with the command (an id that is not pending, nothing
pending) is refused before a decision is stored: nothing half-decided is left behind.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from yao_agent.cli.chat import (
    Renderer,
    approve_command,
    command_start,
    escaped,
    follow,
    hint_waiting,
    identity_of,
    open_runs,
    terminal_logging,
)
from yao_agent.errors import Exit, UsageError
from yao_agent.store.records import Approval


async def approvals(args: argparse.Namespace, out: TextIO) -> int:
    """The chat's pending calls: a table, or with --json the object `GET …/approvals` answers (§6)."""
    runs = await open_runs(args)
    try:
        point = await runs.conversations.approvals(identity_of(args), args.chat_id)  # NotFound (exit 2) when none waits
    finally:
        await runs.aclose()
    pending = [a.request() for a in point.pending]
    if args.json:
        found = {"chat_id": point.run.chat_id, "run_id": point.run.id, "approvals": pending}
        print(json.dumps(found, ensure_ascii=False), file=out)
        return Exit.OK
    rows = [("tool call id", "tool", "arguments")]
    rows += [(escaped(a.tool_call_id), escaped(f"{a.server}__{a.tool}"), escaped(_compact(a.arguments)))
             for a in point.pending]  # fmt: skip
    for line in _columns(rows):
        print(line, file=out)
    print(f"decide with: {approve_command(args, point.run.chat_id)} [--deny ID[:REASON]]...", file=out)
    return Exit.OK


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _columns(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """Aligned by hand, not by a table widget: the arguments (last) are never folded or cut, so what a
    person reads before approving is all of it, and one call stays one line to copy from."""
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return [f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}".rstrip() for row in rows]


async def approve(args: argparse.Namespace, out: TextIO) -> int:
    """Decide every pending call (deny those given, approve the rest), then stream the continuation."""
    who = identity_of(args)
    with terminal_logging():
        runs = await open_runs(args)
        try:
            point = await runs.conversations.approvals(who, args.chat_id)
            decisions = _decisions(point.pending, _denials(args.deny or []))
            handle = await runs.decide(who, point.run.chat_id, decisions)
            if not args.json:  # --json prints events only, one per line
                for approval, decision in zip(point.pending, decisions, strict=True):
                    print(_said(approval, decision), file=out, flush=True)
            renderer = Renderer(out, as_json=args.json, started=command_start(args), verbose=args.verbose)
            code = await follow(handle, renderer)
            hint_waiting(args, handle.chat_id, renderer.end, out)  # the continuation may ask for more
            return code
        finally:
            await runs.aclose()


def _denials(given: Sequence[str]) -> dict[str, str | None]:
    """`--deny ID[:REASON]` values, by call id (no reason: None, and the model reads `denied: not approved`)."""
    out: dict[str, str | None] = {}
    for value in given:
        call_id, _, reason = value.partition(":")
        if not call_id:
            raise UsageError(f"--deny {value!r}: expected TOOL_CALL_ID or TOOL_CALL_ID:REASON")
        if call_id in out:
            raise UsageError(f"--deny: call '{escaped(call_id)}' is denied twice")
        out[call_id] = reason.strip() or None
    return out


def _decisions(pending: Sequence[Approval], denied: dict[str, str | None]) -> list[dict[str, Any]]:
    ids = [a.tool_call_id for a in pending]
    unknown = [call_id for call_id in denied if call_id not in ids]
    if unknown:  # refused before anything is stored: a typo must not approve the call it meant to deny
        raise UsageError(
            f"--deny: no pending call '{escaped(unknown[0])}' (pending: {', '.join(ids)}); nothing was decided"
        )
    out: list[dict[str, Any]] = []
    for call_id in ids:
        if call_id not in denied:
            out.append({"tool_call_id": call_id, "approve": True})
        else:
            reason = denied[call_id]
            out.append({"tool_call_id": call_id, "approve": False} | ({"reason": reason} if reason else {}))
    return out


def _said(approval: Approval, decision: dict[str, Any]) -> str:
    name = f"{approval.server}__{approval.tool}"
    if decision["approve"]:
        return escaped(f"✓ approved {name} (call {approval.tool_call_id})")
    reason = f": {decision['reason']}" if decision.get("reason") else ""
    return escaped(f"✗ denied {name} (call {approval.tool_call_id}){reason}")
