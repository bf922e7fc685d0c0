"""`POST /api/chats/{id}/resume` of a run cancelled mid-reply continues the cut reply (pipeline/cut.py), over a
real uvicorn and the loopback fake provider: the provider is asked to go on from the cut text, the stream
names the message it `continues` and sends only the new text, and `GET /api/chats/{id}/messages` shows the
stored message with `continues` — on SQLite and PostgreSQL (the field is kept in a JSON column)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.servers import Live, sse
from yao_agent.pipeline.llm import RESUME_PROMPT
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database keeps

ANSWER = "Paris is the capital of France, and its largest city by far."


async def test_a_cancelled_reply_resumed_over_http_goes_on_where_it_stopped(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text=ANSWER, chunk_size=5, delay_s=0.05))
    body = {"messages": [{"role": "user", "content": "capital of France?"}]}
    async with live.client() as client, client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
        chat_id = response.headers["x-chat-id"]
        first: list[dict[str, Any]] = []
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                first.append(json.loads(line[6:]))
                if first[-1]["type"] == "message_delta" and [e["type"] for e in first].count("message_delta") == 3:
                    assert (await client.post(f"/api/chats/{chat_id}/cancel")).json() == {"cancelled": 1}
    assert first[-1]["reason"] == "cancelled"
    await provider.wait_for_disconnects(1)
    async with live.client() as client:
        [_, cut] = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        assert cut["status"] == "incomplete" and ANSWER.startswith(cut["content"]) and "continues" not in cut
        rest = ANSWER[len(cut["content"]) :]
        provider.enqueue(Reply(text=rest, chunk_size=7))
        async with client.stream("POST", f"/api/chats/{chat_id}/resume") as response:
            events = await sse(response)
        stored = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        provider.enqueue(Reply(text="Yes, Paris."))
        again = {"messages": [{"role": "user", "content": "sure?"}], "chat_id": chat_id}
        async with client.stream("POST", "/api/assistants/chat/runs", json=again) as response:
            assert (await sse(response))[-1]["status"] == "completed"
    assert (events[-1]["status"], events[-1]["reason"]) == ("completed", "completed")
    asked = provider.requests[-2].messages
    assert asked[-2:] == [{"role": "assistant", "content": cut["content"]}, {"role": "user", "content": RESUME_PROMPT}]
    [start] = [e for e in events if e["type"] == "message_start" and e["kind"] == "text"]
    assert start["continues"] == cut["message_id"] != start["message_id"]
    said = "".join(e["text"] for e in events if e["type"] == "message_delta" and e["message_id"] == start["message_id"])
    assert said == rest  # the page appends it to the cut text it shows
    [end] = [e for e in events if e["type"] == "message_end" and e["kind"] == "text"]
    assert (end["content"], end["status"]) == (ANSWER, "completed")
    assert [(m["role"], m["status"], m["content"], m.get("continues")) for m in stored] == [
        ("user", "completed", "capital of France?", None),
        ("assistant", "incomplete", cut["content"], None),  # kept, never deleted
        ("assistant", "completed", ANSWER, cut["message_id"]),
    ]
    assert stored[2]["message_id"] == start["message_id"]
    later = provider.requests[-1].messages
    assert [m for m in later if m["role"] == "assistant"] == [{"role": "assistant", "content": ANSWER}]
    assert json.dumps(later).count(cut["content"]) == 1  # the text once: the fragment is never sent again
