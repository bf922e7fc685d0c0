"""`yao-agent serve`: one server process, or a supervisor of several (`--workers N`), or one of its workers.

One process loads the app, opens the store and serves on a socket it opens itself (so that an address
it cannot have is one clear line). With `--workers N` this process serves nothing itself: it checks
that the store can be shared (PostgreSQL; SQLite allows one writing process, so N > 1 is refused),
migrates it once, opens the socket and keeps N workers serving on it (`workers.py`). A worker is this
command with `--listen-fd`: it serves on the socket it inherited and says `ready` on its stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import TextIO

from yao_agent import settings
from yao_agent.errors import Exit, SpecError, UsageError, YaoAgentError
from yao_agent.observe import logs

log = logging.getLogger("yao_agent.serve")


def serve(root: Path, args: argparse.Namespace, out: TextIO) -> int:
    fmt = logs.chosen(args.log_format)
    with logs.configured(fmt):  # before the app loads: its warnings are log lines too
        try:
            if args.listen_fd is not None:
                return asyncio.run(_worker(root, args, out))
            hooks_compile(root)
            if args.workers > 1:
                return asyncio.run(_supervise(root, args, fmt, out))
            return asyncio.run(_single(root, args, out))
        except YaoAgentError as exc:
            if fmt != "json":
                raise  # the command's plain `error: …` line
            return _logged(exc)


def _logged(exc: YaoAgentError) -> int:
    """Why serving could not start, as JSON log lines like every other (the exit code is the command's)."""
    if isinstance(exc, SpecError):
        for problem in exc.problems:
            log.error("%s", problem, extra={"file": problem.file, "line": problem.line})
        return Exit.USAGE
    log.error("error: %s", exc)
    return Exit.USAGE if isinstance(exc, UsageError) else Exit.FAILED


def banner(out: TextIO, root: Path, url: str, workers: int | None = None) -> None:
    """The line saying it serves, on stdout: in the log's format, so that with `--log-format json` every
    line the command writes is a JSON object (the URL and the app as fields of their own)."""
    text = f"yao-agent serving {root} on {url}" + (f" ({workers} workers)" if workers else "")
    if logs.current_format() == "json":
        fields: dict[str, object] = {"app": str(root), "url": url}
        if workers:
            fields["workers"] = workers
        record = logging.makeLogRecord({"name": "yao_agent.serve", "levelno": logging.INFO, "levelname": "INFO",
                                        "msg": text, **fields})  # fmt: skip
        text = logs.JsonFormatter().format(record)
    print(text, file=out, flush=True)


def hooks_compile(root: Path) -> None:
    """Hooks are part of the app (CONTRACT §8.4): a server whose hooks do not load in V8 does not start,
    as with bad YAML, rather than failing every run of their assistants (its workers inherit this check;
    a reload makes it again for what changed)."""
    import functools

    from yao_agent.dsl.loader import check_app
    from yao_agent.service.probe import probe

    report = check_app(root, probe=functools.partial(probe, hooks=True, mcp=False))
    if report.app is None:
        raise SpecError(report.errors)


async def _single(root: Path, args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.server.serve import address, listen, server, settle_memory
    from yao_agent.service.runs import Runs

    runs = await Runs.open(root, db=args.db)
    try:
        settings = runs.app.config.server
        host = args.host or settings.host
        sock = listen(host, args.port or settings.port)
        where = f"http://{address(host, sock.getsockname()[1])}/"  # (the port the system chose for port 0)

        def started() -> None:  # said only once the server listens, never before a failure
            banner(out, runs.app.root.resolve(), where)

        settle_memory()
        await server(runs, host, sock.getsockname()[1], started, args.drain_s).serve(sockets=[sock])
    finally:
        await runs.aclose()
    return Exit.OK


async def _worker(root: Path, args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.server.serve import server, settle_memory
    from yao_agent.server.workers import READY, die_with_parent
    from yao_agent.service.runs import Runs

    die_with_parent()
    sock = socket.socket(fileno=args.listen_fd)
    runs = await Runs.open(root, db=args.db)
    try:
        settle_memory()
        host, port = sock.getsockname()[:2]
        await server(runs, host, port, lambda: print(READY, file=out, flush=True), args.drain_s).serve(sockets=[sock])
    finally:
        await runs.aclose()
    return Exit.OK


async def _supervise(root: Path, args: argparse.Namespace, fmt: logs.Format, out: TextIO) -> int:
    from yao_agent.dsl import load_app
    from yao_agent.server.serve import address, listen
    from yao_agent.server.workers import Supervisor, metrics_folder, worker_command
    from yao_agent.store import open_engine, store_url

    app = load_app(root)  # (each worker loads it again; a mistake is reported once, here)
    url = store_url(settings.store(args.db, app), app.root)
    if url.get_backend_name() != "postgresql":
        raise UsageError(
            f"serve --workers {args.workers} needs a PostgreSQL store: SQLite lets one process write at a "
            "time (use --workers 1, or --db postgresql+psycopg://… / app.yml store)"
        )
    await (await open_engine(url)).dispose()  # migrated once, before the workers race to do it
    host = args.host or app.config.server.host
    sock = listen(host, args.port or app.config.server.port)
    where = f"http://{address(host, sock.getsockname()[1])}/"
    env = {**os.environ, settings.APP: str(root), settings.LOG_FORMAT: fmt}
    if args.db:
        env[settings.DB] = args.db  # (not on the command line, where `ps` shows it)
    options = ["--drain-s", str(args.drain_s)]

    def ready() -> None:
        banner(out, app.root.resolve(), where, args.workers)

    with sock, metrics_folder(env):
        supervisor = Supervisor(worker_command(sock.fileno(), options), sock, args.workers, env, ready)
        return await supervisor.run()
