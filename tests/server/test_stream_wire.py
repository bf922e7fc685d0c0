"""A stream over a real connection, where the run's own side writes the frames while the response waits
(sse.relayed): each piece the model sends goes out as it comes, in order, whole, and a client that
leaves still cancels the run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.servers import Live
from yao_agent.identity import Identity
from yao_agent.testing import FakeProvider, Reply

ALICE = Identity("alice")
ONE = [{"role": "user", "content": "hi"}]
WAIT = 30.0
ROUTES = [("/api/assistants/chat/runs", {"messages": ONE}),
          ("/v1/chat/completions", {"model": "chat", "messages": ONE, "stream": True}),
          ("/v1/messages", {"model": "chat", "messages": ONE, "max_tokens": 100, "stream": True}),
          ("/v1/responses", {"model": "chat", "input": "hi", "stream": True})]  # fmt: skip


def texts(path: str, events: list[dict[str, Any]]) -> list[str]:
    """The pieces of text a route's events carry, in order."""
    out: list[str] = []
    for event in events:
        if path.startswith("/api/") and event.get("type") == "message_delta" and event.get("text"):
            out.append(event["text"])
        elif path == "/v1/chat/completions" and event.get("choices"):
            out.append(event["choices"][0]["delta"].get("content") or "")
        elif event.get("type") in ("content_block_delta", "response.output_text.delta"):
            out.append(event["delta"]["text"] if path == "/v1/messages" else event["delta"])
    return [t for t in out if t]


@pytest.mark.parametrize(("path", "body"), ROUTES)
async def test_each_piece_goes_out_as_it_comes_and_the_stream_ends_whole(
    live: Live, provider: FakeProvider, path: str, body: dict[str, Any]
) -> None:
    provider.enqueue(Reply(text="one two three four five six", chunk_size=3, delay_s=0.02))
    events: list[Any] = []
    async with live.client() as client, client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
            elif line == "data: [DONE]":
                events.append("[DONE]")
    said = [e for e in events if e != "[DONE]"]
    assert texts(path, said) == ["one", " tw", "o t", "hre", "e f", "our", " fi", "ve ", "six"]
    last = {"/api/assistants/chat/runs": ("status", "completed"), "/v1/messages": ("type", "message_stop"),
            "/v1/responses": ("type", "response.completed")}  # fmt: skip
    if path == "/v1/chat/completions":
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "stop"
    else:
        key, value = last[path]
        assert events[-1][key] == value


@pytest.mark.parametrize(("path", "body"), ROUTES[:2])
async def test_a_client_leaving_mid_stream_cancels_the_run(
    live: Live, provider: FakeProvider, path: str, body: dict[str, Any]
) -> None:
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02))  # 8 s, unless cancelled
    async with live.client() as client, client.stream("POST", path, json=body) as response:
        seen = 0
        async for line in response.aiter_lines():
            seen += '"z"' in line or '"text":"z"' in line
            if seen == 5:
                break
        [handle] = live.runs.process.active.values()
    await asyncio.wait_for(handle.wait(), WAIT)
    run = await live.rt.store.latest_run(ALICE, handle.state.chat_id)
    assert run is not None and (run.status, run.reason) == ("cancelled", "cancelled")
