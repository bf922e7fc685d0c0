"""`yao-agent roles set|unset|list`: the operator maps a role to connectors for a team or a user."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from yao_agent.cli.common import Commands, app_dir, open_store, run_async
from yao_agent.errors import Exit, NotFound, UsageError

if TYPE_CHECKING:
    from yao_agent.dsl import App


def _scope(args: argparse.Namespace) -> tuple[str, str]:
    if args.team and args.user:
        raise UsageError("give --team or --user, not both")
    if args.team:
        return ("team", args.team)
    if args.user:
        return ("user", args.user)
    raise UsageError("give --team T or --user U (app-wide roles live in app.yml)")


def cmd_roles_set(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.dsl import load_app
    from yao_agent.dsl.refs import unknown

    app = load_app(app_dir(args))
    scope = _scope(args)
    for connector in args.connectors:
        if connector not in app.connectors:
            raise UsageError(unknown("connector", connector, app.connectors))
        _reachable(app, connector, scope)

    async def work() -> None:
        store = await open_store(args, app)
        try:
            await store.set_role(scope, args.role, args.connectors)
        finally:
            await store.aclose()

    run_async(work())
    chain = " → ".join(args.connectors)
    print(f"role {args.role} for {scope[0]} {scope[1]}: {chain}", file=out)
    return Exit.OK


def _reachable(app: App, connector: str, scope: tuple[str, str]) -> None:
    """A connector whose `access` admits nobody the setting applies to would be refused by each of their
    runs: the operator hears it now, with whom it admits."""
    access = app.connectors[connector].access
    if access.reaches(*scope):
        return
    admits = "; ".join(
        f"{key}: {', '.join(sorted(ids))}" for key, ids in (("teams", access.teams), ("users", access.users)) if ids
    )
    raise UsageError(f"connector '{connector}' is not available to {scope[0]} {scope[1]} (its access admits {admits})")


def cmd_roles_unset(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.dsl import load_app

    app = load_app(app_dir(args))
    scope = _scope(args)

    async def work() -> bool:
        store = await open_store(args, app)
        try:
            return await store.delete_role(scope, args.role)
        finally:
            await store.aclose()

    if not run_async(work()):
        raise NotFound(f"role {args.role} is not set for {scope[0]} {scope[1]}")
    print(f"role {args.role} unset for {scope[0]} {scope[1]}", file=out)
    return Exit.OK


def cmd_roles_list(args: argparse.Namespace, out: TextIO) -> int:
    from rich.console import Console
    from rich.table import Table

    from yao_agent.dsl import load_app
    from yao_agent.store import OPERATOR

    app = load_app(app_dir(args))

    async def work() -> list[tuple[str, str, str]]:
        store = await open_store(args, app)
        try:
            settings = await store.list_roles(OPERATOR)
        finally:
            await store.aclose()
        return [(f"{s.scope_kind}:{s.scope_id}", s.role, " → ".join(s.connectors)) for s in settings]

    rows = [("app.yml", role, " → ".join(chain)) for role, chain in app.config.roles.items()]
    rows += run_async(work())
    table = Table("scope", "role", "connectors", box=None, header_style="bold")
    for row in rows:
        table.add_row(*row)
    Console(file=out, width=max(100, Console(file=out).width)).print(table)
    return Exit.OK


def add_commands(cmds: Commands) -> None:
    actions = cmds.family("roles", "per-team and per-user role settings", "Role settings.")
    p = actions.command("set", cmd_roles_set, "map ROLE to a connector (or a fallback chain) for a team or a user")
    p.add_argument("role")
    p.add_argument("connectors", nargs="+", metavar="CONNECTOR", help="one id, or several for a fallback chain")
    _scope_options(p)
    p = actions.command("unset", cmd_roles_unset, "remove a team's or user's setting of ROLE")
    p.add_argument("role")
    _scope_options(p)
    actions.command("list", cmd_roles_list, "list roles: app.yml's and every team and user setting")


def _scope_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--team", metavar="T", help="the team whose setting this is")
    p.add_argument("--user", metavar="U", help="the user whose setting this is (for callers without a team)")
