"""`yao-agent usage` and `yao-agent budgets` (CONTRACT §7, §8.2): the operator's view of what each team
and user used and spent, and their budgets.

The CLI is the trusted operator: it reads and sets any scope. Without `--team` or `--user`, `usage` is
that of user `local`, the identity `chat` acts as by default; `--by team` without them is the whole
deployment's, a row per team. `--team T --user U` is user U of team T:
a team's member is a user of that team (`chat --team T --user U` runs as them). The report is the same
object `GET /api/usage` answers (`--json`), or a table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import TYPE_CHECKING, Any, TextIO

from yao_agent.cli.common import Commands, app_of, open_store, printable, run_async
from yao_agent.errors import Exit, UsageError

if TYPE_CHECKING:
    from yao_agent.service.teams import Scope
    from yao_agent.shapes import UsageReportOut

WINDOW_OPTIONS = {"per_day": "--per-day", "per_month": "--per-month"}


def scope_of(args: argparse.Namespace, default_user: str | None) -> Scope:
    """The scope the options name: a team, a user of a team, or a user without one."""
    from yao_agent.service.teams import named

    if not args.team and not args.user:
        if default_user is None:
            raise UsageError("give --team T, --user U, or both (user U of team T)")
        return named(None, default_user)
    return named(args.team or None, args.user or None)


def usage(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.service import teams

    by = teams.group(args.by)
    # By team, the report is the deployment's (every team), unless the options name one scope.
    scope = teams.DEPLOYMENT if by == "team" and not args.team and not args.user else scope_of(args, "local")
    first, last = teams.span(args.first, args.last, time.time())
    app = app_of(args)

    async def work() -> UsageReportOut:
        store = await open_store(args, app)
        try:
            return await teams.usage_report(store, scope, first, last, by)
        finally:
            await store.aclose()

    report = run_async(work())
    if args.json:
        print(json.dumps(report), file=out)
    else:
        print_report(report, out)
    return Exit.OK


def print_report(report: UsageReportOut, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    who = report["scope"]
    parts = [f"user {who['user_id']}" if "user_id" in who else "", f"team {who['team_id']}" if "team_id" in who else ""]
    named = " of ".join(part for part in parts if part) or "every team"
    print(printable(f"usage of {named}, {report['from']} to {report['to']} (UTC), by {report['by']}"), file=out)
    table = Table(report["by"], "runs", "input tokens", "output tokens", "cost USD", "unpriced tokens", box=None,
                  header_style="bold")  # fmt: skip
    for row in [*report["rows"], {"key": "total", **report["total"]}]:
        key = row["key"] if row["key"] or report["by"] != "team" else "(no team)"
        table.add_row(printable(str(key)), str(row["runs"]), f"{row['input_tokens']:,}",
                      f"{row['output_tokens']:,}", f"{row['cost_usd']:.6f}", f"{row['unpriced_tokens']:,}")  # fmt: skip
    Console(file=out, width=max(100, Console(file=out).width)).print(table)
    if report["total"]["unpriced_tokens"]:
        print("(unpriced tokens: calls to models whose price is unknown; not in cost USD)", file=out)


def usd(text: str) -> float | None:
    """An amount of USD ≥ 0 for a budget window, or `none` for no budget there."""
    if text.strip().lower() in ("none", "null"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected USD as a number ≥ 0, or none (got {text!r})")
    return value


def budgets_set(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.service.teams import check_limits
    from yao_agent.store.ledger import shown

    scope = scope_of(args, None)
    given = {w: getattr(args, w) for w in WINDOW_OPTIONS if hasattr(args, w)}  # (unset: not there at all)
    if not given:
        raise UsageError("give --per-day and/or --per-month (USD, or none for no ceiling)")
    limits = check_limits(given)
    app = app_of(args)

    async def work() -> None:
        store = await open_store(args, app)
        try:
            await store.set_ceilings(scope.budget_scope, limits)
        finally:
            await store.aclose()

    run_async(work())
    kind, owner = scope.budget_scope
    said = "; ".join(f"{WINDOW_OPTIONS[w][2:]} {'no ceiling' if v is None else money(v)}" for w, v in limits.items())
    print(printable(f"budget ceiling of {kind} {shown(owner)}: {said} (a team admin may set it lower)"), file=out)
    return Exit.OK


def money(value: float | None) -> str:
    return "none" if value is None else f"${value:,.2f}"


def budgets_list(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR
    from yao_agent.messages import iso_time
    from yao_agent.store.ledger import shown

    app = app_of(args)

    async def work() -> list[dict[str, Any]]:
        store = await open_store(args, app)
        try:
            found = await store.list_budgets(OPERATOR)
        finally:
            await store.aclose()
        return [{"scope": b.scope_kind, "id": shown(b.scope_id), "ceiling": dict(b.ceilings), "admin": dict(b.limits),
                 "updated_at": iso_time(b.updated_at)} for b in found]  # fmt: skip

    settings = run_async(work())
    budgets = app.config.budgets
    defaults = {kind: {w: getattr(budgets.of(kind), w) for w in WINDOW_OPTIONS} for kind in ("team", "user")}
    if args.json:
        print(json.dumps({"defaults": defaults, "settings": settings}), file=out)
        return Exit.OK
    rows = [(f"app.yml: each {kind}", *(money(v) for v in windows.values()), "", "", "")
            for kind, windows in defaults.items()]  # fmt: skip
    # A window without a ceiling of the scope's own is held to app.yml's; the time set is shown to the second.
    rows += [(f"{s['scope']}:{s['id']}", *(money(s["ceiling"][w]) if w in s["ceiling"] else "app.yml's"
                                           for w in WINDOW_OPTIONS),
              *(money(s["admin"][w]) if s["admin"].get(w) is not None else "-" for w in WINDOW_OPTIONS),
              s["updated_at"][:19] + "Z") for s in settings]  # fmt: skip
    header = ("scope", "ceiling/day", "ceiling/month", "admin/day", "admin/month", "set at")
    print_rows(header, rows, out)
    return Exit.OK


def print_rows(header: tuple[str, ...], rows: list[tuple[str, ...]], out: TextIO) -> None:
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    table = Table(*header, box=None, header_style="bold")
    cells = [tuple(printable(cell) for cell in row) for row in rows]
    for row in cells:
        table.add_row(*row)
    # Wide enough that no cell is cut: an id shown with an ellipsis could not be typed back.
    needed = sum(max(map(cell_len, column)) + 2 for column in zip(header, *cells, strict=True))
    Console(file=out, width=max(100, needed, Console(file=out).width)).print(table)


def add_commands(cmds: Commands) -> None:
    """`usage` and `budgets set|list`."""
    p = cmds.command("usage", usage, "usage and cost of a team or user, by day, assistant, connector or user")
    p.add_argument("--team", metavar="T", help="the team (with --user: that user of the team)")
    p.add_argument("--user", metavar="U", help="the user (default without --team: local)")
    p.add_argument("--from", dest="first", metavar="DATE", help="first day, YYYY-MM-DD (default: 1st of --to's month)")
    p.add_argument("--to", dest="last", metavar="DATE", help="last day, included (default: today, UTC)")
    p.add_argument("--by", choices=["day", "assistant", "connector", "user", "team"], default="day",
                   help="team: every team of the deployment (unless --team or --user names one)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as one JSON object (as GET /api/usage)")
    actions = cmds.family("budgets", "spend limits per team and user", "Spend limits (USD).")
    p = actions.command("set", budgets_set, "set a team's or user's budget ceiling",
                        "Set a team's or user's budget ceiling: its team admins may set the budget at or below it, "
                        "never above.")  # fmt: skip
    p.add_argument("--team", metavar="T", help="the team (with --user: that user of the team)")
    p.add_argument("--user", metavar="U", help="the user (a user without a team, unless --team is given)")
    for window, option in WINDOW_OPTIONS.items():
        span = window.removeprefix("per_")
        p.add_argument(option, dest=window, type=usd, default=argparse.SUPPRESS, metavar="USD",
                       help=f"the ceiling in USD per calendar {span} (UTC), or none for no ceiling")  # fmt: skip
    p = actions.command("list", budgets_list, "app.yml's default budgets, and every scope's ceiling and admin's budget",
                        "app.yml's default budgets, and every team's and user's own ceiling (the operator's) and "
                        "budget (its team admin's).")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
