"""The SSE response of the run routes, driven as the server drives it: its headers, pings, and a client leaving."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import cast

from starlette.types import Message

from yao_agent.events import MessageDelta, MessageStart, StreamEnd, to_dict, to_json
from yao_agent.pipeline import RunHandle
from yao_agent.server.openai_compat import _chunk, _Pieces  # pyright: ignore[reportPrivateUsage]
from yao_agent.server.sse import OUTLET_KEY, EventStream, Outlet
from yao_agent.shapes import UsageOut


class Connection:
    """The ASGI side of one request whose body was read: what was sent, and a way to leave."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def test_frames_go_out_as_they_come_then_the_end() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"

    conn = Connection()
    await EventStream(frames(), {"X-Chat-Id": "c1", "Cache-Control": "no-cache"})({}, conn.receive, conn.send)
    assert conn.sent[0] == {"type": "http.response.start", "status": 200, "headers": [
        (b"x-chat-id", b"c1"), (b"cache-control", b"no-cache"), (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"), (b"content-type", b"text/event-stream; charset=utf-8")]}  # fmt: skip
    assert conn.bodies() == [b"data: 1\n\n", b"data: 2\n\n", b""]
    assert conn.sent[-1]["more_body"] is False


async def test_a_quiet_stream_is_pinged_and_a_client_that_leaves_cancels_it() -> None:
    closed = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(30)  # a run with nothing to say for a while
            yield b"data: never\n\n"
        finally:
            closed.set()

    conn = Connection()
    response = asyncio.create_task(EventStream(frames(), {}, ping_s=0.05)({}, conn.receive, conn.send))
    await asyncio.sleep(0.18)
    pings = [b for b in conn.bodies() if b.startswith(b": ping - ")]
    assert len(pings) >= 2 and all(b.endswith(b"\n\n") for b in pings)
    conn.gone.set()
    await asyncio.wait_for(response, 5)  # ends without an error: the client left, nothing more to say
    assert closed.is_set() and not response.cancelled()
    assert conn.bodies()[-1].startswith(b": ping") and all(m.get("more_body", True) for m in conn.sent)


async def test_a_cancel_from_elsewhere_is_not_taken_for_the_client_leaving() -> None:
    async def frames() -> AsyncIterator[bytes]:
        await asyncio.sleep(30)
        yield b""

    conn = Connection()
    response = asyncio.create_task(EventStream(frames(), {})({}, conn.receive, conn.send))
    await asyncio.sleep(0.01)
    response.cancel()
    await asyncio.wait([response])
    assert response.cancelled()


USED: UsageOut = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "cost_usd": None, "calls": 1}


def test_a_text_delta_is_written_as_every_event_is() -> None:
    texts = ["tok ", "", 'q"b\\s\n\t\u2028é😀\ud800\x00']
    events = [MessageDelta("run_1", "msg_1", kind, text=t) for t in texts for kind in ("text", "reasoning")]
    events += [
        MessageDelta("run_1", "msg_1", "text", text="x", thread_id="th_1"),
        MessageDelta("run_1", "msg_1", "tool_call", tool_call_id="c1", name="f", arguments='{"a"'),
        MessageStart("run_1", "msg_1", "text"),
        StreamEnd("run_1", "completed", "completed", USED, 5),
    ]
    for event in events:
        generic = json.dumps(to_dict(event), ensure_ascii=False, separators=(",", ":"), default=str)
        assert to_json(event) == generic


def test_an_openai_text_chunk_is_the_json_of_the_whole_chunk() -> None:
    class Handle:
        run_id = "run_1"

    handle = cast(RunHandle, Handle())  # (all a chunk reads of it)
    for model in ("chat", 'odd "model" é'):
        pieces = _Pieces(handle, model, 1_700_000_000)
        for key in ("content", "reasoning_content"):
            for text in ("tok ", 'q"b\\s\n\u2028é😀\ud800', "\x00"):
                whole = _chunk(handle, model, 1_700_000_000, {key: text}, None)
                assert pieces.chunk(key, text) == whole


async def test_frames_go_straight_out_through_the_outlet_the_outermost_layer_left() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"

    wrapped, connection = Connection(), Connection()
    outlet = Outlet(connection.send)
    await EventStream(frames(), {})({OUTLET_KEY: outlet}, wrapped.receive, wrapped.send)
    assert [m["type"] for m in wrapped.sent] == ["http.response.start", "http.response.body"]  # the start; the end
    assert connection.bodies() == [b"data: 1\n\n"] and outlet.bytes == 9
