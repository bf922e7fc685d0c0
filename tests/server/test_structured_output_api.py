"""Structured output over HTTP: the official openai client's `parse` gets its object (an invalid answer is
corrected on the server first), and the native API carries the answer's value as `output`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files, sse
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

CITY = """\
name: City
output:
  schema:
    type: object
    properties: {name: {type: string}, population: {type: integer}}
    required: [name, population]
"""

# Python's `re` tries 2**n ways to match n a's and a "!" against this pattern (RE2 does not backtrack).
NAMES = """\
name: Names
output:
  schema: {type: array, items: {type: string, pattern: '^(a+)+$'}}
  retries: 1
"""


class Weather(BaseModel):
    city: str
    celsius: float


PARIS = {"city": "Paris", "celsius": 21.5}
FENCED = "```json\n" + json.dumps(PARIS) + "\n```"  # as models like to write it
ASK: Any = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """`chat` (no schema of its own), `city` and `names` (an `output.schema`), on the loopback fake provider."""
    files = {
        **server_files(provider.base_url),
        "assistants/city/assistant.yml": CITY,
        "assistants/names/assistant.yml": NAMES,
    }
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        yield served


async def test_the_official_clients_parse_gets_its_object(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text=FENCED))
    async with openai_client(live) as client:
        completion = await client.chat.completions.parse(model="chat", messages=ASK, response_format=Weather)
    message = completion.choices[0].message
    assert message.parsed == Weather(city="Paris", celsius=21.5)
    assert json.loads(message.content or "") == PARIS  # the JSON itself, without the fence
    sent = provider.requests[0].body["response_format"]
    assert (sent["type"], sent["json_schema"]["name"]) == ("json_schema", "Weather")


async def test_an_answer_that_fails_the_schema_is_corrected_before_the_client_sees_it(
    live: Live, provider: FakeProvider
) -> None:
    provider.enqueue(Reply(text='{"city": "Paris", "celsius": "warm"}'), Reply(text=json.dumps(PARIS)))
    async with openai_client(live) as client:
        completion = await client.chat.completions.parse(model="chat", messages=ASK, response_format=Weather)
    assert completion.choices[0].message.parsed == Weather(city="Paris", celsius=21.5)
    correction = provider.requests[1].messages[-1]
    assert correction["role"] == "user" and "at $.celsius: 'warm' is not of type 'number'" in correction["content"]


async def test_streamed_the_answer_comes_whole_once_valid(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Sunny, 21.5 degrees.", chunk_size=3), Reply(text=FENCED, chunk_size=3))
    async with (
        openai_client(live) as client,
        client.chat.completions.stream(model="chat", messages=ASK, response_format=Weather) as stream,
    ):
        texts = [event.delta async for event in stream if event.type == "content.delta" and event.delta]
        final = await stream.get_final_completion()
    assert texts == [json.dumps(PARIS)]  # neither the rejected answer nor the fence
    assert final.choices[0].message.parsed == Weather(city="Paris", celsius=21.5)
    assert len(provider.requests) == 2


async def test_an_answer_that_never_fits_is_a_502_naming_the_validators_words(
    live: Live, provider: FakeProvider
) -> None:
    provider.enqueue(*[Reply(text="sunny") for _ in range(3)])
    async with live.client() as client:
        response = await client.post("/v1/chat/completions", json={"model": "city", "messages": ASK})
    assert response.status_code == 502
    assert response.headers["x-should-retry"] == "false"  # a retry would run the same turns again
    error = response.json()["error"]
    assert error["type"] == "output_error"
    assert error["message"] == (
        "the final answer is not valid against the output schema after 2 corrections: "
        "the answer is not JSON: Expecting value at line 1 column 1 (expected one JSON value only, no other text)"
    )
    assert len(provider.requests) == 3


async def test_a_response_format_that_is_no_json_schema_is_a_400(live: Live, provider: FakeProvider) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "strnig"}}}
    asked: Any = {"type": "json_schema", "json_schema": {"name": "W", "schema": schema}}
    async with openai_client(live) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="chat", messages=ASK, response_format=asked)
    error: Any = caught.value.body
    assert error["param"] == "response_format"
    assert error["message"].startswith(
        "response_format.json_schema.schema.properties.city.type: not a valid JSON Schema (Draft 2020-12): "
    )
    assert provider.requests == []


async def test_the_assistants_own_schema_answers_openai_clients_too(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='{"name": "Paris", "population": 2100000}'))
    async with openai_client(live) as client:
        completion = await client.chat.completions.create(model="city", messages=ASK)
    assert json.loads(completion.choices[0].message.content or "") == {"name": "Paris", "population": 2100000}
    assert provider.requests[0].body["response_format"]["json_schema"]["name"] == "city"


async def test_native_json_and_sse_carry_the_output(live: Live, provider: FakeProvider) -> None:
    answer = {"name": "Paris", "population": 2100000}
    provider.enqueue(Reply(text="Paris has about 2.1 million people."), Reply(text=json.dumps(answer)))
    async with live.client() as client:
        response = await client.post("/api/assistants/city/runs?stream=false", json={"messages": ASK})
        assert response.status_code == 200
        body = response.json()
        assert (body["status"], body["output"]) == ("completed", answer)
        view = (await client.get(f"/api/chats/{body['chat_id']}/runs/{body['run_id']}")).json()
        assert [s["transition"] for s in view["steps"] if s["type"] == "llm"] == ["first", "output_retry"]
        provider.enqueue(Reply(text=json.dumps(answer)))
        async with client.stream("POST", "/api/assistants/city/runs", json={"messages": ASK}) as streamed:
            events = await sse(streamed)
    assert events[-1]["type"] == "stream_end" and events[-1]["output"] == answer


async def test_a_run_without_a_schema_has_no_output(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="plain"))
    async with live.client() as client:
        body = (await client.post("/api/assistants/chat/runs?stream=false", json={"messages": ASK})).json()
    assert body["status"] == "completed" and "output" not in body


class Nested:
    """An object schema with `levels` objects inside one another (2 levels of JSON each), as JSON text:
    Python's `json` cannot write it when it is deep."""

    def __init__(self, levels: int) -> None:
        self.text = '{"type":"object","properties":{"a":' * levels + '{"type":"string"}' + "}}" * levels


