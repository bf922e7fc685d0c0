"""A run's stream of server-sent events as an HTTP response, written straight to the connection.

It does what sse-starlette's EventSourceResponse did for these routes — the same headers, a comment
every `ping_s` of silence so that a proxy does not close a quiet stream, the stream cancelled when
the client leaves — for a fraction of its CPU. That one ran four tasks per response in an anyio task
group (the stream, the ping, a shutdown watcher, the client's leaving) and, for every frame, an anyio
cancel scope and a debug log call: 0.5 ms of a 5.5 ms run start and 19 µs of every chunk, measured in
one `yao-agent serve`. Here the frames are sent from the request's own task, and one more task waits
for the client to leave and pings meanwhile. (A shutdown needs no watcher: it cancels each run, and
its stream ends with it.)

A run route's frames come from `relayed`: the run's events, a batch at a time, made into frames by the
route. Once the response is under way and the stream waits for the run, the run's own side writes
them (its channel's tap, pipeline/channel.py), through the connection's writer that `serve`'s protocol
left in the scope (protocol.Pieces): the same bytes, in the same batches, without waking the
response's task — which resumed every frame of the ASGI stack it waits in, some thirty of them, and
sent the frame back out through two coroutines (with the smaller cuts of that round, ~12% of a chunk's
server CPU, measured beside the code before). A client that does not keep up is written to by the
response's task, which waits for it, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from yao_agent.base.aio import uncancel
from yao_agent.events import Event
from yao_agent.pipeline import RunHandle

PING_S = 15.0
OUTLET_KEY = "yao_agent.outlet"  # where the outermost layer (access.AccessLog) leaves the request's `Outlet`
WRITE_KEY = "yao_agent.write"  # where `serve`'s protocol leaves the connection's `Writer` (protocol.Pieces)
CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")
# As sse-starlette sends them: the connection kept open, and no buffering by a proxy (nginx).
STREAM_HEADERS = [(b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]


@dataclass
class Outlet:
    """The `send` the access layer was handed, and the body bytes its line reports. A stream's frames go
    out through it, past the send wrappers of the layers within — the framework's only note that a
    response started (the start still goes through them), the access layer's only counts — each a
    coroutine per frame (~4 µs)."""

    send: Send
    bytes: int = 0


class EventStream(Response):
    """A response of SSE frames (bytes, each one or more whole frames) from `frames`. (A Response, so that
    FastAPI sends it as it is; none of Response's own work is done.)"""

    def __init__(self, frames: AsyncIterator[bytes], headers: Mapping[str, str], ping_s: float = PING_S) -> None:
        self.frames = frames
        self.status_code = 200
        self.background = None  # (FastAPI hands a route's background tasks over here: the routes have none)
        given = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        self.raw_headers = [*given, *STREAM_HEADERS, CONTENT_TYPE]
        self.ping_s = ping_s
        self.left = False  # the client left, and the stream was cancelled for it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        stream = asyncio.current_task()
        assert stream is not None
        watch = asyncio.create_task(self._watch(receive, send, stream))
        outlet: Outlet = scope.get(OUTLET_KEY) or Outlet(send)
        out = outlet.send
        try:
            async for frame in self.frames:
                outlet.bytes += len(frame)
                await out({"type": "http.response.body", "body": frame, "more_body": True})
            watch.cancel()  # before the last message: no ping may follow it
            await asyncio.wait([watch])
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self.left or stream.cancelling() > 1:
                raise  # not (only) ours: the server's, to be seen by whoever cancelled
            uncancel()  # the client left: nobody to send the rest to
        finally:
            watch.cancel()

    async def _watch(self, receive: Receive, send: Send, stream: asyncio.Task[object]) -> None:
        """Until the client leaves (then cancel the stream), a ping after each `ping_s` without one."""
        while True:
            try:
                async with asyncio.timeout(self.ping_s):
                    message = await receive()
            except TimeoutError:
                await send(ping())
                continue
            if message["type"] == "http.disconnect":
                self.left = True
                stream.cancel()
                return


def ping() -> Message:
    """A comment line, which every SSE reader skips (sse-starlette's, with the time)."""
    return {"type": "http.response.body", "body": f": ping - {datetime.now(UTC)}\n\n".encode(), "more_body": True}


class Writer(Protocol):
    """A response's body pieces written at once, without waiting (protocol.Pieces)."""

    def writable(self) -> bool:
        """Whether a piece can be written now: the body is under way and the client keeps up."""
        ...

    def write(self, body: bytes) -> None: ...


Encode = Callable[[list[Event]], bytes]  # a batch of events as the route's frames (b"": none to send)


async def relayed(handle: RunHandle, encode: Encode, scope: Scope | None = None) -> AsyncGenerator[bytes]:
    """The run's events as frames, a body per batch that makes any, until the run ends; with the
    connection's writer in `scope`, written by the run's side while this waits (see the module's doc)."""
    channel = handle.state.out
    writer: Writer | None = scope.get(WRITE_KEY) if scope is not None else None
    if writer is not None:
        outlet: Outlet | None = scope.get(OUTLET_KEY) if scope is not None else None
        channel.tap(lambda batch: _written(writer, outlet, encode, batch))
    try:
        async with aclosing(handle.batches()) as batches:
            async for batch in batches:
                body = encode(batch)
                if body:
                    yield body
    finally:
        channel.tap(None)


def _written(writer: Writer, outlet: Outlet | None, encode: Encode, batch: list[Event]) -> bool:
    """The batch written now, as the response's task would write it; False (nothing done) if it cannot be."""
    if not writer.writable():
        return False
    body = encode(batch)
    if body:
        if outlet is not None:
            outlet.bytes += len(body)
        writer.write(body)
    return True
