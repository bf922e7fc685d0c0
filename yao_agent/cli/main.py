"""The `yao-agent` command: parse arguments, call the library, render the result.

Exit codes: 0 ok, 1 the run failed, 2 usage or validation error. No traceback ever reaches the
user unless YAO_AGENT_DEBUG=1 asks for one.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence, Sized
from typing import TYPE_CHECKING, Any, TextIO

from yao_agent import settings
from yao_agent.cli.common import app_dir, app_of, open_store, printable, run_async, said
from yao_agent.errors import EnvVarMissing, HookError, NotFound, RunError, SpecError, UsageError, YaoAgentError

if TYPE_CHECKING:
    from yao_agent.dsl import App

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Command = Callable[[argparse.Namespace, TextIO], int]


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.dsl import check_app
    from yao_agent.service.probe import probe

    report = check_app(app_dir(args), probe=functools.partial(probe, hooks=True, mcp=args.mcp))
    for problem in report.errors:
        print(problem, file=out)
    for problem in report.warnings:
        print(f"warning: {problem}", file=out)
    if report.app is None:
        count = len(report.errors)
        print(f"{count} error{'s' if count != 1 else ''}", file=out)
        return EXIT_USAGE
    app = report.app
    print(
        f"OK: {_count(app.assistants, 'assistant')}, {_count(app.connectors, 'connector')}, "
        f"{_count(app.mcps, 'MCP server')}",
        file=out,
    )
    return EXIT_OK


def _count(items: Sized, noun: str) -> str:
    size = len(items)
    return f"{size} {noun}{'s' if size != 1 else ''}"


def cmd_assistants(args: argparse.Namespace, out: TextIO) -> int:
    from rich.console import Console
    from rich.table import Table

    from yao_agent.dsl import load_app

    app = load_app(app_dir(args))
    table = Table("id", "name", "connector", "hook", "MCP servers", box=None, header_style="bold")
    for spec in app.assistants.values():
        servers = ", ".join(use.server for use in spec.mcp.servers) or "-"
        table.add_row(spec.id, spec.name, spec.connector, spec.hook or "-", servers)
    Console(file=out, width=max(100, Console(file=out).width)).print(table)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.dsl import load_schema

    print(json.dumps(load_schema(args.kind), indent=2), file=out)
    return EXIT_OK


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
    return EXIT_OK


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
    return EXIT_OK


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
    return EXIT_OK


def cmd_chat(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.startup import loading

    with loading():  # most of a cold chat's start-up is this import
        from yao_agent.cli.repl import chat

    return run_async(chat(args, out))


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.chat import history

    return run_async(history(args, out))


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.chat import resume

    return run_async(resume(args, out))


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.runs import runs_of_chat

    return run_async(runs_of_chat(args, out))


def cmd_approvals(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.approvals import approvals

    return run_async(approvals(args, out))


def cmd_approve(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.startup import loading

    with loading():  # the continuation runs the model and the tools: their imports, as for `chat`
        from yao_agent.cli.approvals import approve

    return run_async(approve(args, out))


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
    return EXIT_OK


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
    return EXIT_OK


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
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until SIGTERM/Ctrl-C (`--workers N`: N processes). An address it cannot listen on is one line
    and exit 1 (CannotListen); several workers on SQLite, exit 2."""
    from yao_agent.server.launch import serve

    return serve(app_dir(args), args, out)


def _identity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", metavar="U", help="act as this user (default: local)")
    p.add_argument("--team", metavar="T", help="act as a member of this team")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")


