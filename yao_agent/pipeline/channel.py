"""The channel between a running run (its own task) and whoever reads its events.

The run never waits for a slow reader for long: once `high_water` events are waiting, adjacent deltas
of the same message are merged (text to text, a tool call's argument fragments to each other), so
memory stays bounded by the number of messages, not of tokens; every other event (starts, ends, tool
results, `stream_end`) is always delivered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import replace

from yao_agent.events import Event, MessageDelta


class EventChannel:
    def __init__(self, high_water: int = 256) -> None:
        self._items: deque[Event] = deque()
        # The reader waiting for more: what an asyncio.Event would do, less its own work, once per chunk.
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False  # the reader left
        self._finished = False  # the run sent its last event
        self._high_water = high_water

    def send(self, event: Event) -> None:
        """Queue `event` for the reader (it never waits: see the module's doc)."""
        if self._closed:
            return  # nobody is listening any more; the run goes on and stores everything
        if len(self._items) >= self._high_water and self._merge(event):
            return
        self._items.append(event)
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
