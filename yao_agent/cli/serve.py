"""`yao-agent serve`: the HTTP API and the web page, in one process or `--workers N`."""

from __future__ import annotations

import argparse
from typing import TextIO

from yao_agent.cli.common import Commands, app_dir


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until SIGTERM/Ctrl-C (`--workers N`: N processes). An address it cannot listen on is one line
    and exit 1 (CannotListen); several workers on SQLite, exit 2."""
    from yao_agent.server.launch import serve

    return serve(app_dir(args), args, out)


def add_commands(cmds: Commands) -> None:
    p = cmds.command("serve", cmd_serve, "serve the HTTP API and the web page")
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
