"""`yao-agent tokens create|revoke|list`: the API tokens the HTTP server takes (only their hashes are kept)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from yao_agent.cli.common import Commands, app_of, open_store, printable, run_async
from yao_agent.errors import Exit, NotFound, UsageError


def cmd_tokens_create(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR, Identity

    if args.admin and not args.team:  # a caller without a team administers their own scope already
        raise UsageError("--admin makes a team admin: give the team with --team T")
    who = Identity(args.user, args.team or None, admin=args.admin)
    if args.label and not args.label.isprintable():
        raise UsageError(f"--label: a label is one line of printable text (got {printable(args.label)})")

    async def work() -> str:
        store = await open_store(args, app_of(args))
        try:
            return await store.create_token(OPERATOR, who, args.label or "")
        finally:
            await store.aclose()

    token = run_async(work())
    print(token, file=out)
    role = "admin of team" if who.admin else "member of team"
    said = f"{who.user_id}, {role} {who.team_id}" if who.team_id else str(who)
    print(f"token for {said} (shown once; only its hash is stored)", file=sys.stderr)
    return Exit.OK


def cmd_tokens_revoke(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR

    async def work() -> int:
        store = await open_store(args, app_of(args))
        try:
            return await store.revoke_token(OPERATOR, args.token)
        finally:
            await store.aclose()

    if not run_async(work()):
        raise NotFound("no active token with that value or prefix")
    print("revoked", file=out)
    return Exit.OK


def cmd_tokens_list(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.identity import OPERATOR

    async def work() -> list[str]:
        store = await open_store(args, app_of(args))
        try:
            found = await store.list_tokens(OPERATOR)
        finally:
            await store.aclose()
        return [printable(f"{t.prefix}…  {t.user_id}{'@' + t.team_id if t.team_id else ''}"
                          f"{'  admin' if t.admin else ''}  {t.label}")
                + ("  (revoked)" if t.revoked_at else "") for t in found]  # fmt: skip

    for line in run_async(work()):
        print(line, file=out)
    return Exit.OK


def add_commands(cmds: Commands) -> None:
    actions = cmds.family("tokens", "API tokens for the HTTP server", "API tokens.")
    p = actions.command("create", cmd_tokens_create, "make a token for a user (and team); it is printed once")
    p.add_argument("--user", metavar="U", required=True)
    p.add_argument("--team", metavar="T")
    p.add_argument("--label", metavar="TEXT", help="a note to tell tokens apart")
    p.add_argument("--admin", action="store_true",
                   help="a team admin: changes the team's roles and budgets, sees its usage (with --team)")  # fmt: skip
    p = actions.command("revoke", cmd_tokens_revoke, "revoke a token (give the token or its first 12 characters)")
    p.add_argument("token", metavar="TOKEN")
    actions.command("list", cmd_tokens_list, "list tokens (prefix, identity, admin, label)")
