"""How the loopback fake provider writes a `Reply` on the wire: an error, a whole JSON body, or an SSE
stream, paced, stalled or cut off as the reply asks."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from yao_agent.testing.fake_scenarios import STAMP, JsonObject, RecordedRequest, Reply
from yao_agent.testing.fake_wire import completion_body, error_json, stream_events


class _Stamped(bytes):
    """An event whose STAMPs become the moment it is written."""

    def now(self) -> bytes:
        return self.replace(STAMP.encode(), f"{time.monotonic():.6f}".encode())


def _sent(event: bytes) -> bytes:
    return event.now() if isinstance(event, _Stamped) else event


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json", headers=headers)


def error_response(status: int, message: str, code: str | None = None) -> web.Response:
    return web.Response(body=error_json(message, code), status=status, content_type="application/json")


def _drop(request: web.Request) -> None:
    """Close the TCP connection without ending the HTTP body, so the client sees a broken response."""
    transport = request.transport
    if transport is not None:
        transport.close()


def _clamp(mark: int | None, count: int) -> int | None:
    return None if mark is None else min(mark, count)


async def respond(
    request: web.Request, record: RecordedRequest, reply: Reply, ids: tuple[str, list[str]]
) -> web.StreamResponse:
    """Answer `request` with `reply`; `ids`: its completion id and its tool calls' ids."""
    if reply.first_byte_delay_s:
        await asyncio.sleep(reply.first_byte_delay_s)
    if reply.is_error:
        headers = {} if reply.retry_after is None else {"retry-after": f"{reply.retry_after:g}"}
        return json_response(reply.error_body(), reply.status, headers)
    completion_id, call_ids = ids
    meta: JsonObject = {"completion_id": completion_id, "model": record.model, "created": int(time.time())}
    if not record.stream:
        return await _respond_whole(request, reply, completion_body(reply, call_ids=call_ids, **meta))
    events = stream_events(reply, call_ids=call_ids, include_usage=record.include_usage, **meta)
    return await _respond_stream(request, reply, events, completion_id)


async def _respond_whole(request: web.Request, reply: Reply, body: JsonObject) -> web.StreamResponse:
    if reply.drop_after is not None:
        _drop(request)
        return web.Response()  # aiohttp finds the connection closed and sends nothing
    if reply.stall_after is not None:
        await asyncio.sleep(reply.stall_s)
    return json_response(body, headers={"x-request-id": f"req_{body['id']}"})


async def _respond_stream(
    request: web.Request, reply: Reply, events: list[bytes], completion_id: str
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "x-request-id": f"req_{completion_id}",
        }
    )
    await response.prepare(request)
    if reply.stamp:
        events = [_Stamped(event) for event in events]
    if not (reply.delay_s or reply.stall_after is not None or reply.drop_after is not None):
        await response.write_eof(b"".join(map(_sent, events)))  # the common case: the whole body in one write
        return response
    stall_at, drop_at = _clamp(reply.stall_after, len(events)), _clamp(reply.drop_after, len(events))
    sent = 0
    for mark in sorted({mark for mark in (stall_at, drop_at, len(events)) if mark is not None}):
        await _write_events(response, events, sent, mark, reply.delay_s)
        sent = mark
        if mark == stall_at:
            await asyncio.sleep(reply.stall_s)
        if mark == drop_at:
            _drop(request)
            return response
    await response.write_eof()
    return response


async def _write_events(response: web.StreamResponse, events: list[bytes], start: int, stop: int, delay: float) -> None:
    """Write events[start:stop]: in one write when there is no pacing, else one per `delay` seconds."""
    if not delay:
        if stop > start:
            await response.write(b"".join(map(_sent, events[start:stop])))
        return
    for index in range(start, stop):
        if index:
            await asyncio.sleep(delay)
        await response.write(_sent(events[index]))
