"""Worker processes for hooks, as seen from the server: started, asked one request at a time, killed.

A `Worker` is one process running `worker.py`, talked to over its stdin and stdout with the frames that
module defines. Its replies are read by the event loop's selector (no thread, no blocking read), and
each request has a hard deadline: the JavaScript budget plus `GRACE_S`, after which the process is
killed. A process that dies — killed, aborted by V8, out of its data limit — fails the request in
flight and loses its contexts; its exit is seen through a pidfd, and it is reaped there and then.
Which call may use a worker when is `leases.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import signal
import subprocess
import sys
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from importlib.util import find_spec
from pathlib import Path
from typing import Protocol

from yao_agent.hooks import worker as wire
from yao_agent.hooks.host import printable

log = logging.getLogger("yao_agent.hook")

GRACE_S = 0.5  # past its JavaScript budget, how long a request may take before its process is killed
START_S = 30.0  # how long a new process may take to say it is ready (a loaded machine starts slowly)
CONTEXTS_PER_WORKER = 8  # idle warm contexts a process keeps (each for one hook text and tenant), LRU
_KEEP_STDERR = 4096
_FATAL = re.compile(r"Fatal [^\n]*")


class Warm(Protocol):
    """A warm context as a worker keeps it (`engine.JsEngine`)."""

    @property
    def id(self) -> int: ...

    def close(self) -> None: ...


class WorkerLost(Exception):
    """The process ended (or could not start) while a request was in flight; `detail` says how."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class WorkerOverran(Exception):
    """The request passed its hard deadline and the process was killed."""


@functools.cache
def _command() -> tuple[list[str], dict[str, str]]:
    """How to start a worker: this interpreter without site packages (py_mini_racer is found through
    PYTHONPATH; skipping site saves a fifth of the start-up), nothing from the current directory, and an
    environment holding nothing of the server's: it runs tenants' code."""
    spec = find_spec("py_mini_racer")
    where = Path(spec.origin).parent.parent if spec is not None and spec.origin else None
    env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
    if where is not None:
        env["PYTHONPATH"] = str(where)
    return [sys.executable, "-S", "-P", "-B", str(Path(wire.__file__))], env


