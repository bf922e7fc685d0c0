"""The channel between a running run (its own task) and whoever reads its events.

The run never waits for a slow reader for long: once `high_water` events are waiting, adjacent deltas
of the same message are merged (text to text, a tool call's argument fragments to each other), so
memory stays bounded by the number of messages, not of tokens; every other event (starts, ends, tool
results, `stream_end`) is always delivered.

A reader may `tap` the channel with a way to write events at once, without waiting (a response's
connection, server/sse.py): while it waits with nothing queued, what is sent is handed to the tap from
a callback the run's task leaves behind (all the events sent before the loop runs it, in one batch),
not by waking the reader's task — whose wake-up, through the whole stack it waits in, cost more than
the write. A tap that cannot write without waiting (a slow client) declines, and the reader is woken
to write them as before.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from yao_agent.events import Event, MessageDelta

# Write these events now: False (having taken none of them) when they cannot be written without waiting.
Tap = Callable[[list[Event]], bool]


class EventChannel:
    def __init__(self, high_water: int = 256) -> None:
        self._items: deque[Event] = deque()
        # The reader waiting for more: what an asyncio.Event would do, less its own work, once per chunk.
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False  # the reader left
        self._finished = False  # the run sent its last event
        self._high_water = high_water
        self._tap: Tap | None = None
        self._tapping = False  # a callback to hand the queue to the tap is on its way

    def tap(self, tap: Tap | None) -> None:
        """While the reader waits, hand what is sent to `tap` instead of waking it (None: no more)."""
        self._tap = tap

    def send(self, event: Event) -> None:
        """Queue `event` for the reader (it never waits: see the module's doc)."""
        if self._closed:
            return  # nobody is listening any more; the run goes on and stores everything
        if len(self._items) >= self._high_water and self._merge(event):
            return
        self._items.append(event)
        waiter = self._waiter
        if self._tap is None or waiter is None or waiter.done():
            self._wake()
        elif not self._tapping:
            self._tapping = True
            waiter.get_loop().call_soon(self._to_tap)

    def _to_tap(self) -> None:
        """What was sent since the reader began to wait, to the tap; to the reader if the tap declines
        (or is gone, or the reader was woken meanwhile: it takes them in order, after this)."""
        self._tapping = False
        waiter, tap = self._waiter, self._tap
        if not self._items or waiter is None or waiter.done():
            return
        if tap is None:
            self._wake()
            return
        batch = list(self._items)
        try:
            taken = tap(batch)
        except Exception as exc:  # a bug writing them: the reader's, as if it had written them itself
            self._items.clear()
            waiter.set_exception(exc)
            return
        if taken:
            self._items.clear()
        else:
            self._wake()

    def _merge(self, event: Event) -> bool:
        last = self._items[-1] if self._items else None
        if not (isinstance(event, MessageDelta) and isinstance(last, MessageDelta)):
            return False
        if last.message_id != event.message_id:
            return False
        if event.text is not None and last.text is not None:
            self._items[-1] = replace(last, text=last.text + event.text)
            return True
        if event.text is None and last.text is None and _same_call(last, event):
            arguments = (last.arguments or "") + (event.arguments or "")
            self._items[-1] = replace(last, arguments=arguments, name=last.name or event.name,
                                      tool_call_id=last.tool_call_id or event.tool_call_id)  # fmt: skip
            return True
        return False

    def close(self) -> None:
        """No more events will be sent; readers finish what is queued."""
        self._finished = True
        self._wake()

    def abandon(self) -> None:
        """The reader left: drop what is queued and ignore later sends."""
        self._closed = True
        self._items.clear()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        """Until something is sent, or the channel closes."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            while self._items:
                yield self._items.popleft()
            if self._finished or self._closed:
                return
            await self._wait()

    async def batches(self) -> AsyncIterator[list[Event]]:
        """Everything waiting, at each wake-up: a writer that fell behind catches up in one write."""
        while True:
            if self._items:
                batch = list(self._items)
                self._items.clear()
                yield batch
                continue
            if self._finished or self._closed:
                return
            await self._wait()


def _same_call(last: MessageDelta, event: MessageDelta) -> bool:
    """Whether two fragments belong to one tool call (a provider names it once, in its first one)."""
    return (event.name is None or last.name in (None, event.name)) and (
        event.tool_call_id is None or last.tool_call_id in (None, event.tool_call_id)
    )
