"""The HTTP/1.1 connection as `serve` runs it: uvicorn's h11 protocol, with the deadlines it lacks.

uvicorn (0.54) closes a connection only when it idles between two requests: one that never sends a
byte, or half a request head, or keeps trickling the body of a request already answered, stays open
for good, and a few thousand of them use up the process's file descriptors. Here each phase of a
connection has a deadline, which bytes arriving within the phase never extend (a head sent a byte at
a time is cut as surely as a silent one):

* HEAD — waiting for a request head: `header_timeout_s`, from the connection's opening or, after a
  response, from the next request's first byte;
* IDLE — between two requests: `keep_alive_s` (uvicorn's own timer is replaced by this one);
* LEFTOVER — the rest of a body the app answered without reading (a 401, a 413, a 503):
  `body_timeout_s`, then the connection closes (closing at once could reset it before the client
  has read the answer);
* none while a request is in progress: its body is bounded by the app (`limits.RequestBody`) and
  its response may stream for as long as the run lasts.

A connection beyond `max_connections` is closed as it is accepted, so the process keeps file
descriptors for the connections it serves and for its own (the database, MCP servers).

A streamed response's pieces (SSE frames) are framed here, as HTTP/1.1 chunks, without h11: for a
piece of a chunked body h11 only checks that the response is still sending its body and writes the
chunk's length, the piece and CRLF, but its event objects and state machine cost more than the rest
of uvicorn's send (measured: ~9 µs of a streamed chunk's ~130). Anything else goes through h11. The
same writer is left in the request's scope (`sse.WRITE_KEY`), for a stream to write pieces without a
coroutine, from the run's side (sse.relayed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from types import CoroutineType
from typing import Any, ClassVar, Literal, Protocol, cast

import h11
from h11._writers import ChunkedWriter  # pyright: ignore[reportPrivateUsage]
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from yao_agent.dsl.specs import ServerSettings
from yao_agent.server.sse import WRITE_KEY

log = logging.getLogger("yao_agent.server")
Phase = Literal["head", "idle", "leftover"]
WARN_EVERY_S = 60.0  # a flood says so in the log, without a line per connection


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each phase of a connection (see the module's doc)."""

    deadlines: ClassVar[dict[Phase, float]] = {"head": 10.0, "idle": 5.0, "leftover": 30.0}
    max_connections: ClassVar[int] = 4096
    warned_at: ClassVar[float] = -WARN_EVERY_S  # when the limit was last said in the log, by any connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase: Phase | None = None
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse()
            return
        self._watch()

    def data_received(self, data: bytes) -> None:
        had = cast(RequestResponseCycle | None, self.cycle)
        super().data_received(data)
        if self.cycle is not had:  # a new request's head: its app has not run yet
            pieces = Pieces(self.cycle)
            self.cycle.send = chunking(self.cycle, pieces)
            self.cycle.scope[WRITE_KEY] = pieces  # pyright: ignore[reportGeneralTypeIssues]
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._unset_keepalive_if_required()  # the IDLE deadline stands for uvicorn's keep-alive timer
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def current_phase(self) -> Phase | None:
        cycle = cast(RequestResponseCycle | None, self.cycle)  # (None until the first request's head is in)
        if cycle is not None and not cycle.response_complete:
            return None  # a request in progress
        if self.conn.their_state is h11.SEND_BODY:
            return "leftover"
        if self.conn.their_state is not h11.IDLE:
            return None  # closing: nothing more will be read
        if cycle is None or self.conn.trailing_data[0]:
            return "head"  # a new connection, or the first bytes of the next request
        return "idle"

    def _watch(self) -> None:
        """Arm the deadline of the phase the connection is now in, unless it is still the same one."""
        phase = None if self.transport.is_closing() else self.current_phase()
        if phase == self.phase:
            return
        self._disarm()
        self.phase = phase
        if phase is not None:
            self.deadline = self.loop.call_later(self.deadlines[phase], self._expire)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.phase = None

    def _expire(self) -> None:
        self.deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self) -> None:
        now = time.monotonic()
        if now - GuardedH11.warned_at >= WARN_EVERY_S:
            GuardedH11.warned_at = now
            log.warning("%d connections open: closing new ones (server.max_connections)", self.max_connections)
        self.transport.close()


class Sender(Protocol):
    """A cycle's `send`, as its own method is."""

    def __call__(self, message: ASGISendEvent) -> CoroutineType[Any, Any, None]: ...


class Pieces:
    """The pieces of a response's chunked body, written straight to the connection when h11 would only
    frame them: while the response sends its body, chunked, to a client that is there and keeps up."""

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self.cycle = cycle

    def writable(self) -> bool:
        cycle = self.cycle
        conn = cycle.conn
        if conn.our_state is not h11.SEND_BODY or not isinstance(getattr(conn, "_writer", None), ChunkedWriter):
            return False
        return not (cycle.response_complete or cycle.disconnected or cycle.flow.write_paused)

    def write(self, body: bytes) -> None:
        """One piece (not empty: an empty one would end the body), as h11's ChunkedWriter writes it."""
        self.cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))


def chunking(cycle: RequestResponseCycle, pieces: Pieces) -> Sender:
    """The cycle's `send`, writing a piece of a chunked body itself (see the module's doc)."""
    send = cycle.send

    async def chunked(message: ASGISendEvent) -> None:
        body = _piece(cast(Mapping[str, Any], message))
        if body is not None and pieces.writable():
            pieces.write(body)
        else:
            await send(message)

    return chunked


def _piece(message: Mapping[str, Any]) -> bytes | None:
    """The body of a message that is a piece of a body still to go on, else None."""
    body: bytes | None = message.get("body")
    if not body or not message.get("more_body") or message["type"] != "http.response.body":
        return None
    return body


def protocol(settings: ServerSettings) -> type[GuardedH11]:
    """The protocol class uvicorn makes each connection with, holding these settings."""

    class Configured(GuardedH11):
        deadlines: ClassVar[dict[Phase, float]] = {"head": settings.header_timeout_s, "idle": settings.keep_alive_s,
                     "leftover": settings.body_timeout_s}  # fmt: skip
        max_connections: ClassVar[int] = settings.max_connections

    return Configured
