# The SDK types `Response.output` as a union of every item kind (tool calls, reasoning, ...): these tests read
# message items, which the assertions check; narrowing each one for the type checker would hide what is tested.
# pyright: reportAttributeAccessIssue=false, reportUnknownMemberType=false, reportOptionalSubscript=false
# pyright: reportUnknownArgumentType=false
"""The OpenAI Responses API (`/v1/responses`) as the official `openai` client uses it against a live server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from pydantic import BaseModel

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

ALICE = Identity("alice")


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """The server of the other tests, whose model also reads images."""
    files = server_files(provider.base_url)
    files["connectors/fake/model.yml"] += "capabilities: {vision: true}\n"
    async with running(make_runtime(tmp_path / "app", store, files), 64 * 1024) as served:
        yield served


def bob_client(live: Live) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["bob"], max_retries=0)


async def test_a_text_input_answers_a_response(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Hello there", usage={"prompt_tokens": 7, "completion_tokens": 2}))
    async with openai_client(live) as client:
        answer = await client.responses.create(model="chat", input="hi", temperature=0.5, max_output_tokens=50,
                                               store=False)  # fmt: skip
        kept = await client.responses.retrieve(answer.id)  # store: false still keeps the run (see http.md)
    assert kept.output_text == "Hello there" and answer.store is False
    body = provider.requests[0].body
    assert (body["temperature"], body["max_tokens"]) == (0.5, 50)
    assert answer.object == "response" and answer.status == "completed" and answer.model == "chat"
    assert answer.output_text == "Hello there"
    [item] = answer.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert answer.id.startswith("resp_") and answer.previous_response_id is None
    assert answer.usage is not None
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.total_tokens) == (7, 2, 9)
    assert provider.requests[0].messages[-1] == {"role": "user", "content": "hi"}


async def test_items_and_instructions_become_the_runs_messages(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Paris"))
    picture = "data:image/png;base64,iVBORw0KGgo="
    async with openai_client(live) as client:
        answer = await client.responses.create(
            model="chat",
            instructions="be brief",
            input=[
                {"role": "developer", "content": "answer in English"},
                {"role": "user", "content": "Which city?"},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "Which one?", "annotations": []}]},
                {"role": "user", "content": [{"type": "input_text", "text": "This one"},
                                             {"type": "input_image", "image_url": picture, "detail": "low"}]},
            ],
        )  # fmt: skip
    assert answer.output_text == "Paris" and answer.instructions == "be brief"
    given = provider.requests[0].messages
    assert {"role": "system", "content": "be brief"} in given
    assert given[-4:] == [
        {"role": "system", "content": "answer in English"},
        {"role": "user", "content": "Which city?"},
        {"role": "assistant", "content": "Which one?"},
        {"role": "user", "content": [{"type": "text", "text": "This one"},
                                     {"type": "image_url", "image_url": {"url": picture, "detail": "low"}}]},
    ]  # fmt: skip


async def test_a_streamed_response_as_the_sdk_parses_it(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="one two three", chunk_size=4), Reply(text="again"))
    async with openai_client(live) as client:
        async with client.responses.stream(model="chat", input="count") as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        raw = await client.responses.create(model="chat", input="more", stream=True)
        events = [event async for event in raw]
    assert final.output_text == "one two three" and final.status == "completed"
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds.count("response.output_text.delta") == 4  # the model's pieces, as they came
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "again"
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "again"
    assert done.response.id.startswith("resp_")


async def test_previous_response_id_continues_the_chat_at_once(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="I am Ada"), Reply(text="You are Bo"), Reply(text="Bo, yes"))
    async with openai_client(live) as client:
        first = await client.responses.create(model="chat", input="who are you?")
        async with client.responses.stream(model="chat", input="and me? I'm Bo", previous_response_id=first.id) as s:
            second = await s.get_final_response()
        third = await client.responses.create(model="chat", input="sure?", previous_response_id=second.id)
        with pytest.raises(openai.ConflictError) as older:
            await client.responses.create(model="chat", input="branch", previous_response_id=first.id)
    assert third.previous_response_id == second.id and third.output_text == "Bo, yes"
    said = [(m["role"], m["content"]) for m in provider.requests[2].messages if m["role"] != "system"]
    assert said == [("user", "who are you?"), ("assistant", "I am Ada"), ("user", "and me? I'm Bo"),
                    ("assistant", "You are Bo"), ("user", "sure?")]  # fmt: skip
    assert first.id in older.value.message and third.id in older.value.message  # the one to continue
    assert len(provider.requests) == 3
    history = await live.rt.store.history(ALICE, first.id.partition(".")[2])
    assert [m.role for m in history] == ["user", "assistant"] * 3


async def test_a_response_is_read_back_by_its_id(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="stored", usage={"prompt_tokens": 3, "completion_tokens": 1}))
    async with openai_client(live) as client:
        made = await client.responses.create(model="chat", input="keep this")
        read = await client.responses.retrieve(made.id)
        async with bob_client(live) as bob:
            with pytest.raises(openai.NotFoundError):
                await bob.responses.retrieve(made.id)
            with pytest.raises(openai.NotFoundError):
                await bob.responses.create(model="chat", input="mine now", previous_response_id=made.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve("resp_nothing")
    assert (read.id, read.output_text, read.status, read.model) == (made.id, "stored", "completed", "chat")
    assert read.usage is not None and read.usage.total_tokens == 4
    assert [i.id for i in read.output] == [i.id for i in made.output]
    assert len(provider.requests) == 1  # bob's continuation never ran


class Joke(BaseModel):
    setup: str
    punchline: str


async def test_text_format_json_schema_is_the_runs_output(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='```json\n{"setup": "Why?", "punchline": "Because."}\n```'),
                     Reply(text='{"no": 1}'), Reply(text='{"setup": "A", "punchline": "B"}'))  # fmt: skip
    async with openai_client(live) as client:
        parsed = await client.responses.parse(model="chat", input="a joke", text_format=Joke)
        async with client.responses.stream(model="chat", input="another", text_format=Joke) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        read = await client.responses.retrieve(final.id)
        first = await client.responses.retrieve(parsed.id)
    assert parsed.output_parsed == Joke(setup="Why?", punchline="Because.")
    asked = provider.requests[0].body["response_format"]
    assert asked["type"] == "json_schema" and asked["json_schema"]["name"] == "Joke"
    assert set(asked["json_schema"]["schema"]["properties"]) == {"setup", "punchline"}
    assert deltas == ['{"setup": "A", "punchline": "B"}']  # the wrong answer, corrected, never reached the client
    assert final.output_parsed == Joke(setup="A", punchline="B")
    assert [i.content[0].text for i in read.output] == ['{"setup": "A", "punchline": "B"}']  # corrected only
    assert first.output_text == '{"setup": "Why?", "punchline": "Because."}'  # without its fence


@pytest.mark.parametrize(
    ("fields", "param", "said"),
    [
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools", "only function tools"),
        ({"input": [{"type": "function_call_output", "output": "4"}]}, "input", "input[0].call_id"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input", "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input", "input_file"),
        ({"background": True}, "background", "background"),
        ({"conversation": "conv_1"}, "conversation", "previous_response_id"),
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"\r": []}, "\r", '"\\r": '),  # a name with no words of its own is quoted, never an empty message
        ({"text": {"format": {"type": "json_schema", "name": "j", "schema": {"type": "nope"}}}}, "text.format",
         "text.format.schema"),
    ],
)  # fmt: skip
async def test_what_cannot_be_honoured_is_a_400_naming_it(
    live: Live, provider: FakeProvider, fields: dict[str, Any], param: str, said: str
) -> None:
    async with live.client() as client:
        answer = await client.post("/v1/responses", json={"model": "chat", "input": "hi", **fields})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and said in error["message"], error
    assert provider.requests == []


async def test_a_failed_run_is_an_error_streamed_or_not(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(status=500, error_message="down"), Reply(status=500, error_message="down"))
    async with openai_client(live) as client:
        with pytest.raises(openai.APIStatusError) as failed:
            await client.responses.create(model="chat", input="hi")
        stream = await client.responses.create(model="chat", input="hi", stream=True)
        events = [event async for event in stream]
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="nobody", input="hi")
    assert failed.value.status_code == 502 and failed.value.code == "model_error"
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None and events[-1].response.error.code == "model_error"


async def test_a_failed_response_reads_back_failed(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(status=500, error_message="down"))
    async with live.client() as client:
        stream = await client.post("/v1/responses", json={"model": "chat", "input": "hi", "stream": True})
        frames = [json.loads(line[6:]) for line in stream.text.splitlines() if line.startswith("data: ")]
        read = await client.get(f"/v1/responses/{frames[-1]['response']['id']}")
    assert read.status_code == 200 and read.json()["status"] == "failed"
    assert read.json()["error"]["code"] == "model_error"


# --- the OpenAI Agents SDK, whose default model is the Responses API ----------------------------------


class City(BaseModel):
    name: str
    country: str


async def test_the_agents_sdk_runs_an_agent_on_its_default_model(live: Live, provider: FakeProvider) -> None:
    set_tracing_disabled(True)  # (its traces would go to OpenAI's servers)
    provider.enqueue(Reply(text="Bonjour!"), Reply(text='{"name": "Paris", "country": "France"}'),
                     Reply(text="streamed hello"))  # fmt: skip
    async with openai_client(live) as client:
        model = OpenAIResponsesModel(model="chat", openai_client=client)
        plain = await Runner.run(Agent(name="greeter", instructions="greet in French", model=model), "hi")
        typed = Agent(name="geo", instructions="name a city", model=model, output_type=City)
        found = await Runner.run(typed, "the capital of France?")
        streamed = Runner.run_streamed(Agent(name="greeter", model=model), "hello")
        async for _ in streamed.stream_events():
            pass
    assert plain.final_output == "Bonjour!"
    assert {"role": "system", "content": "greet in French"} in provider.requests[0].messages
    assert found.final_output == City(name="Paris", country="France")
    assert provider.requests[1].body["response_format"]["type"] == "json_schema"
    assert streamed.final_output == "streamed hello"