class Worker:
    """One worker process. The pool guarantees one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # Idle warm contexts by (what they hold, their id), least recently used first: a context in use is
        # its call's alone and not here. Calls of one text and tenant running together each have one.
        self.contexts: OrderedDict[tuple[Hashable, int], Warm] = OrderedDict()
        self.busy = True  # leased from the moment it is made
        self.hosting: dict[Hashable, int] = {}  # tenant → calls in flight whose context is in this process
        self.retired = False  # killed on purpose: never leased again
        self.dead = False
        self.on_gone: Callable[[Worker], None] | None = None  # the pool's: it has exited
        self.on_drained: Callable[[], None] | None = None  # the pool's: an abandoned reply has come
        self._closes: list[int] = []
        self._next_id = 0
        self._buffer = bytearray()
        self._stderr = bytearray()
        self._reply: asyncio.Future[tuple[bytes, float, bytes]] | None = None
        self._abandoned: list[asyncio.TimerHandle] = []  # deadlines of requests whose caller went away
        self._killed_for: str | None = None
        self.exited: asyncio.Future[None] = loop.create_future()
        command, env = _command()
        to_child, self._in = os.pipe()
        self._out, from_child = os.pipe()
        self._err, err_child = os.pipe()
        try:
            self.proc = subprocess.Popen(command, stdin=to_child, stdout=from_child, stderr=err_child, env=env, cwd="/")
        except OSError:
            for fd in (self._in, self._out, self._err):
                os.close(fd)
            raise
        finally:
            for fd in (to_child, from_child, err_child):
                os.close(fd)
        for fd in (self._in, self._out, self._err):
            os.set_blocking(fd, False)
        self._pidfd = _watch_exit(self)
        loop.add_reader(self._out, self._on_output)
        loop.add_reader(self._err, self._on_stderr)
        # A worker never closed (its loop dropped, say) is still killed and reaped, not left running.
        self._finalizer = weakref.finalize(
            self, _kill_and_reap, self.proc, [self._in, self._out, self._err, self._pidfd]
        )

    async def start(self) -> None:
        """Wait for the process to say it is ready; kill it if it cannot."""
        status, _, _ = await self._exchange(None, time.monotonic() + START_S)
        if status != wire.READY:
            self.kill("it did not start")
            raise WorkerLost("the hook runtime did not start")

    def new_context_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def forget(self, context_id: int) -> None:
        """Free a context in the process with the next request (nothing to wait for)."""
        self._closes.append(context_id)

    @property
    def leasable(self) -> bool:
        return not (self.busy or self.dead or self.retired or self._abandoned)

    def warm(self, key: Hashable) -> bool:
        """Whether an idle context holds `key`."""
        return any(held == key for held, _ in self.contexts)

    def take(self, key: Hashable) -> Warm | None:
        """The most recently used idle context holding `key`, now the caller's (`keep` gives it back)."""
        for entry in reversed(self.contexts):
            if entry[0] == key:
                return self.contexts.pop(entry)
        return None

    def keep(self, key: Hashable, engine: Warm, limit: int = CONTEXTS_PER_WORKER) -> None:
        """Remember an idle warm context; the least recently used beyond `limit` is closed."""
        self.contexts[(key, engine.id)] = engine
        while len(self.contexts) > limit:
            _, oldest = self.contexts.popitem(last=False)
            oldest.close()

    async def request(
        self, op: bytes, context_id: int, memory_mb: int, budget_s: float, strings: list[bytes]
    ) -> tuple[bytes, float, bytes]:
        """One request and its reply: (status, JavaScript seconds used, answer)."""
        closes, self._closes = self._closes, []
        frame = wire.request_frame(op, context_id, memory_mb, budget_s, closes, strings)
        return await self._exchange(frame, time.monotonic() + max(budget_s, 0.0) + GRACE_S)

    async def _exchange(self, frame: bytes | None, deadline: float) -> tuple[bytes, float, bytes]:
        """Send `frame` (None: just wait for the greeting) and wait for the reply, at most until `deadline`.

        A caller cancelled while waiting leaves its request running in the process: its reply is still
        to come and is dropped when it does (the worker is not leased again until then), and its
        deadline still stands.
        """
        if self.dead:
            raise WorkerLost(self._ending())
        reply = self._reply = self.loop.create_future()
        timer = self.loop.call_at(self.loop.time() + deadline - time.monotonic(), self._overran)
        abandoned = False
        try:
            if frame is not None:
                self._send(frame)
            return await reply
        except asyncio.CancelledError:
            abandoned = reply.cancelled() and not self.dead
            if abandoned:
                self._abandoned.append(timer)
            raise
        finally:
            if not abandoned:
                timer.cancel()
            if self._reply is reply:
                self._reply = None

    def _send(self, frame: bytes) -> None:
        try:
            written = os.write(self._in, frame)
        except BrokenPipeError:
            return  # it died: its exit fails the request
        if written < len(frame):
            rest = memoryview(frame)[written:]
            self.loop.add_writer(self._in, self._send_more, [rest])

    def _send_more(self, rest: list[memoryview]) -> None:
        try:
            rest[0] = rest[0][os.write(self._in, rest[0]) :]
        except (BrokenPipeError, BlockingIOError) as exc:
            if isinstance(exc, BlockingIOError):
                return
            rest[0] = rest[0][:0]
        if not rest[0]:
            self.loop.remove_writer(self._in)

    def _on_output(self) -> None:
        try:
            data = os.read(self._out, 1 << 16)  # larger reads cost an mmap each
        except BlockingIOError:
            return
        if not data:
            self.loop.remove_reader(self._out)  # its exit, seen through the pidfd, says the rest
            return
        self._buffer += data
        head = wire.SIZE.size + wire.REPLY.size
        while len(self._buffer) >= head:
            (size,) = wire.SIZE.unpack_from(self._buffer)
            end = wire.SIZE.size + size
            if len(self._buffer) < end:
                break
            status, used = wire.REPLY.unpack_from(self._buffer, wire.SIZE.size)
            with memoryview(self._buffer) as view:
                answer = bytes(view[head:end])  # one copy, even of a large answer
            del self._buffer[:end]
            self._deliver(bytes(status), used, answer)

    def _deliver(self, status: bytes, used: float, answer: bytes) -> None:
        if self._abandoned:
            self._abandoned.pop(0).cancel()
            if not self._abandoned and self.on_drained is not None:
                self.on_drained()
            return
        reply = self._reply
        if reply is None or reply.done():
            self.kill("it answered a request it was not asked")
            return
        reply.set_result((status, used, answer))

    def _on_stderr(self) -> None:
        try:
            data = os.read(self._err, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.loop.remove_reader(self._err)
            return
        self._stderr += data
        del self._stderr[:-_KEEP_STDERR]

    def _overran(self) -> None:
        if not self.dead:
            self.kill("it overran its deadline")
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(WorkerOverran())

    def kill(self, why: str) -> None:
        self.retired = True
        if self._killed_for is None:
            self._killed_for = why
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)

    def on_exit(self) -> None:
        """The process has ended: reap it, and fail the request in flight."""
        if self.dead:
            return
        self.proc.wait()
        self._drain_stderr()
        self._close_fds()
        self.dead = True
        self._finalizer.detach()
        for timer in self._abandoned:
            timer.cancel()
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(WorkerLost(self._ending()))
        if self._killed_for is None:
            log.warning("a hook worker process ended: %s", printable(self._ending()))
        if not self.exited.done():
            self.exited.set_result(None)
        if self.on_gone is not None:
            self.on_gone(self)

    @property
    def in_flight(self) -> int:
        """Calls with a context here now, running or waiting for the host."""
        return sum(self.hosting.values())

    def hosts_other_than(self, tenant: Hashable) -> bool:
        """Whether calls of another tenant have a context in flight here (a crash would fail them too)."""
        return any(other != tenant for other in self.hosting)

    def ending(self) -> str:
        """How the process ended (or is ending), in words a hook's author can act on."""
        return self._ending()

    def _ending(self) -> str:
        """How the process ended, in words a hook's author can act on."""
        said = self._stderr.decode("utf-8", "replace")
        fatal = _FATAL.search(said)
        code = self.proc.returncode
        if fatal is not None:
            how = fatal.group(0).strip()[:200]
        elif code is not None and code < 0:
            how = f"signal {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
        else:
            last = said.strip().rsplit("\n", 1)[-1].strip()[:200]  # a Python error's last line, if any
            how = f"exit status {code}: {last}" if last else f"exit status {code}"
        return f"{how}, {self._killed_for}" if self._killed_for else how

    def _drain_stderr(self) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(self._err, 1 << 16):
                self._stderr += data
                del self._stderr[:-_KEEP_STDERR]

    def _close_fds(self) -> None:
        for fd, remove in ((self._out, self.loop.remove_reader), (self._err, self.loop.remove_reader),
                           (self._in, self.loop.remove_writer), (self._pidfd, self.loop.remove_reader)):  # fmt: skip
            if fd < 0:
                continue
            if not self.loop.is_closed():
                remove(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._out = self._err = self._in = self._pidfd = -1

    def close_now(self) -> None:
        """Kill and reap at once, blocking (the process was killed: it ends in milliseconds)."""
        if self.dead:
            return
        self.kill("the hooks were closed")
        self.on_exit()


def _watch_exit(worker: Worker) -> int:
    """Call `worker.on_exit` when the process ends: a pidfd in the selector where there is one (Linux),
    else a thread waiting for it."""
    if hasattr(os, "pidfd_open"):
        fd = os.pidfd_open(worker.proc.pid)
        worker.loop.add_reader(fd, worker.on_exit)
        return fd

    def wait() -> None:
        with contextlib.suppress(Exception):
            worker.proc.wait()
        with contextlib.suppress(RuntimeError):
            worker.loop.call_soon_threadsafe(lambda: None if worker.dead else worker.on_exit())

    worker.loop.run_in_executor(None, wait)
    return -1


def _kill_and_reap(proc: subprocess.Popen[bytes], fds: list[int]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
