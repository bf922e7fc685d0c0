"""`yao-agent serve`: the app under uvicorn, shutting down without losing a run.

The listening socket is opened here, before uvicorn starts, so that an address that cannot be had
(a port already taken) is one clear error rather than uvicorn's log line and exit; and the server says
it is serving only once it listens.

SIGTERM drains (CONTRACT §8.3): `/readyz` turns 503 and new runs are refused with 503 while the runs in
flight get `drain_s` seconds to finish; those still going then are cancelled — each is flushed and
sends its `stream_end`, so its connection can close — and only then does the server stop. Ctrl-C (and a
second SIGTERM) cancels at once. SIGHUP loads the app's files again (`reload.py`), as a change to
them does by itself.

What a client may take of the server (`server:` in app.yml) is held by each connection's protocol
(`protocol`: deadlines for a head, an idle connection, a body left unread; connections at once) and
by the app (`limits`: requests at once, a body's time and size, messages per request).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from types import FrameType

import uvicorn
from fastapi import FastAPI
from sse_starlette.sse import AppStatus

from yao_agent.dsl.specs import ServerSettings
from yao_agent.errors import CannotListen
from yao_agent.observe import logs, tracing
from yao_agent.server.app import create_app
from yao_agent.server.protocol import GuardedH11, protocol
from yao_agent.server.reload import Reloader
from yao_agent.service.runs import Runs

log = logging.getLogger("yao_agent.server")
GC_THRESHOLD = 20_000  # allocations between two young collections (Python's default: 700)
BACKLOG = 2048  # uvicorn's default
FD_RESERVE = 256  # file descriptors kept for the process's own use: the database, MCP servers, logs
DRAIN_S = 30.0  # how long runs in flight may take to finish after SIGTERM (`--drain-s`)
# Once every run has ended, how long the answers still being written may take before their connections
# are cut (before uvicorn's own `timeout_graceful_shutdown`, which would cancel them mid-write).
LAST_WRITES_S = 5.0
GRACEFUL_S = 15


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or CannotListen saying why in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named TCP (not 0, "the default"): asyncio turns Nagle's algorithm off only on sockets that say
    # so, and with it on a reply's last write waits for the client's delayed ACK (~40 ms a response).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart need not wait
        sock.bind((host, port))
        sock.listen(BACKLOG)  # now: another process may have bound the port too, and listening tells
    except OSError as exc:
        sock.close()
        why = (exc.strerror or str(exc)).lower()
        raise CannotListen(f"cannot listen on {address(host, port)}: {why}") from None
    return sock


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runs: Runs, reloader: Reloader,
                 on_started: Callable[[], None] | None = None, drain_s: float = DRAIN_S) -> None:  # fmt: skip
        super().__init__(config)
        self.runs = runs
        self.on_started = on_started
        self.drain_s = drain_s
        self.reloader = reloader
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        # sse-starlette would cut every stream within 0.5 s of a shutdown, before a run cancelled by
        # `handle_exit` has stored itself and sent its `stream_end`; each stream ends with its run instead.
        AppStatus.disable_automatic_graceful_drain()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started:
            self.reloader.start()
            self._loop.add_signal_handler(signal.SIGHUP, self._reload)
            if self.on_started is not None:
                self.on_started()  # the app is served from now on

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGHUP)
        await self.reloader.aclose()
        # Every run has ended by now (drained or cancelled); a response still being written is one whose
        # client stopped reading. uvicorn would wait for it, then cancel its task mid-write and log that as
        # a failure with a traceback: its connection is cut first, which ends the stream as a client that
        # left ends it.
        cut = asyncio.get_running_loop().call_later(LAST_WRITES_S, self._cut_stalled)
        try:
            await super().shutdown(sockets)
        finally:
            cut.cancel()
        app = self.config.app
        if isinstance(app, FastAPI) and app.state.oidc is not None:
            await app.state.oidc.aclose()  # its connections to the identity provider

    def _cut_stalled(self) -> None:
        stalled = [c for c in list(self.server_state.connections) if isinstance(c, GuardedH11)]
        if stalled:
            log.warning("closing %d connections whose clients stopped reading their answers", len(stalled))
        for connection in stalled:
            connection.transport.abort()  # (close() would wait to write what the client does not read)

    def _reload(self) -> None:
        task = asyncio.ensure_future(self.reloader.reload("SIGHUP"))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # (its errors are logged by it)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGTERM: drain, then stop. SIGINT, or SIGTERM again while draining: cancel the runs and stop
        (a second Ctrl-C forces it). Either way the exit is 0."""
        if sig == signal.SIGTERM and self._loop is not None and self.drain_s > 0 and not self.should_exit:
            # (a signal handler may interrupt the loop anywhere: the drain starts from the loop itself)
            self._loop.call_soon_threadsafe(self._drain_or_hurry)
            return
        self.runs.process.cancel_all()  # each run flushes, sends stream_end, and its response ends
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True  # (uvicorn would re-raise the signal after shutting down; the exit is clean)

    def _drain_or_hurry(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        else:
            self.runs.process.cancel_all()  # asked twice: the drain's wait ends now

    async def _drain(self) -> None:
        log.warning("draining: %d runs in flight get up to %g s to finish; new runs are refused",
                    len(self.runs.process.active), self.drain_s)  # fmt: skip
        try:
            finished, cancelled = await self.runs.process.drain(self.drain_s)
            log.warning("drained: %d runs finished, %d cancelled; stopping", finished, cancelled)
        finally:
            self.should_exit = True


def settle_memory() -> None:
    """Keep the garbage collector's pauses short in a long-lived server.

    What start-up built (modules, schemas, the app) lives as long as the process, yet every full
    collection walked it again: measured, with a thousand chats streaming, pauses up to 0.4 s that
    every stream felt. Frozen, it is never walked again; a larger first generation also makes the
    collections of the per-chunk garbage rarer.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def config(runs: Runs, host: str, port: int, settings: ServerSettings | None = None) -> uvicorn.Config:
    """uvicorn's configuration: the app, and each connection's protocol, holding the `server:` settings."""
    settings = settings or runs.app.config.server
    return uvicorn.Config(create_app(runs, settings), host=host, port=port, log_level="warning",
                          log_config=logs.uvicorn_log_config(),
                          timeout_graceful_shutdown=GRACEFUL_S, lifespan="off", http=protocol(settings),
                          ws="none", backlog=BACKLOG)  # fmt: skip


def server(runs: Runs, host: str, port: int, on_started: Callable[[], None] | None = None,
           drain_s: float = DRAIN_S) -> Server:  # fmt: skip
    """The app under uvicorn; serve it on a socket from `listen` (`.serve(sockets=[...])`)."""
    settings = runs.app.config.server
    tracing.setup()  # each serving process traces its own runs, when OTEL_* asks for it
    fitted = replace(settings, max_connections=room_for(settings.max_connections))
    served = config(runs, host, port, fitted)
    app = served.app
    assert isinstance(app, FastAPI)
    return Server(served, runs, app.state.reloader, on_started, drain_s)


def room_for(connections: int) -> int:
    """How many connections the process can hold open: its open-file limit is raised (up to the hard
    limit) to fit them and its own files; when it cannot be, fewer, as the log says. Past that limit
    accepting fails, and the server could not even turn connections away."""
    if sys.platform == "win32":
        return connections
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return connections
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    except (ValueError, OSError):
        raised = soft
    if raised >= wanted:
        return connections
    fit = max(raised - FD_RESERVE, 1)
    log.warning("server.max_connections is %d, but the open-file limit (%d) leaves room for %d only: taking that many",
                connections, raised, fit)  # fmt: skip
    return fit
