"""The openai engine reads the provider's server-sent events itself: the shapes real providers send."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import cast

import pytest
from aiohttp import StreamReader, web

from tests.support.connectors import assemble, drain, fake_connector
from yao_agent.connectors.deltas import TextDelta, Usage
from yao_agent.connectors.openai_wire import lines
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply


def chunk(text: str = "", finish: str | None = None) -> str:
    delta = {"content": text} if text else {}
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


@pytest.fixture
async def raw_provider() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback provider that answers every request with the next body in `bodies`, in small writes."""
    bodies: list[bytes] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = bodies.pop(0)
        for start in range(0, len(body), 7):  # events split across reads, as on a real network
            await response.write(body[start : start + 7])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1", bodies
    finally:
        await runner.cleanup()


async def test_events_with_comments_several_data_lines_and_no_final_blank_line(
    raw_provider: tuple[str, list[bytes]],
) -> None:
    url, bodies = raw_provider
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})
    split = chunk("b").replace('"content"', '\n"content"')  # one event, its JSON over two data lines
    bodies.append(
        f": keep-alive\n\ndata: {chunk('a')}\n\nevent: message\ndata: {split.replace(chr(10), chr(10) + 'data: ')}\n\n"
        f"data:{chunk('c', 'stop')}\n\ndata: {usage}\n\ndata: [DONE]".encode()
    )
    events = await drain([fake_connector(url)])
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["a", "b", "c"]
    assert assemble(events).finish == "stop"
    assert Usage(4, 2, 6) in events


async def test_an_error_event_before_any_text_is_a_retryable_provider_error(
    raw_provider: tuple[str, list[bytes]],
) -> None:
    url, bodies = raw_provider
    bodies.append(b'data: {"error": {"message": "overloaded, try later", "type": "server_error"}}\n\n')
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(url)])
    assert caught.value.kind == "server" and caught.value.retryable
    assert "overloaded, try later" in str(caught.value)


async def test_an_error_event_after_text_ends_the_reply_incomplete(raw_provider: tuple[str, list[bytes]]) -> None:
    url, bodies = raw_provider
    bodies.append(f'data: {chunk("Hel")}\n\ndata: {{"error": {{"message": "lost the thread"}}}}\n\n'.encode())
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(url)])
    assert caught.value.kind == "incomplete" and not caught.value.retryable
    assert "lost the thread" in str(caught.value)


async def test_an_event_that_is_not_json_is_a_clear_error(raw_provider: tuple[str, list[bytes]]) -> None:
    url, bodies = raw_provider
    bodies.append(f"data: {chunk('ok')}\n\ndata: {{not json\n\n".encode())
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(url)])
    assert caught.value.kind == "incomplete"
    assert "not JSON" in str(caught.value)


class Reads:
    """A body arriving in the given reads (what `lines` asks aiohttp's stream for)."""

    def __init__(self, body: bytes, cuts: list[int]) -> None:
        bounds = [0, *cuts, len(body)]
        self.reads = [body[a:b] for a, b in itertools.pairwise(bounds)]

    async def readany(self) -> bytes:
        return self.reads.pop(0) if self.reads else b""


async def test_lines_end_at_cr_lf_or_crlf_wherever_the_reads_cut_them() -> None:
    body = "data: é1\r\n\r\ndata: 2\r\rdata: 3\n\ndata: 4\r\n\u2028x\r\nlast".encode()
    expected = ["data: é1", "", "data: 2", "", "data: 3", "", "data: 4", "\u2028x", "last"]
    for cut in range(1, len(body)):
        for other in (cut + 1, len(body)):
            got = [line async for read in lines(cast(StreamReader, Reads(body, [cut, other]))) for line in read]
            assert got == expected, (cut, other)


async def test_a_body_that_ends_with_a_cr_ends_its_last_line() -> None:
    got = [line async for read in lines(cast(StreamReader, Reads(b"data: 1\r\r", [8]))) for line in read]
    assert got == ["data: 1", ""]


async def test_a_head_then_silence_times_out_before_any_text() -> None:
    async with FakeProvider() as provider:
        provider.enqueue(Reply(text="late", stall_after=0, stall_s=3))  # the head goes out, then nothing
        with pytest.raises(ModelError) as caught:
            await drain([fake_connector(provider.base_url, timeout_s=0.3)])
    assert (caught.value.kind, caught.value.retryable) == ("timeout", True)
    assert "no chunk within 0.3 s" in str(caught.value)
