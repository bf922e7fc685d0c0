"""Worker processes for hooks, as seen from the server: started, leased to one hook call at a time, killed.

A `Worker` is one process running `worker.py`, talked to over its stdin and stdout with the frames that
module defines. Its replies are read by the event loop's selector (no thread, no blocking read), and
each request has a hard deadline: the JavaScript budget plus `GRACE_S`, after which the process is
killed. A process that dies — killed, aborted by V8, out of its data limit — fails only the request in
flight; its exit is seen through a pidfd, and it is reaped there and then.

`Workers` is the pool: at most `size` processes, each leased to one hook call for the whole call (its
`ctx` calls included), so a crash can only fail the call that caused it. A call nested in another
(a hook's `ctx.call` running an assistant with a hook) never waits for a worker, since the one it
would wait for may be its own caller's: it gets a new process if none is free, and that process is
stopped when it is given back. A call prefers a free worker that holds its context warm.
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
from contextvars import ContextVar
from importlib.util import find_spec
from pathlib import Path
from typing import Protocol

from yao_agent.hooks import worker as wire
from yao_agent.hooks.host import printable

log = logging.getLogger("yao_agent.hook")

GRACE_S = 0.5  # past its JavaScript budget, how long a request may take before its process is killed
START_S = 30.0  # how long a new process may take to say it is ready (a loaded machine starts slowly)
CONTEXTS_PER_WORKER = 8  # warm contexts a process keeps (one per hook file version and tenant), LRU
_KEEP_STDERR = 4096
_FATAL = re.compile(r"Fatal [^\n]*")
_NESTED: ContextVar[int] = ContextVar("yao_agent_hook_nesting", default=0)


class Warm(Protocol):
    """A warm context as a worker keeps it (`engine.JsEngine`)."""

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
        self.contexts: OrderedDict[Hashable, Warm] = OrderedDict()  # least recently used first
        self.busy = True  # leased from the moment it is made
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

    def keep(self, key: Hashable, engine: Warm, limit: int = CONTEXTS_PER_WORKER) -> None:
        """Remember a warm context; the least recently used beyond `limit` is closed."""
        self.contexts[key] = engine
        self.contexts.move_to_end(key)
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


class Workers:
    """The worker processes of one event loop."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.loop = asyncio.get_running_loop()
        self._all: list[Worker] = []  # until reaped, retired ones included
        self._waiters: list[asyncio.Future[None]] = []

    def idle(self, key: Hashable, *, queued: bool = False) -> Worker | None:
        """A free worker, preferably one holding `key` warm (no await: the common case). A caller that
        has not waited yet gets none while others wait: they are served first."""
        if self._waiters and not queued:
            return None
        free: Worker | None = None
        for candidate in self._all:
            if candidate.leasable:
                if key in candidate.contexts:
                    candidate.busy = True
                    return candidate
                if free is None or len(candidate.contexts) < len(free.contexts):
                    free = candidate
        if free is not None:
            free.busy = True
        return free

    async def acquire(self, key: Hashable) -> Worker:
        """A worker for this caller alone until `release`: a free one, a new one, or the next given back."""
        queued = bool(_NESTED.get())  # a nested call goes first: its caller holds a worker already
        while True:
            found = self.idle(key, queued=queued)
            if found is not None:
                return found
            if self._running() < self.size or _NESTED.get():
                return await self._spawn()
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            queued = True
            try:
                await waiter
            except asyncio.CancelledError:
                self._wake()  # pass the turn on: what woke this waiter may be the only wake-up
                raise

    def _running(self) -> int:
        return sum(1 for worker in self._all if not (worker.dead or worker.retired))

    async def _spawn(self) -> Worker:
        try:
            made = Worker(self.loop)
        except OSError as exc:  # out of processes, of file descriptors
            raise WorkerLost(f"a process could not be started ({exc.strerror or exc})") from None
        made.on_gone = self._gone
        made.on_drained = self._wake
        self._all.append(made)
        try:
            await made.start()
        except BaseException:
            made.close_now()
            raise
        return made

    def release(self, worker: Worker) -> None:
        worker.busy = False
        if not worker.retired and self._running() > self.size:
            worker.kill("it was an extra worker")  # made for a nested call; reaped when it has exited
        self._wake()

    def _gone(self, worker: Worker) -> None:
        if worker in self._all:
            self._all.remove(worker)
        self._wake()  # a slot is free for a new process

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break

    def enter(self) -> object:
        """Mark the current task as inside a hook call (see the module's docstring); the token to `leave`."""
        return _NESTED.set(_NESTED.get() + 1)

    def leave(self, token: object) -> None:
        _NESTED.reset(token)  # pyright: ignore[reportArgumentType]

    def drop(self, stale: Callable[[Hashable], bool]) -> None:
        """Free the warm contexts, in free workers, whose keys are `stale` (an old version of a file)."""
        for worker in self._all:
            if worker.leasable:
                for key in [key for key in worker.contexts if stale(key)]:
                    worker.contexts.pop(key).close()

    def workers(self) -> list[Worker]:
        return list(self._all)

    async def aclose(self) -> None:
        """Kill every process and wait until each is reaped."""
        workers = list(self._all)
        for worker in workers:
            worker.kill("the hooks were closed")
        for worker in workers:
            try:
                await asyncio.wait_for(asyncio.shield(worker.exited), 5)
            except TimeoutError:
                worker.close_now()
        self._cancel_waiters()

    def close_now(self) -> None:
        """The same, blocking: for a pool whose event loop is gone or not this one."""
        for worker in list(self._all):
            worker.close_now()
        self._all.clear()
        self._cancel_waiters()

    def _cancel_waiters(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        self._waiters.clear()
