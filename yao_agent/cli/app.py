"""`yao-agent validate`, `assistants` and `schema`: the app's files, checked and listed."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sized
from typing import TextIO

from yao_agent.cli.common import Commands, app_dir
from yao_agent.errors import Exit


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
        return Exit.USAGE
    app = report.app
    collections = f", {_count(app.knowledge, 'collection')}" if app.knowledge else ""
    print(
        f"OK: {_count(app.assistants, 'assistant')}, {_count(app.connectors, 'connector')}, "
        f"{_count(app.mcps, 'MCP server')}{collections}",
        file=out,
    )
    return Exit.OK


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
    return Exit.OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.dsl import load_schema

    print(json.dumps(load_schema(args.kind), indent=2), file=out)
    return Exit.OK


def add_commands(cmds: Commands) -> None:
    p = cmds.command(
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
    cmds.command("assistants", cmd_assistants, "list the app's assistants")
    p = cmds.command("schema", cmd_schema, "print the JSON Schema of one kind of file")
    p.add_argument("kind", choices=["app", "assistant", "connector", "mcp", "knowledge", "eval"])
