"""One V8 context, driven with strings in and strings out: a handle on a context that lives in a worker.

The context itself is in a worker process (`worker.py`), which runs its JavaScript within the budget
and the memory limit; this side sends the strings, waits for the answer without blocking the event
loop, and charges the JavaScript time the worker reports to the call's budget. If the worker dies or
overruns its hard deadline, every context in it is gone: the call in flight fails and the handles say
`broken`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from yao_agent.hooks import worker as wire
from yao_agent.hooks.procs import Worker, WorkerLost, WorkerOverran


class ScriptFailure(Exception):
    """JavaScript could not run to completion; `text` is V8's report (location, source line, stack)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ScriptTimeout(Exception):
    """The deadline passed; the JavaScript was terminated and the context must not be reused."""


class ScriptOutOfMemory(Exception):
    """The context's heap passed its hard limit; the JavaScript was terminated."""


class ScriptCrash(Exception):
    """The worker process ended under the JavaScript (a fatal V8 error, its data limit, a kill)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(slots=True)
class Budget:
    """JavaScript time left for one hook call, in seconds. Time spent in host callbacks is not counted."""

    left: float


class JsEngine:
    """A warm V8 context in `worker`, for one hook call at a time (the worker's lease guarantees it)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.id = worker.new_context_id()
        self.memory_limit_mb = 0
        self.kinds: dict[str, str] = {}  # what `typeof` each hook function is in the loaded file
        self._broken = False  # timed out, out of memory or interrupted: never to be used again
        self._closed = False

    @property
    def broken(self) -> bool:
        return self._broken or self.worker.dead

    def set_memory_limit(self, megabytes: int) -> None:
        self.memory_limit_mb = megabytes  # sent with every request

    async def bind_entry(self, expression: str) -> None:
        """Name the function `call` hands its requests to."""
        await self._request(wire.BIND, [expression], Budget(1.0))

    async def run(self, codes: Sequence[str], budget: Budget) -> str:
        """Evaluate the scripts in order (JS microtasks run between them); the last one's string."""
        return await self._request(wire.RUN, codes, budget)

    async def call(self, requests: Sequence[str], budget: Budget) -> str:
        """Hand each request string to the entry function, in order; the last answer."""
        return await self._request(wire.CALL, requests, budget)

    async def _request(self, op: bytes, strings: Sequence[str], budget: Budget) -> str:
        encoded = [text.encode() for text in strings]
        try:
            status, used, answer = await self.worker.request(op, self.id, self.memory_limit_mb, budget.left, encoded)
        except BaseException as exc:
            self._broken = True
            budget.left = 0.0
            if isinstance(exc, WorkerOverran):
                raise ScriptTimeout from None
            if isinstance(exc, WorkerLost):
                raise ScriptCrash(exc.detail) from None
            raise
        budget.left -= used
        if status == wire.OK:
            return answer.decode("utf-8", "replace")
        if status == wire.FAILED:
            raise ScriptFailure(answer.decode("utf-8", "replace"))
        self._broken = True  # the worker has freed the context already
        self._closed = True
        if status == wire.OUT_OF_MEMORY:
            raise ScriptOutOfMemory
        budget.left = 0.0
        raise ScriptTimeout

    def close(self) -> None:
        """Free the context in its worker (with the worker's next request: nothing waits for it)."""
        if self._closed:
            return
        self._closed = True
        self._broken = True
        if not self.worker.dead:
            self.worker.forget(self.id)
