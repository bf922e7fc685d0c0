"""`yao-agent audit [--team T] [--json]` and `yao-agent audit verify`: the audit log, as the operator
reads and checks it (every team's, or one team's with --team)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from yao_agent.cli.common import Commands, app_of, open_store, printable, run_async
from yao_agent.errors import Exit, YaoAgentError

if TYPE_CHECKING:
    from yao_agent.store.audit import AuditRow, Verified


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    return audit_verify(args, out) if args.what == "verify" else audit_list(args, out)


def audit_list(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.service.teams import named
    from yao_agent.store import audit

    if args.team is not None:
        named(args.team, None)  # a malformed team id is the operator's mistake (exit 2)
    sight = audit.AuditSight(team_id=args.team) if args.team is not None else audit.EVERYONE
    since, until = audit.span(args.first, args.last)
    action, limit = audit.check_action(args.action), audit.check_limit(args.limit)
    app = app_of(args)

    async def work() -> list[AuditRow]:
        store = await open_store(args, app)
        try:
            return await store.audit_rows(sight, since, until, action, limit)
        finally:
            await store.aclose()

    rows = run_async(work())
    for row in rows:
        print(json.dumps(audit.shown(row), ensure_ascii=False) if args.json else _line(row), file=out)
    return Exit.OK


def _line(row: AuditRow) -> str:
    from yao_agent.messages import iso_time

    actor = row.actor
    who = actor.kind if actor.user_id is None else f"{actor.user_id}{'@' + actor.team_id if actor.team_id else ''}"
    kind = "" if actor.user_id is None or actor.kind == "member" else f" ({actor.kind})"
    change = "" if row.after is None else f"  → {json.dumps(row.after, ensure_ascii=False)}"
    return printable(f"{row.id:>6}  {iso_time(row.at)}  {who}{kind}  {row.action}  {row.target}{change}")


def audit_verify(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR

    app = app_of(args)

    async def work() -> Verified:
        store = await open_store(args, app)
        try:
            return await store.audit_verify(OPERATOR)
        finally:
            await store.aclose()

    verified = run_async(work())
    if verified.broken is not None:
        raise ChainBroken(f"the audit log is broken at row {verified.broken.row}: {verified.broken.reason} "
                          f"({verified.count} rows before it hold)")  # fmt: skip
    print(f"the audit log is intact: {verified.count} rows, the last one's hash {verified.head or '(none)'}", file=out)
    return Exit.OK


class ChainBroken(YaoAgentError):
    """A chain that does not hold: said on stderr, exit 1 (the check failed; the command was right)."""


def add_commands(cmds: Commands) -> None:
    p = cmds.command("audit", cmd_audit, "the audit log: who changed what (or `audit verify`: check its hash chain)",
                     "The audit log of every change of tokens, role mappings, budgets, knowledge, approval "
                     "decisions and app reloads, newest first; `audit verify` checks its hash chain and names "
                     "the first row that does not hold (exit 1).")  # fmt: skip
    p.add_argument("what", nargs="?", choices=["verify"], help="verify: check the hash chain instead of listing")
    p.add_argument("--team", metavar="T", help="only team T's rows (made by its people or changing its things)")
    p.add_argument("--from", dest="first", metavar="WHEN", help="from this day (YYYY-MM-DD) or moment (ISO 8601)")
    p.add_argument("--to", dest="last", metavar="WHEN", help="to this day (included) or moment")
    p.add_argument("--action", metavar="A", help="one action (role.set) or a family (role, kb, token …)")
    p.add_argument("--limit", metavar="N", default="100", help="at most N rows (default 100)")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
