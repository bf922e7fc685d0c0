"""`yao-agent serve`: the app under uvicorn, shutting down without losing a run.

The listening socket is opened here, before uvicorn starts, so that an address that cannot be had
(a port already taken) is one clear error rather than uvicorn's log line and exit; and the server says
it is serving only once it listens.

On SIGTERM or Ctrl-C the runs still streaming are cancelled first — each is flushed and sends its
`stream_end`, so its connection can close — and only then does the server stop.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from yao_agent.errors import YaoAgentError
from yao_agent.pipeline import Runtime
from yao_agent.server.app import create_app

log = logging.getLogger("yao_agent.server")
GC_THRESHOLD = 20_000  # allocations between two young collections (Python's default: 700)
BACKLOG = 2048  # uvicorn's default


class CannotListen(YaoAgentError):
    """The address cannot be listened on: taken, not this host's, or not allowed."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or CannotListen saying why in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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
    def __init__(self, config: uvicorn.Config, rt: Runtime, on_started: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.rt = rt
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started()  # the app is served from now on

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Stop on SIGTERM/SIGINT after a graceful shutdown, and exit 0 (a second Ctrl-C forces it)."""
        for handle in list(self.rt.active.values()):
            handle.cancel()  # each run flushes, sends stream_end, and its response ends
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True  # (uvicorn would re-raise the signal after shutting down; the exit is clean)


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


def server(rt: Runtime, host: str, port: int, on_started: Callable[[], None] | None = None) -> Server:
    """The app under uvicorn; serve it on a socket from `listen` (`.serve(sockets=[...])`)."""
    config = uvicorn.Config(create_app(rt), host=host, port=port, log_level="warning", timeout_graceful_shutdown=15,
                            lifespan="off")  # fmt: skip
    return Server(config, rt, on_started)
