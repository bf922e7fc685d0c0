"""The process that runs hooks' JavaScript: V8 lives here, never in the server.

V8 inside the server could not be bounded: `new Array(2**28).fill(0)` ignores termination and then ends
the whole process with a fatal out-of-memory abort that nothing can catch, and mini-racer's memory limit
is only checked when the garbage collector runs (a 256 MB array passed a 32 MB limit). So `procs.py`
starts this file as a script, in its own process with an almost empty environment, and kills and
replaces it when it dies or overruns: the worst a hook can do is end this process and fail its own call.

It is started as `python -S -P -B worker.py` and imports nothing of yao_agent (that would cost a tenth of
a second of start-up); the server imports it only for the wire format below, without py_mini_racer.

The worker holds several V8 contexts (one per hook file version and tenant) and runs one request at a
time, reading a frame from stdin and writing one reply to stdout:

- request: `<u32 size>` then `<op:1><context:u32><memory_mb:u32><budget_s:f64><closes:u16><strings:u16>`,
  the context ids to close first (`u32` each), and the strings (`<u32 length><UTF-8>` each). `op` is
  `r` (evaluate the strings as scripts, in order), `c` (hand each string to the context's entry
  function) or `b` (bind the entry function to the value of the one string). The UTF-8 goes into V8
  as is: the payloads are JSON text already, and nothing here decodes them.
- reply: `<u32 size>` then `<status:1><used_s:f64>` and the answer's UTF-8. `used_s` is the JavaScript
  time the request took, which the server charges to the call's budget.

Limits, inside: the budget (the request's tasks are cancelled when it runs out, which terminates the
JavaScript), V8's heap limit (`memory_mb`), and the process's data limit (`RLIMIT_DATA`), lowered to
what the process uses plus a margin for the request's limit while JavaScript runs, so an allocation V8
does not stop (a builtin filling a huge array) ends this process early instead of eating the machine's
memory. Core dumps are off. Outside: the server's hard deadline kills the process.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

# Requests.
RUN = b"r"
CALL = b"c"
BIND = b"b"
# Reply statuses.
OK = b"k"
FAILED = b"f"  # the answer is V8's report: a syntax error, a throw at top level
TIMED_OUT = b"t"
OUT_OF_MEMORY = b"m"
READY = b"y"  # the first frame: the worker is up

SIZE = struct.Struct("<I")
REQUEST = struct.Struct("<cIIdHH")
REPLY = struct.Struct("<cd")

# While JavaScript runs, the process may take DATA_FACTOR times the request's heap limit plus
# DATA_SLACK_MB more writable memory than it had. V8 only checks its heap limit when it collects
# garbage, so this is what truly bounds one call. Calibrated: hooks filling their heap with arrays or
# objects are still stopped by V8 itself (a clear "exceeded its memory limit"), while one 128 MB array
# under a 32 MB limit, which V8 lets through, ends the process; with 96 MB of slack it got through.
DATA_SLACK_MB = 48
DATA_FACTOR = 2
# The most one answer (a hook's value, or the ctx calls it made) may weigh: the server reads it whole.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
_MB = 1024 * 1024
_STRING = 5  # mini-racer's type tag for a UTF-8 string value (`_MiniRacerTypes.str_utf8`)


def request_frame(
    op: bytes, context: int, memory_mb: int, budget_s: float, closes: list[int], strings: list[bytes]
) -> bytes:
    parts = [REQUEST.pack(op, context, memory_mb, budget_s, len(closes), len(strings))]
    parts += [SIZE.pack(closed) for closed in closes]
    for data in strings:
        parts += [SIZE.pack(len(data)), data]
    body = b"".join(parts)
    return SIZE.pack(len(body)) + body


def reply_frame(status: bytes, used_s: float, answer: bytes) -> bytes:
    return SIZE.pack(REPLY.size + len(answer)) + REPLY.pack(status, used_s) + answer


class _Request:
    __slots__ = ("budget_s", "closes", "context", "memory_mb", "op", "strings")

    def __init__(self, body: bytes) -> None:
        op, self.context, self.memory_mb, self.budget_s, closes, count = REQUEST.unpack_from(body)
        self.op = bytes(op)
        offset = REQUEST.size
        self.closes = [SIZE.unpack_from(body, offset + 4 * i)[0] for i in range(closes)]
        offset += 4 * closes
        self.strings: list[bytes] = []
        for _ in range(count):
            (length,) = SIZE.unpack_from(body, offset)
            offset += 4
            self.strings.append(body[offset : offset + length])
            offset += length


class _DataLimit:
    """`RLIMIT_DATA` around each request: the memory in use (from /proc/self/statm) plus a margin."""

    def __init__(self) -> None:
        import resource

        self._set: Callable[[int, tuple[int, int]], None] = resource.setrlimit
        self._kind = resource.RLIMIT_DATA
        self._hard = resource.getrlimit(self._kind)[1]
        self._bounded = self._hard != resource.RLIM_INFINITY
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)

    def tighten(self, memory_mb: int) -> None:
        data_pages = int(os.pread(self._statm, 200, 0).split()[5])  # data + stack, in pages
        soft = data_pages * self._page + (memory_mb * DATA_FACTOR + DATA_SLACK_MB) * _MB
        self._set(self._kind, (min(soft, self._hard) if self._bounded else soft, self._hard))

    def lift(self) -> None:
        self._set(self._kind, (self._hard, self._hard))


class _Context:
    """One V8 context, driven through mini-racer 0.14.1's private task API (pinned in pyproject.toml):
    tasks are posted raw and their results taken from a plain queue, so a late task can be cancelled
    (which terminates the JavaScript) and strings cross as UTF-8 bytes with no conversion."""

    def __init__(self) -> None:
        import queue

        from py_mini_racer import JSEvalException, JSOOMException, MiniRacer

        self._errors = (JSOOMException, JSEvalException)
        self.racer = MiniRacer()
        ctx: Any = self.racer._ctx  # pyright: ignore[reportPrivateUsage]
        self._dll: Any = ctx._dll
        self._handle: Any = ctx._ctx
        self._results: Any = queue.SimpleQueue()
        self._empty: type[Exception] = queue.Empty
        object.__setattr__(ctx, "_non_cancelable_mr_task_results_queue", self._results)
        self._wrap: Callable[[object], Any] = ctx._wrap_raw_handle
        self._to_py: Callable[[object], object] = ctx._value_handle_to_python
        self._no_args: Any = self._eval("[]").raw_handle
        self._entry: Any = None
        self._limit_reached: Callable[[Any], int] = self._dll.mr_hard_memory_limit_reached
        self.memory_mb = 0
        self.broken = False  # timed out or out of memory: closed after the reply

    def _eval(self, code: str) -> Any:
        """A value of ours (never the hook's), as mini-racer's object: its `raw_handle` stays valid."""
        return self.racer.eval(code)

    def set_memory_limit(self, megabytes: int) -> None:
        if megabytes != self.memory_mb:
            self.racer.set_hard_memory_limit(megabytes * _MB)
            self.memory_mb = megabytes

    def handle(self, request: _Request) -> tuple[bytes, float, bytes]:
        if request.op == BIND:
            self._entry = self._eval(request.strings[0].decode()).raw_handle
            return OK, 0.0, b""
        if request.op == CALL and self._entry is None:
            return FAILED, 0.0, b"no entry function is bound"
        post = self._post_call if request.op == CALL else self._post
        return self._settle([post(data) for data in request.strings], request.budget_s)

    def _string(self, data: bytes) -> Any:
        return self._wrap(self._dll.mr_alloc_string_val(self._handle, data, len(data), _STRING))

    def _post(self, code: bytes) -> tuple[int, object]:
        code_handle = self._string(code)
        return int(self._dll.mr_eval(self._handle, code_handle.raw, 0)), code_handle

    def _post_call(self, request: bytes) -> tuple[int, object]:
        this = self._string(request)
        task = self._dll.mr_call_function(self._handle, self._entry.raw, this.raw, self._no_args.raw, 0)
        return int(task), this

    def _settle(self, posted: list[tuple[int, object]], budget_s: float) -> tuple[bytes, float, bytes]:
        """Every posted task's result, in order; the first failure once all have reported, so the result
        queue stays in step with what was posted. Time is counted from posting to the last result."""
        started = time.perf_counter()
        deadline = started + budget_s
        arrived = started
        outcomes: list[tuple[bytes, bytes | str]] = []
        for _ in posted:
            try:
                handle = self._results.get(timeout=max(deadline - time.perf_counter(), 0.0))
            except self._empty:
                return self._stop(posted, budget_s)
            arrived = time.perf_counter()
            outcomes.append(self._outcome(handle))
        used = arrived - started
        if self._limit_reached(self._handle):  # also when it stopped a promise continuation, which reports nothing
            self.broken = True
            return OUT_OF_MEMORY, used, b""
        status, answer = next((outcome for outcome in outcomes if outcome[0] != OK), outcomes[-1])
        if isinstance(answer, str):  # only the last task's value is the answer, and it must be a string
            return FAILED, used, f"the hook runtime returned {answer}, not a string".encode()
        return status, used, answer

    def _stop(self, posted: list[tuple[int, object]], budget_s: float) -> tuple[bytes, float, bytes]:
        """The budget ran out: cancel the tasks (V8 terminates the one running, drops the others). The
        context is closed before the reply, which waits for V8 to stop: a builtin that ignores
        termination keeps it waiting, and the server's deadline then kills the process."""
        for task_id, _ in posted:
            self._dll.mr_cancel_task(self._handle, task_id)
        self.broken = True
        return TIMED_OUT, budget_s, b""

    def _outcome(self, handle: Any) -> tuple[bytes, bytes | str]:
        """(status, the string's bytes, or the type's name for a value that is not a string)."""
        contents = handle.raw.contents
        if contents.type == _STRING:
            return OK, contents.value.bytes_val[0 : contents.len]
        try:
            value = self._to_py(handle)
        except self._errors[0]:
            self.broken = True
            return OUT_OF_MEMORY, b""
        except self._errors[1] as exc:
            if self.racer.was_hard_memory_limit_reached():
                self.broken = True
                return OUT_OF_MEMORY, b""
            return FAILED, str(exc).encode("utf-8", "replace")
        return OK, type(value).__name__

    def close(self) -> None:
        self.racer.close()


def _read(stream: BinaryIO) -> _Request | None:
    head = stream.read(SIZE.size)
    if len(head) < SIZE.size:
        return None
    (size,) = SIZE.unpack(head)
    body = stream.read(size)
    return _Request(body) if len(body) == size else None


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(stream: BinaryIO, out: int) -> None:
    """Answer requests until stdin closes."""
    from py_mini_racer import init_mini_racer

    init_mini_racer(ignore_duplicate_init=True)  # V8 itself: ready means ready to make contexts at once
    limit = _DataLimit()
    contexts: dict[int, _Context] = {}
    _write(out, reply_frame(READY, 0.0, b""))
    while (request := _read(stream)) is not None:
        for closed in request.closes:
            gone = contexts.pop(closed, None)
            if gone is not None:
                gone.close()
        context = contexts.get(request.context)
        if context is None:
            context = contexts[request.context] = _Context()
        context.set_memory_limit(request.memory_mb)
        limit.tighten(request.memory_mb)
        try:
            status, used, answer = context.handle(request)
        finally:
            limit.lift()
        if context.broken:
            del contexts[request.context]
            context.close()
        if len(answer) > MAX_ANSWER_BYTES:
            status, answer = FAILED, _too_large(len(answer))
        _write(out, reply_frame(status, used, answer))


def _too_large(size: int) -> bytes:
    limit = MAX_ANSWER_BYTES // 1024 // 1024
    return f"the hook's answer is {size / 1024 / 1024:.0f} MB, more than the {limit} MB it may be".encode()


async def _main() -> None:
    # Frames go to the original stdout; anything else printed (V8's own reports) goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    # mini-racer runs its contexts' callbacks on the running event loop: being inside one keeps it from
    # starting a thread and a loop of its own per context. Nothing here awaits.
    serve(os.fdopen(0, "rb", buffering=1 << 16), out)


def main() -> None:
    import asyncio
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    asyncio.run(_main())
    # Skip the interpreter's teardown: V8's threads can make it hang, and nothing is left to save.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
