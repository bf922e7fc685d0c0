"""The Anthropic Messages door, `POST /v1/messages`, driven by the official `anthropic` client: a message
whole and streamed, the system prompt, images, usage, a chat continued, and errors the client raises as
its own exception classes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam
from pydantic import BaseModel

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

ALICE = Identity("alice")
HI: list[MessageParam] = [{"role": "user", "content": "hi"}]
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def client_of(live: Live, who: str = "alice", **extra: Any) -> anthropic.AsyncAnthropic:
    """The official client as `who`, its key sent as x-api-key, without automatic retries."""
    return anthropic.AsyncAnthropic(base_url=live.url, api_key=live.tokens[who], max_retries=0, **extra)


@pytest.fixture
async def seeing(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server whose model reads images."""
    files = server_files(provider.base_url)
    files["connectors/fake/model.yml"] += "capabilities: {vision: true}\n"
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        yield served


async def test_a_message_whole_with_the_system_prompt_and_usage(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Hello from the assistant."))
    async with client_of(live) as client:
        raw = await client.messages.with_raw_response.create(
            model="chat", max_tokens=300, system="Answer briefly.", messages=HI, stop_sequences=["END"],
            metadata={"user_id": "bob"}, extra_body={"temperature": 0.5},  # (this client no longer names it)
        )  # fmt: skip
    answer = await raw.parse()
    assert [(b.type, getattr(b, "text", None)) for b in answer.content] == [("text", "Hello from the assistant.")]
    assert (answer.role, answer.model, answer.stop_reason, answer.stop_sequence) == (
        "assistant",
        "chat",
        "end_turn",
        None,
    )
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (11, 7)
    assert answer.id.startswith("msg_")
    sent = provider.requests[0].body
    assert (sent["max_tokens"], sent["temperature"], sent["stop"]) == (300, 0.5, ["END"])
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user"]  # the assistant's, then the client's
    assert sent["messages"][1]["content"] == "Answer briefly."
    # metadata.user_id is no identity: the chat is alice's, whose key it was.
    chat_id = raw.headers["x-chat-id"]
    assert [m.role for m in await live.rt.store.history(ALICE, chat_id)] == ["system", "user", "assistant"]


async def test_a_streamed_message_sends_the_events_the_client_assembles(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Streaming works fine.", chunk_size=4), Reply(text="Raw events."))
    async with client_of(live) as client:
        async with client.messages.stream(model="chat", max_tokens=100, messages=HI) as stream:
            pieces = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
        events = [event async for event in await client.messages.create(
            model="chat", max_tokens=100, messages=HI, stream=True)]  # fmt: skip
    assert len(pieces) > 1 and "".join(pieces) == "Streaming works fine."
    assert [getattr(b, "text", None) for b in final.content] == ["Streaming works fine."]
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == ("end_turn", 11, 7)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    assert set(kinds[2:-3]) == {"content_block_delta"}


async def test_the_stream_carries_its_event_names_and_a_ping(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="ok"))
    ask = {"model": "chat", "max_tokens": 50, "messages": HI, "stream": True}
    async with live.client() as http:
        response = await http.post("/v1/messages", json=ask)
    assert response.headers["content-type"].startswith("text/event-stream") and response.headers["x-chat-id"]
    names = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    datas = [json.loads(line[6:])["type"] for line in response.text.splitlines() if line.startswith("data: ")]
    assert names == datas
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]  # fmt: skip


