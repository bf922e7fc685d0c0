"""What the loopback fake provider answers and what it saw: its queues of replies, and its recordings.

Kept apart from the HTTP server (`yao_agent.testing.fake_provider`) so that each half is small: this one
knows nothing of aiohttp. Every method is thread-safe: in thread mode the server reads the script from its
own event loop while the test's thread enqueues replies and reads the recordings.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from yao_agent.testing.fake_scenarios import RecordedRequest, Reply, builtin_reply, reply_for_model, scenario_key

QueuedReply = Reply | str
"""A scripted reply, or the name of a built-in scenario resolved when the request arrives (so `echo` works)."""

_POLL_S: Final = 0.01


class FakeScript:
    """The replies queued for the fake's requests (FIFO, per model or for any), and the requests it got."""

    def __init__(self, default: Callable[[RecordedRequest], Reply] | None = None) -> None:
        self._default = default
        self._lock = threading.Lock()
        self._queue: deque[QueuedReply] = deque()
        self._model_queues: dict[str, deque[QueuedReply]] = {}
        self._requests: list[RecordedRequest] = []
        self._disconnects: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)

    def enqueue(self, *replies: QueuedReply, model: str | None = None) -> None:
        """Queue replies FIFO, for any model or only for `model` (its `provider/` prefix is ignored).

        Scenario names are checked now, so a typo fails where the test is written.
        """
        for item in replies:
            if isinstance(item, str):
                builtin_reply(item)
        with self._lock:
            if model is None:
                self._queue.extend(replies)
            else:
                self._model_queues.setdefault(scenario_key(model), deque()).extend(replies)

    def reset(self) -> None:
        """Forget queued replies, recordings and id counters, as if freshly started."""
        with self._lock:
            self._queue.clear()
            self._model_queues.clear()
            self._requests.clear()
            self._disconnects.clear()
            self._ids = itertools.count(1)
            self._call_ids = itertools.count(1)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request to the model (chats and embeddings: see `path`) so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def disconnects(self) -> list[RecordedRequest]:
        """Requests whose client went away before their response was complete, in the order noticed."""
        with self._lock:
            return list(self._disconnects)

    async def wait_for_disconnects(self, n: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least `n` disconnects were recorded; return them all.

        It polls rather than awaiting an event so that it works from any event loop, including a
        throwaway ``asyncio.run(...)`` in sync code while the server runs in its own thread.
        """
        deadline = time.monotonic() + timeout
        while True:
            seen = self.disconnects
            if len(seen) >= n:
                return seen
            if time.monotonic() >= deadline:
                raise TimeoutError(f"saw {len(seen)} of {n} client disconnects within {timeout} s")
            await asyncio.sleep(_POLL_S)

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def record_disconnect(self, request: RecordedRequest) -> None:
        with self._lock:
            self._disconnects.append(request)

    def choose(self, record: RecordedRequest, header_scenario: str | None) -> Reply:
        """The reply `record` gets: the scenario its header names, else the queue of its model, else the
        global queue, else ``default(record)`` if given, else the scenario its model names."""
        if header_scenario:
            return builtin_reply(header_scenario, record.messages)
        item = self._pop(record.model, shared=not is_embedding(record))
        if isinstance(item, str):
            return builtin_reply(item, record.messages)
        if item is not None:
            return item
        if self._default is None:
            return reply_for_model(record.model, record.messages)
        try:
            return self._default(record)
        except Exception as exc:  # the user's function; report it to their client instead of a bare 500
            return Reply(status=500, error_message=f"the fake provider's default() raised {exc!r}")

    def new_ids(self, reply: Reply) -> tuple[str, list[str]]:
        """A completion id, and an id for each of `reply`'s tool calls that has none of its own."""
        with self._lock:
            completion_id = f"chatcmpl-fake{next(self._ids)}"
            call_ids = [call.id or f"call_{next(self._call_ids)}" for call in reply.tool_calls]
        return completion_id, call_ids

    def _pop(self, model: str, *, shared: bool = True) -> QueuedReply | None:
        with self._lock:
            queue = self._model_queues.get(scenario_key(model))
            if queue:
                return queue.popleft()
            return self._queue.popleft() if self._queue and shared else None


def is_embedding(record: RecordedRequest) -> bool:
    """An embeddings request takes only replies queued for its model: the shared queue is the chats', whose
    next reply a search's embedding (made before the model is called) must not take."""
    return record.path.endswith("/embeddings")
