"""The `yao-agent` command: parse arguments, call the library, render the result.

Exit codes: 0 ok, 1 the run failed, 2 usage or validation error. No traceback ever reaches the
user unless YAO_AGENT_DEBUG=1 asks for one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import TextIO

from .errors import EnvVarMissing, RunError, SpecError, UsageError, YaoAgentError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Command = Callable[[argparse.Namespace, TextIO], int]


def _app_dir(args: argparse.Namespace) -> Path:
    return Path(args.app or os.environ.get("YAO_AGENT_APP") or ".")


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from .dsl import check_app

    report = check_app(_app_dir(args))
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

    from .dsl import load_app

    app = load_app(_app_dir(args))
    table = Table("id", "name", "connector", "hook", "MCP servers", box=None, header_style="bold")
    for spec in app.assistants.values():
        servers = ", ".join(use.server for use in spec.mcp.servers) or "-"
        table.add_row(spec.id, spec.name, spec.connector, spec.hook or "-", servers)
    Console(file=out, width=max(100, Console(file=out).width)).print(table)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    from .dsl import load_schema

    print(json.dumps(load_schema(args.kind), indent=2), file=out)
    return EXIT_OK


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

    command("validate", cmd_validate, "check every file of the app; exit 2 with file:line errors")
    command("assistants", cmd_assistants, "list the app's assistants")
    p = command("schema", cmd_schema, "print the JSON Schema of one kind of file")
    p.add_argument("kind", choices=["app", "assistant", "connector", "mcp"])
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
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
        print(f"failed ({exc.reason}): {exc}", file=sys.stderr)
        return EXIT_FAILED
    except YaoAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: never a traceback unless asked for
        if os.environ.get("YAO_AGENT_DEBUG") == "1":
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (set YAO_AGENT_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
