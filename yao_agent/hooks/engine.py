"""One V8 context, driven with strings in and strings out, with a deadline that never hangs the event loop.

Why not mini-racer's own async API: its `eval_cancelable` wakes the event loop through a self-pipe for
every result (107 µs a call against 71 µs for the plain result queue, in mini-racer's own measurements),
and its JS→Python bridge (`wrap_py_function`) unpacks each call with synchronous isolate calls on the
event loop — a hook that fires `ctx.log()` and then loops forever blocks the whole process, deadline
included (tried: the loop never woke up). So this module uses the library's plain result queue: a task
is posted, its result awaited on the queue (blocking briefly, since almost every hook call finishes well
under a millisecond, then from a worker thread so a slow hook never holds the loop), and a late task is
cancelled, which terminates the JavaScript. Nothing here makes a synchronous isolate call while
JavaScript may be running, so the deadline always fires.

Every reach into mini-racer's internals is in `_Internals` (mini-racer is pinned in pyproject.toml).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from py_mini_racer import JSEvalException, JSOOMException, MiniRacer

# How long a call may block the event loop before its wait moves to a worker thread.
BLOCKING_WAIT_S = 0.002
# Threads that wait for slow hooks. Their own pool: waits on the default executor would queue behind
# (and hold up) everything else that uses it, such as the store's transactions.
WAIT_THREADS = 16
_STRING = 5  # mini-racer's type tag for a UTF-8 string value (`_MiniRacerTypes.str_utf8`)
_waits: list[ThreadPoolExecutor] = []


def _wait_pool() -> ThreadPoolExecutor:
    if not _waits:
        _waits.append(ThreadPoolExecutor(max_workers=WAIT_THREADS, thread_name_prefix="yao-hook-wait"))
    return _waits[0]


class ScriptFailure(Exception):
    """JavaScript could not run to completion; `text` is V8's report (location, source line, stack)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ScriptTimeout(Exception):
    """The deadline passed; the JavaScript was terminated and the context must not be reused."""


class ScriptOutOfMemory(Exception):
    """The context's heap passed its hard limit; the JavaScript was terminated."""


@dataclass(slots=True)
class Budget:
    """JavaScript time left for one hook call, in seconds. Time spent in host callbacks is not counted."""

    left: float


class _Internals:
    """The private parts of mini-racer 0.14.1 this module needs: raw task posting, the result queue and
    string values, used directly because the library's generic conversions cost more than the call."""

    def __init__(self, racer: MiniRacer) -> None:
        ctx: Any = racer._ctx  # pyright: ignore[reportPrivateUsage]
        self.dll: Any = ctx._dll
        self.handle: Any = ctx._ctx
        # A C queue in place of `queue.Queue`: a wait with a timeout makes no lock and condition per call.
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        object.__setattr__(ctx, "_non_cancelable_mr_task_results_queue", self.results)
        self.wrap: Callable[[object], Any] = ctx._wrap_raw_handle
        self.to_py: Callable[[object], object] = ctx._value_handle_to_python
        self.no_args: Any = cast(Any, racer.eval("[]")).raw_handle
        self.no_args_raw: Any = self.no_args.raw
        self.entry: Any = None
        self.entry_raw: Any = None

    def string(self, text: str) -> Any:
        data = text.encode("utf-8")
        return self.wrap(self.dll.mr_alloc_string_val(self.handle, data, len(data), _STRING))

    def post(self, code: str) -> tuple[int, object]:
        """Queue `code` on the context's isolate thread; its result arrives on `results` (callback id 0)."""
        code_handle = self.string(code)
        return int(self.dll.mr_eval(self.handle, code_handle.raw, 0)), code_handle

    def post_call(self, request: str) -> tuple[int, object]:
        """Queue a call of the entry function with `this` = `request`: no script to compile."""
        this = self.string(request)
        return int(self.dll.mr_call_function(self.handle, self.entry_raw, this.raw, self.no_args_raw, 0)), this

    def value(self, handle: Any) -> object:
        """A result: a string (the runtime's every answer) read in place, anything else by mini-racer."""
        contents = handle.raw.contents
        if contents.type == _STRING:
            return contents.value.bytes_val[0 : contents.len].decode("utf-8")
        return self.to_py(handle)

    def cancel(self, task_id: int) -> None:
        self.dll.mr_cancel_task(self.handle, task_id)