def _verbose_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show every ctx.log line of the hooks, debug included, also when the output is no terminal "
                        "(on a terminal, info and up are shown, dimmed)")  # fmt: skip


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Accepted before or after the command; the sub-parser copy must not reset what was given first.
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--app", metavar="DIR", default=default, help="app folder (env YAO_AGENT_APP; default: .)")
    parser.add_argument("--db", metavar="URL", default=default, help="SQLAlchemy URL of the store (env YAO_AGENT_DB)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yao-agent", description="Run YAML assistants through one pipeline.")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _global_options(p, suppress=True)
        p.set_defaults(func=func)
        return p

    p = command(
        "validate",
        cmd_validate,
        "check every file of the app and load its hooks in V8; exit 2 with file:line errors "
        "(no MCP server is started without --mcp)",
    )
    p.add_argument(
        "--mcp",
        action="store_true",
        help="also start the MCP servers the assistants use, check every tool filter against the tools they list, "
        "then stop them",
    )
    command("assistants", cmd_assistants, "list the app's assistants")
    p = command("schema", cmd_schema, "print the JSON Schema of one kind of file")
    p.add_argument("kind", choices=["app", "assistant", "connector", "mcp"])
    p = command("chat", cmd_chat, "stream one turn with an assistant (a REPL when MESSAGE is absent)")
    p.add_argument("assistant", metavar="ASSISTANT")
    p.add_argument("message", metavar="MESSAGE", nargs="?")
    p.add_argument("--chat", metavar="ID", help="continue this chat, or start it under this id")
    _identity_options(p)
    _verbose_option(p)
    p = command("history", cmd_history, "the stored messages of a chat (exit 2: no such chat)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    _identity_options(p)
    p = command("resume", cmd_resume, "continue a failed, cancelled or interrupted run (exit 2: no resume point)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    _identity_options(p)
    _verbose_option(p)
    p = command("approvals", cmd_approvals, "the tool calls a chat's run waits to have approved (exit 2: none)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    _identity_options(p)
    p = command("approve", cmd_approve, "approve the calls a chat's run waits for, deny those given; continue the run")
    p.add_argument("chat_id", metavar="CHAT_ID")
    p.add_argument("--deny", metavar="TOOL_CALL_ID[:REASON]", action="append",
                   help="deny this call (the model reads the reason); repeat for more")  # fmt: skip
    _identity_options(p)
    _verbose_option(p)
    p = command("runs", cmd_runs, "a chat's runs, or one run's steps: transitions, who answered, tokens, timing")
    p.add_argument("chat_id", metavar="CHAT_ID")
    p.add_argument("run_id", metavar="RUN_ID", nargs="?")
    _identity_options(p)
    _roles_parser(sub)
    _tokens_parser(sub)
    from yao_agent.cli.usage import add_parsers  # (its commands' own imports wait until they run)

    add_parsers(sub, command, lambda p: _global_options(p, suppress=True))
    p = command("serve", cmd_serve, "serve the HTTP API and the web page")
    p.add_argument("--host", metavar="H", help="address to listen on (default: app.yml server.host, 127.0.0.1)")
    p.add_argument("--port", metavar="P", type=int, help="port (default: app.yml server.port, 8765)")
    p.add_argument("--log-format", choices=("text", "json"),
                   help="text, or one JSON object a line (env YAO_AGENT_LOG_FORMAT; default: text)")  # fmt: skip
    p.add_argument("--workers", metavar="N", type=_positive, default=1,
                   help="server processes on the one port (PostgreSQL only for N > 1; default: 1)")  # fmt: skip
    p.add_argument("--drain-s", metavar="S", type=_seconds, default=30.0,
                   help="on SIGTERM, how long runs in flight may take to finish before they are cancelled "
                        "(default: 30)")  # fmt: skip
    p.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)  # a worker of `--workers`: its socket
    return parser


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 86400:  # (nan fails too)
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 86399, got {text!r}")
    return value


def _tokens_parser(sub: Any) -> None:
    tokens = sub.add_parser("tokens", help="API tokens for the HTTP server", description="API tokens.")
    tokens_sub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    def action(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = tokens_sub.add_parser(name, help=help_text, description=help_text)
        _global_options(p, suppress=True)
        p.set_defaults(func=func)
        return p

    p = action("create", cmd_tokens_create, "make a token for a user (and team); it is printed once")
    p.add_argument("--user", metavar="U", required=True)
    p.add_argument("--team", metavar="T")
    p.add_argument("--label", metavar="TEXT", help="a note to tell tokens apart")
    p.add_argument("--admin", action="store_true",
                   help="a team admin: changes the team's roles and budgets, sees its usage (with --team)")  # fmt: skip
    p = action("revoke", cmd_tokens_revoke, "revoke a token (give the token or its first 12 characters)")
    p.add_argument("token", metavar="TOKEN")
    action("list", cmd_tokens_list, "list tokens (prefix, identity, admin, label)")


def _roles_parser(sub: Any) -> None:
    roles = sub.add_parser("roles", help="per-team and per-user role settings", description="Role settings.")
    roles_sub = roles.add_subparsers(dest="roles_command", metavar="ACTION", required=True)

    def action(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = roles_sub.add_parser(name, help=help_text, description=help_text)
        _global_options(p, suppress=True)
        p.set_defaults(func=func)
        return p

    p = action("set", cmd_roles_set, "map ROLE to a connector (or a fallback chain) for a team or a user")
    p.add_argument("role")
    p.add_argument("connectors", nargs="+", metavar="CONNECTOR", help="one id, or several for a fallback chain")
    _scope_options(p)
    p = action("unset", cmd_roles_unset, "remove a team's or user's setting of ROLE")
    p.add_argument("role")
    _scope_options(p)
    action("list", cmd_roles_list, "list roles: app.yml's and every team and user setting")


def _scope_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--team", metavar="T", help="the team whose setting this is")
    p.add_argument("--user", metavar="U", help="the user whose setting this is (for callers without a team)")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    started = time.monotonic()  # `chat` and `resume` say how long the user waited since then
    stream = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    try:
        return int(args.func(args, stream))
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, EnvVarMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED if isinstance(exc, EnvVarMissing) else EXIT_USAGE
    except RunError as exc:
        print(f"failed ({exc.reason}): {said(exc.detail()) if isinstance(exc, HookError) else exc}", file=sys.stderr)
        return EXIT_FAILED
    except YaoAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: never a traceback unless asked for
        if settings.debug():
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (set YAO_AGENT_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return EXIT_FAILED

