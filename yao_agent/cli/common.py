"""What every `yao-agent` command module shares: the app and store the global options name, and text fit
for a terminal. Light to import: a command's own imports wait until it runs."""

from __future__ import annotations

import argparse
import unicodedata
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from yao_agent import settings
from yao_agent.base.jsonvalue import as_mapping

if TYPE_CHECKING:
    from yao_agent.dsl import App
    from yao_agent.store import SqlStore

T = TypeVar("T")
Command = Callable[[argparse.Namespace, TextIO], int]


class Commands:
    """Where a module adds its family of commands to the parser; each command takes the global options
    after its name as well as before."""

    def __init__(self, parser: argparse.ArgumentParser, dest: str, metavar: str) -> None:
        # (each command's own parser is a plain one: only the top one reads `eval replay` as one command)
        self.sub = parser.add_subparsers(
            dest=dest, metavar=metavar, required=True, parser_class=argparse.ArgumentParser
        )

    def command(self, name: str, func: Command, help_text: str, description: str = "") -> argparse.ArgumentParser:
        p = self.sub.add_parser(name, help=help_text, description=description or help_text)
        global_options(p, suppress=True)
        p.set_defaults(func=func)
        return p

    def family(self, name: str, help_text: str, description: str) -> Commands:
        """A command whose actions are commands of their own (`tokens create`, `roles set`)."""
        return Commands(self.sub.add_parser(name, help=help_text, description=description), f"{name}_command", "ACTION")


def global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Accepted before or after the command; the sub-parser copy must not reset what was given first.
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--app", metavar="DIR", default=default, help="app folder (env YAO_AGENT_APP; default: .)")
    parser.add_argument("--db", metavar="URL", default=default, help="SQLAlchemy URL of the store (env YAO_AGENT_DB)")


def identity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", metavar="U", help="act as this user (default: local)")
    p.add_argument("--team", metavar="T", help="act as a member of this team")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")


def verbose_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show every ctx.log line of the hooks, debug included, also when the output is no terminal "
                        "(on a terminal, info and up are shown, dimmed)")  # fmt: skip


def app_dir(args: argparse.Namespace) -> Path:
    return settings.app_dir(args.app)


def app_of(args: argparse.Namespace) -> App:
    from yao_agent.dsl import load_app

    return load_app(app_dir(args))


def db_url(args: argparse.Namespace, app: App) -> str:
    return settings.store(args.db, app)


async def open_store(args: argparse.Namespace, app: App) -> SqlStore:
    from yao_agent.store import SqlStore, open_engine, store_url

    return SqlStore(await open_engine(store_url(db_url(args, app), app.root)))


def run_async(work: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`: asyncio is imported when a command first needs it (`--help` never does)."""
    import asyncio

    return asyncio.run(work)


def printable(text: str) -> str:
    """Text fit for the operator's terminal: what is not printable (ANSI escapes, carriage returns, NUL,
    bidirectional overrides) is written as its escape, so a stored string cannot rewrite the screen."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def visible(text: str) -> str:
    """What a model or a person wrote, for the terminal as it was written, lines and tabs kept: every
    other control character (ESC, which would start a sequence rewriting the screen, the clipboard or
    the title; CR; NUL …) is shown as its escape instead of acting."""
    if text.isprintable():  # (the common case, checked at C speed)
        return text
    return "".join(c if c.isprintable() or c in "\n\t" or unicodedata.category(c) != "Cc"
                   else c.encode("unicode_escape").decode("ascii") for c in text)  # fmt: skip


def said(error: object) -> str:
    """A run's error as one line, led by the place in the author's file it names (a hook's throw, a
    template's fault): `hooks/bad.js:7: TypeError: …`, as compilers and `validate` say it. Escaped:
    a hook's author wrote the message."""
    found = as_mapping(error)
    message, file, line = str(found.get("message") or ""), found.get("file"), found.get("line")
    if file:
        where = f"{file}:{line}" if isinstance(line, int) else str(file)
        message = f"{where}: {message}" if message else where
    return printable(message)
