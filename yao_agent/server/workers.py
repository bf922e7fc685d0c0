"""`serve --workers N` (CONTRACT §8.3): N server processes taking connections from one listening socket.

This process opens the socket, migrates the store once, and starts each worker as `yao-agent serve
--listen-fd FD`; the kernel hands each new connection to one of them. The workers share everything
through PostgreSQL as separate servers do (chats, leases, cancels, appends, approvals, rate limits),
and their metrics through `PROMETHEUS_MULTIPROC_DIR` (a folder of this process's making unless one is
given), so a scrape of any worker counts them all.

Signals are passed on: SIGTERM (and Ctrl-C) to every worker, which drains, and this process exits once
they all have; SIGHUP to every worker, which loads the app's files again. A worker that dies any other
way is started again (after a pause that grows while it keeps dying young), and its chats are free
once its leases expire. Workers run in their own session, so a Ctrl-C at the terminal reaches them once,
through here; each also asks the kernel to stop it should this process die without telling it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field

from yao_agent.observe.metrics import MULTIPROC_ENV

log = logging.getLogger("yao_agent.server")
READY = "ready"  # what a worker prints once it serves
YOUNG_S = 10.0  # a worker that dies younger than this is restarted after a longer pause
MAX_PAUSE_S = 10.0


@dataclass
class Supervisor:
    """Keeps `count` workers running `command` until told to stop."""

    command: list[str]
    sock: socket.socket
    count: int
    env: Mapping[str, str]
    on_ready: Callable[[], None] = lambda: None
    stopping: bool = False
    procs: dict[int, asyncio.subprocess.Process] = field(default_factory=dict[int, asyncio.subprocess.Process])

    async def run(self) -> int:
        """Start the workers, keep them running, and return once all have stopped (1 if one could not start)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, sig)
        loop.add_signal_handler(signal.SIGHUP, self.send, signal.SIGHUP)
        first = [asyncio.create_task(self._start(slot)) for slot in range(self.count)]
        started = await asyncio.gather(*first)
        if not all(started):
            self.stop(signal.SIGTERM)
            await self._wait_all()
            return 1
        self.on_ready()
        keepers = [asyncio.create_task(self._keep(slot, proc)) for slot, proc in enumerate(started) if proc]
        await asyncio.gather(*keepers)
        return 0

    def stop(self, sig: int) -> None:
        if not self.stopping:
            log.warning("stopping: %d workers drain their runs", len(self.procs))
        self.stopping = True
        self.send(signal.SIGTERM if sig == signal.SIGTERM else signal.SIGINT)

    def send(self, sig: int) -> None:
        for proc in list(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    async def _start(self, slot: int) -> asyncio.subprocess.Process | None:
        """One worker, once it says it serves; None when it exits first (it said why on stderr)."""
        proc = await asyncio.create_subprocess_exec(
            *self.command, pass_fds=(self.sock.fileno(),), env=dict(self.env), start_new_session=True,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.procs[proc.pid] = proc
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if line.decode(errors="replace").strip() != READY:
            await proc.wait()
            self._gone(proc)
            log.error("worker %d could not start (exit %s)", slot + 1, proc.returncode)
            return None
        return proc

    async def _keep(self, slot: int, proc: asyncio.subprocess.Process) -> None:
        """Wait for the worker to end; start another in its place unless we are stopping."""
        pause = 0.5
        while True:
            born = time.monotonic()
            await proc.wait()
            self._gone(proc)
            if self.stopping:
                return
            pause = 0.5 if time.monotonic() - born > YOUNG_S else min(pause * 2, MAX_PAUSE_S)
            log.warning("worker %d (pid %d) exited with %s; starting another in %g s",
                        slot + 1, proc.pid, proc.returncode, pause)  # fmt: skip
            await asyncio.sleep(pause)
            if self.stopping:
                return
            again = await self._start(slot)
            if again is None:
                continue  # (counted as dying young: the pause grows)
            proc = again

    def _gone(self, proc: asyncio.subprocess.Process) -> None:
        self.procs.pop(proc.pid, None)
        folder = self.env.get(MULTIPROC_ENV)
        if folder:  # its gauges leave the sums (it could not say so itself if it was killed)
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(proc.pid, folder)  # pyright: ignore[reportUnknownMemberType]

    async def _wait_all(self) -> None:
        for proc in list(self.procs.values()):
            await proc.wait()
            self._gone(proc)


@contextlib.contextmanager
def metrics_folder(env: dict[str, str]) -> Generator[None]:
    """The workers' shared metrics folder: the one given, else a fresh one removed at the end."""
    if env.get(MULTIPROC_ENV):
        yield
        return
    folder = tempfile.mkdtemp(prefix="yao-agent-metrics-")
    env[MULTIPROC_ENV] = folder
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def worker_command(listen_fd: int, options: list[str]) -> list[str]:
    """How a worker is started: this Python, this package, `serve` on an inherited socket."""
    return [sys.executable, "-m", "yao_agent.cli", "serve", "--listen-fd", str(listen_fd), *options]


def die_with_parent() -> None:
    """Ask the kernel to stop this worker with SIGTERM when its supervisor dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # it died before we asked
        os.kill(os.getpid(), signal.SIGTERM)