class JsEngine:
    """A warm V8 context that runs scripts for one hook call at a time (the caller guarantees exclusivity)."""

    def __init__(self) -> None:
        self._racer = MiniRacer()
        self._raw = _Internals(self._racer)
        self.memory_limit_mb = 0
        self.kinds: dict[str, str] = {}  # what `typeof` each hook function is in the loaded file
        self.broken = False  # timed out, out of memory or interrupted: never to be used again
        self._closed = False

    def set_memory_limit(self, megabytes: int) -> None:
        if megabytes != self.memory_limit_mb:
            self._racer.set_hard_memory_limit(megabytes * 1024 * 1024)
            self.memory_limit_mb = megabytes

    def out_of_memory(self) -> bool:
        return self._racer.was_hard_memory_limit_reached()

    def bind_entry(self, expression: str) -> None:
        """Name the function `call` hands its requests to (the context must be idle)."""
        self._raw.entry = cast(Any, self._racer.eval(expression)).raw_handle
        self._raw.entry_raw = self._raw.entry.raw

    async def run(self, codes: Sequence[str], budget: Budget) -> str:
        """Evaluate the scripts in order (JS microtasks run between them); the last one's string."""
        return await self._settle([self._raw.post(code) for code in codes], budget)

    async def call(self, requests: Sequence[str], budget: Budget) -> str:
        """Hand each request string to the entry function, in order; the last answer."""
        return await self._settle([self._raw.post_call(request) for request in requests], budget)

    async def _settle(self, posted: list[tuple[int, object]], budget: Budget) -> str:
        """Collect every posted task's result; the first failure is raised once all have reported, so the
        context's result queue stays in step with what was posted.

        The budget is charged from posting to the last result's arrival: JavaScript time, not the time a
        waiting thread took to start or the event loop took to come back to this call.
        """
        started = time.perf_counter()
        deadline = started + budget.left
        arrived = started
        outcomes: list[object] = []
        try:
            for _ in posted:
                handle = self._take(min(deadline - arrived, BLOCKING_WAIT_S))
                arrived = time.perf_counter()
                if handle is None and deadline > arrived:
                    handle, arrived = await asyncio.get_running_loop().run_in_executor(
                        _wait_pool(), self._take_until, deadline
                    )
                if handle is None:
                    raise ScriptTimeout
                outcomes.append(self._outcome(handle))
        except BaseException:
            self.broken = True
            for task_id, _ in posted:
                self._raw.cancel(task_id)
            budget.left = 0.0
            raise
        budget.left -= arrived - started
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome
        last = outcomes[-1]
        if not isinstance(last, str):
            raise ScriptFailure(f"the hook runtime returned {type(last).__name__}, not a string")
        return last

    def _outcome(self, handle: object) -> object:
        try:
            return self._raw.value(handle)
        except JSOOMException:
            self.broken = True
            return ScriptOutOfMemory()
        except JSEvalException as exc:
            if self.out_of_memory():
                self.broken = True
                return ScriptOutOfMemory()
            return ScriptFailure(str(exc))

    def _take_until(self, deadline: float) -> tuple[object | None, float]:
        """On a waiting thread: the next result by `deadline`, and when it arrived."""
        handle = self._take(deadline - time.perf_counter())
        return handle, time.perf_counter()

    def _take(self, timeout: float) -> object | None:
        try:
            return self._raw.results.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def close(self) -> None:
        """Free the context; any JavaScript still running in it (even between tasks) is terminated.

        Freeing waits for the isolate's thread, and V8 only stops at its next interrupt check: a single
        long builtin (`new Array(2**27).fill(0)` ran 20 s past its deadline) would hold the caller that
        long. So a context that was running is freed from a daemon thread, off the event loop.
        """
        if self._closed:
            return
        self._closed = True
        was_running = self.broken
        self.broken = True
        if was_running:
            threading.Thread(target=self._racer.close, name="yao-hook-close", daemon=True).start()
        else:
            self._racer.close()