DEEP = "nested more than 64 levels deep (objects and arrays; expected at most 64)"
REFUSED = [
    pytest.param(
        {"type": "string", "pattern": r"^(\w+)\1$"},
        "schema.pattern: the pattern '^(\\\\w+)\\\\1$' cannot be used: invalid escape sequence: \\1: "
        "backreferences are not supported (RE2 syntax: no backreferences or lookaround)",
        id="backreference",
    ),
    pytest.param(
        {"type": "object", "patternProperties": {"^(?!_)": {"type": "string"}}},
        "schema.patternProperties: the pattern '^(?!_)' cannot be used: invalid perl operator: (?!: "
        "lookahead is not supported (RE2 syntax: no backreferences or lookaround)",
        id="lookahead",
    ),
    pytest.param(Nested(130), "schema" + ".properties.a" * 32 + f": {DEEP}", id="130-deep"),
    pytest.param(Nested(400), "schema" + ".properties.a" * 32 + f": {DEEP}", id="400-deep"),
    pytest.param(
        {"type": "string", "enum": ["x" * 1000] * 300},
        "schema: the schema is 300926 bytes of JSON, more than this server takes (262144 bytes at most)",
        id="size",
    ),
    pytest.param(
        {"type": "object", "properties": {"city": {"$ref": "https://schemas.example.com/city.json"}}},
        "schema.properties.city.$ref: $ref 'https://schemas.example.com/city.json' is outside this schema, "
        "and this server fetches no schema (expected a reference inside it, e.g. '#/$defs/<name>')",
        id="remote-ref",
    ),
]


@pytest.mark.parametrize(("schema", "said"), REFUSED)
async def test_a_schema_this_server_will_not_apply_is_a_400_before_any_model_call(
    live: Live, provider: FakeProvider, schema: dict[str, Any] | Nested, said: str
) -> None:
    asked: Any = {"type": "json_schema", "json_schema": {"name": "W", "schema": "SCHEMA"}}
    body = json.dumps({"model": "chat", "messages": ASK, "response_format": asked})
    body = body.replace('"SCHEMA"', schema.text if isinstance(schema, Nested) else json.dumps(schema))
    async with live.client() as client:
        response = await client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error.get("param"), error["message"]) == ("response_format", f"response_format.json_schema.{said}")
    assert provider.requests == []  # refused before a paid call


async def test_a_body_too_deep_to_read_is_a_400(live: Live, provider: FakeProvider) -> None:
    """Deeper than Python's JSON reader goes: the body is refused as unreadable, never a 500."""
    body = '{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "metadata": {"x": ' + Nested(5000).text
    async with live.client() as client:
        response = await client.post(
            "/v1/chat/completions", content=body + "}}", headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 400
    assert provider.requests == []


async def test_a_catastrophic_pattern_over_a_long_answer_leaves_the_server_answering(
    live: Live, provider: FakeProvider
) -> None:
    """The answer is checked off the event loop, and its patterns on RE2: `/healthz` answers while a long
    answer is checked, and a pattern that would backtrack for hours in Python's `re` is refused at once."""
    names = ["a" * 6] * 50_000 + ["a" * 40 + "!"]
    provider.enqueue(Reply(text=json.dumps(names), chunk_size=1 << 16), Reply(text='["aaa"]'))
    seen: list[str] = []
    event: dict[str, Any] = {}
    async with (
        live.client() as client,
        live.client(who="") as probe,
        client.stream("POST", "/api/assistants/names/runs", json={"messages": ASK}) as streamed,
    ):
        async for line in streamed.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            seen.append(event["type"])
            if event["type"] == "message_end" and "healthz" not in seen:
                # The first answer is complete, and is being checked: the server answers meanwhile.
                assert (await probe.get("/healthz")).status_code == 200
                seen.append("healthz")
                assert len(provider.requests) == 1  # the check (and the correction after it) still to come
    assert seen[-1] == "stream_end" and event["status"] == "completed" and event["output"] == ["aaa"]
    assert "does not match '^(a+)+$'" in provider.requests[1].messages[-1]["content"]
