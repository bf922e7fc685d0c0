"""`yao-agent tokens create|revoke|list`: the API tokens the HTTP server takes (only their hashes are kept).

The CLI is the trusted operator: it makes any kind of token (a member's, a team admin's with `--admin`,
an operator's with `--operator`), lists every one, and revokes any. Never a secret is shown but the new
token's, once.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from yao_agent.cli.common import Commands, app_of, open_store, printable, run_async
from yao_agent.errors import Exit, NotFound, UsageError

if TYPE_CHECKING:
    from yao_agent.store.tokens import TokenRecord

SPAN = re.compile(r"(\d+(?:\.\d+)?)([mhdw])")
UNIT_S = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def duration(text: str) -> float:
    """`--expires-in`: a span as 30d, 12h, 90m or 2w, in seconds."""
    found = SPAN.fullmatch(text.strip().lower())
    seconds = float(found[1]) * UNIT_S[found[2]] if found else 0.0
    if not 0 < seconds <= 3650 * 86_400:
        raise argparse.ArgumentTypeError(f"expected a span such as 30d, 12h, 90m or 2w, up to 3650d (got {text!r})")
    return seconds


def cmd_tokens_create(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR, Identity

    if args.admin and not args.team:  # a caller without a team administers their own scope already
        raise UsageError("--admin makes a team admin: give the team with --team T")
    who = Identity(args.user, args.team or None, admin=args.admin, operator=args.operator)
    if args.label and not args.label.isprintable():
        raise UsageError(f"--label: a label is one line of printable text (got {printable(args.label)})")
    expires_at = time.time() + args.expires_in if args.expires_in else None

    async def work() -> str:
        store = await open_store(args, app_of(args))
        try:
            return await store.create_token(OPERATOR, who, args.label or "", expires_at)
        finally:
            await store.aclose()

    token = run_async(work())
    print(token, file=out)
    print(f"token for {described(who.user_id, who.team_id, who.kind)}{until(expires_at)} "
          "(shown once; only its hash is stored)", file=sys.stderr)  # fmt: skip
    return Exit.OK


def described(user_id: str, team_id: str | None, kind: str) -> str:
    if kind == "operator":
        return f"{user_id}{'@' + team_id if team_id else ''}, the operator (every team)"
    role = "admin of team" if kind == "admin" else "member of team"
    return f"{user_id}, {role} {team_id}" if team_id else user_id


def until(expires_at: float | None) -> str:
    from yao_agent.messages import iso_time

    return f", valid until {iso_time(expires_at)}" if expires_at is not None else ""


def cmd_tokens_revoke(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR

    async def work() -> int:
        store = await open_store(args, app_of(args))
        try:
            return await store.revoke_token(OPERATOR, args.token)
        finally:
            await store.aclose()

    if not run_async(work()):
        raise NotFound("no active token with that id, value or prefix")
    print("revoked", file=out)
    return Exit.OK


def cmd_tokens_list(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR

    async def work() -> list[TokenRecord]:
        store = await open_store(args, app_of(args))
        try:
            return await store.list_tokens(OPERATOR)
        finally:
            await store.aclose()

    found = run_async(work())
    listed = [listed_token(t) for t in found]
    if args.json:
        for one in listed:
            print(json.dumps(one), file=out)
        return Exit.OK
    from yao_agent.cli.usage import print_rows

    header = ("id", "user", "team", "kind", "label", "created", "expires", "last used", "revoked")
    keys = ("id", "user_id", "team_id", "kind", "label", "created_at", "expires_at", "last_used_at", "revoked_at")
    print_rows(header, [tuple(shown(one[k]) for k in keys) for one in listed], out)
    return Exit.OK


def listed_token(t: TokenRecord) -> dict[str, Any]:
    from yao_agent.messages import iso_time

    def at(value: float | None) -> str | None:
        return None if value is None else iso_time(value)

    return {"id": t.id, "user_id": t.user_id, "team_id": t.team_id, "kind": t.kind, "label": t.label,
            "created_at": at(t.created_at), "expires_at": at(t.expires_at), "last_used_at": at(t.last_used_at),
            "revoked_at": at(t.revoked_at)}  # fmt: skip


def shown(value: Any) -> str:
    """A cell: a time to the second, none as '-'."""
    if value is None:
        return "-"
    text = str(value)
    return text[:19] + "Z" if re.fullmatch(r"\d{4}-\d\d-\d\dT.*Z", text) else text


def add_commands(cmds: Commands) -> None:
    actions = cmds.family("tokens", "API tokens for the HTTP server", "API tokens.")
    p = actions.command("create", cmd_tokens_create, "make a token for a user (and team); it is printed once")
    p.add_argument("--user", metavar="U", required=True)
    p.add_argument("--team", metavar="T")
    p.add_argument("--label", metavar="TEXT", help="a note to tell tokens apart")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--admin", action="store_true",
                      help="a team admin: the team's roles, budgets, usage and tokens (with --team)")  # fmt: skip
    kind.add_argument("--operator", action="store_true",
                      help="the operator: every team's usage, budgets and ceilings, and tokens for anyone")  # fmt: skip
    p.add_argument("--expires-in", type=duration, metavar="SPAN",
                   help="it expires after this span: 30d, 12h, 90m, 2w (default: never)")  # fmt: skip
    p = actions.command("revoke", cmd_tokens_revoke, "revoke a token (its id, the token, or its first 12 characters)")
    p.add_argument("token", metavar="TOKEN")
    p = actions.command("list", cmd_tokens_list, "list tokens: id, identity, kind, label, created, expires, last used")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