async def test_system_blocks_and_images_reach_the_model(seeing: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="A pixel."))
    picture: MessageParam = {"role": "user", "content": [
        {"type": "text", "text": "What are these?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
        {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.png"}},
    ]}  # fmt: skip
    async with client_of(seeing) as client:
        answer = await client.messages.create(
            model="chat", max_tokens=100, messages=[picture],
            system=[{"type": "text", "text": "Be precise."},
                    {"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
        )  # fmt: skip
    assert [getattr(b, "text", None) for b in answer.content] == ["A pixel."]
    system, user = provider.requests[0].messages[1:]
    assert system == {"role": "system", "content": [{"type": "text", "text": "Be precise."},
                                                    {"type": "text", "text": "Be kind."}]}  # fmt: skip
    assert user["content"] == [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}},
    ]


async def test_a_second_turn_continues_the_chat_and_another_tenant_cannot(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Paris."), Reply(text="About 2 million."))
    async with client_of(live) as client:
        first = await client.messages.with_raw_response.create(
            model="chat", max_tokens=100, messages=[{"role": "user", "content": "Capital of France?"}])  # fmt: skip
        chat_id = first.headers["x-chat-id"]
        conversation: list[MessageParam] = [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Paris."}]},
            {"role": "user", "content": "How many live there?"},
        ]
        second = await client.messages.with_raw_response.create(
            model="chat", max_tokens=100, messages=conversation, extra_headers={"X-Chat-Id": chat_id}
        )
    assert second.headers["x-chat-id"] == chat_id
    assert [getattr(b, "text", None) for b in (await second.parse()).content] == ["About 2 million."]
    said = [(m["role"], m["content"]) for m in provider.requests[1].messages[1:]]
    assert said == [("user", "Capital of France?"), ("assistant", "Paris."), ("user", "How many live there?")]
    history = await live.rt.store.history(ALICE, chat_id)
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]  # nothing stored twice
    async with client_of(live, "bob") as bob:
        with pytest.raises(anthropic.NotFoundError) as hidden:
            await bob.messages.create(model="chat", max_tokens=100, messages=HI, extra_headers={"X-Chat-Id": chat_id})
    assert hidden.value.type == "not_found_error" and len(provider.requests) == 2


async def test_the_key_comes_as_x_api_key_or_as_a_bearer_token(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="with a bearer token"))
    async with anthropic.AsyncAnthropic(base_url=live.url, auth_token=live.tokens["alice"], max_retries=0) as client:
        answer = await client.messages.create(model="chat", max_tokens=100, messages=HI)
    assert [getattr(b, "text", None) for b in answer.content] == ["with a bearer token"]
    async with anthropic.AsyncAnthropic(base_url=live.url, api_key="ya_not-a-token", max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await client.messages.create(model="chat", max_tokens=100, messages=HI)
    assert refused.value.status_code == 401 and refused.value.type == "authentication_error"
    assert refused.value.body == {"type": "error", "error": {"type": "authentication_error",
        "message": "invalid or revoked token", "details": {"error_code": "unauthorized"}}}  # fmt: skip
    async with httpx.AsyncClient(base_url=live.url) as anonymous:
        missing = await anonymous.post("/v1/messages", json={"model": "chat", "max_tokens": 1, "messages": HI})
    assert missing.status_code == 401 and "x-api-key" in missing.json()["error"]["message"]


async def test_errors_reach_the_client_as_its_own_exception_classes(live: Live, provider: FakeProvider) -> None:
    async with client_of(live) as client:
        with pytest.raises(anthropic.NotFoundError) as unknown:
            await client.messages.create(model="nobody", max_tokens=100, messages=HI)
        with pytest.raises(anthropic.BadRequestError) as tooled:
            await client.messages.create(model="chat", max_tokens=100, messages=HI, tools=[
                {"type": "web_search_20250305", "name": "web_search"}])  # fmt: skip
        with pytest.raises(anthropic.BadRequestError) as wrong_block:
            document: Any = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
            await client.messages.create(model="chat", max_tokens=100,
                                         messages=[{"role": "user", "content": [document]}])  # fmt: skip
        provider.enqueue(Reply(status=500, error_message="upstream down"))
        with pytest.raises(anthropic.InternalServerError) as failed:
            await client.messages.create(model="chat", max_tokens=100, messages=HI)
    assert (unknown.value.status_code, unknown.value.type) == (404, "not_found_error")
    assert tooled.value.type == "invalid_request_error"
    assert "tools[0].type: 'web_search_20250305': Anthropic's server tools" in str(tooled.value.message)
    assert "messages[0].content[0].type: 'document' is not supported" in str(wrong_block.value.message)
    assert (failed.value.status_code, failed.value.type) == (502, "api_error")
    assert failed.value.error_code == "model_error" and failed.value.response.headers.get("x-should-retry") is None
    async with live.client() as http:
        no_limit = await http.post("/v1/messages", json={"model": "chat", "messages": HI})
        too_big = await http.post("/v1/messages", json={"model": "chat", "max_tokens": 1, "messages": [
            {"role": "user", "content": "x" * 70_000}]})  # fmt: skip
    assert no_limit.status_code == 400 and no_limit.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens: required" in no_limit.json()["error"]["message"]
    assert too_big.status_code == 413 and too_big.json()["error"]["type"] == "request_too_large"


async def test_a_failure_mid_stream_is_an_error_event(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="The answer is cut", chunk_size=4, drop_after=3))
    seen: list[str] = []
    async with client_of(live) as client:
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with client.messages.stream(model="chat", max_tokens=100, messages=HI) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
    assert "".join(seen) == "The answer is cut"[:8]
    assert failed.value.type == "api_error" and failed.value.error_code == "model_error"


class Forecast(BaseModel):
    city: str
    celsius: float


async def test_parse_gets_the_typed_answer_by_the_output_format(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="```json\n" + json.dumps({"city": "Lima", "celsius": 19}) + "\n```"))
    async with client_of(live) as client:
        answer = await client.messages.parse(model="chat", max_tokens=200, messages=HI, output_format=Forecast)
    assert answer.parsed_output == Forecast(city="Lima", celsius=19)
    sent = provider.requests[0].body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["required"] == ["city", "celsius"]
