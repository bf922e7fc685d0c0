"""The fake OpenAI-compatible provider, driven over real HTTP by the clients our users use.

Most behaviour is checked with both the official `openai` SDK and litellm, since each consumes the stream
in its own way; wire details that neither client exposes are checked on the raw bytes with httpx.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import litellm
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from yao_agent.testing import FakeProvider, RecordedRequest, Reply, ToolCall, UnknownScenario
from yao_agent.testing.fake_scenarios import reply_from_json

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


# -- clients ---------------------------------------------------------------------------------------------------


@dataclass
class Collected:
    """What a consumer of a chat stream ends up with, however its client shapes the chunks."""

    text: str = ""
    reasoning: str = ""
    content_deltas: int = 0
    reasoning_after_text: bool = False
    calls: dict[int, dict[str, Any]] = field(default_factory=dict[int, dict[str, Any]])
    finish_reason: str | None = None
    usage: Any = None
    usage_chunk_choices: Any = None

    def add(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)  # litellm's chunks have the attribute only when there is usage
        if usage:
            self.usage, self.usage_chunk_choices = usage, chunk.choices
        for choice in chunk.choices:
            self.finish_reason = choice.finish_reason or self.finish_reason
            self._add_delta(choice.delta)

    def _add_delta(self, delta: Any) -> None:
        reasoning = getattr(delta, "reasoning_content", None)
        if reasoning:
            self.reasoning += reasoning
            self.reasoning_after_text = self.reasoning_after_text or bool(self.text)
        if delta.content:
            self.text += delta.content
            self.content_deltas += 1
        for call in delta.tool_calls or ():
            if call.id:
                self.calls[call.index] = {"id": call.id, "name": call.function.name, "arguments": "", "fragments": 0}
            if call.function and call.function.arguments:
                self.calls[call.index]["arguments"] += call.function.arguments
                self.calls[call.index]["fragments"] += 1


class Api:
    """One client library, pointed at the fake provider with retries off."""

    errors: dict[str, type[BaseException]]

    async def stream(
        self, model: str, *, on_chunk: Callable[[Collected], object] | None = None, **kwargs: Any
    ) -> Collected:
        raise NotImplementedError

    async def complete(self, model: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def error_code(self, exc: BaseException) -> str | None:
        raise NotImplementedError


class OpenAIApi(Api):
    errors: dict[str, type[BaseException]] = {  # noqa: RUF012
        "e401": openai.AuthenticationError,
        "e429": openai.RateLimitError,
        "e500": openai.InternalServerError,
        "context": openai.BadRequestError,
        "drop": openai.APIConnectionError,
        "timeout": openai.APITimeoutError,
    }

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client

    async def stream(
        self, model: str, *, on_chunk: Callable[[Collected], object] | None = None, **kwargs: Any
    ) -> Collected:
        collected = Collected()
        stream = await self.client.chat.completions.create(model=model, messages=MESSAGES, stream=True, **kwargs)
        async with stream:
            async for chunk in stream:
                collected.add(chunk)
                if on_chunk:
                    on_chunk(collected)
        return collected

    async def complete(self, model: str, **kwargs: Any) -> Any:
        # Untyped **kwargs may hold `stream`, so pyright cannot pick one overload of `create`: the result is untyped.
        return await self.client.chat.completions.create(model=model, messages=MESSAGES, **kwargs)  # pyright: ignore[reportUnknownVariableType]

    def error_code(self, exc: BaseException) -> str | None:
        assert isinstance(exc, openai.APIError)
        return exc.code


class LiteLLMApi(Api):
    errors: dict[str, type[BaseException]] = {  # noqa: RUF012
        "e401": litellm.exceptions.AuthenticationError,
        "e429": litellm.exceptions.RateLimitError,
        "e500": litellm.exceptions.InternalServerError,
        "context": litellm.exceptions.ContextWindowExceededError,
        "drop": litellm.exceptions.MidStreamFallbackError,
        "timeout": litellm.exceptions.Timeout,
    }

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _kwargs(self, model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        base = {"model": f"openai/{model}", "messages": MESSAGES, "api_base": self.base_url, "api_key": "x"}
        return {**base, "max_retries": 0, **kwargs}

    async def stream(
        self, model: str, *, on_chunk: Callable[[Collected], object] | None = None, **kwargs: Any
    ) -> Collected:
        collected = Collected()
        response: Any = await litellm.acompletion(stream=True, **self._kwargs(model, kwargs))
        async for chunk in response:
            collected.add(chunk)
            if on_chunk:
                on_chunk(collected)
        return collected

    async def complete(self, model: str, **kwargs: Any) -> Any:
        return await litellm.acompletion(**self._kwargs(model, kwargs))

    def error_code(self, exc: BaseException) -> str | None:
        # litellm drops the error body's `code` (it classifies by message text); the response keeps it.
        return cast(Any, exc).response.json()["error"]["code"]


@pytest.fixture
async def oai(provider: FakeProvider) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=provider.base_url, api_key="x", max_retries=0)
    yield client
    await client.close()


@pytest.fixture(params=["openai", "litellm"])
def api(request: pytest.FixtureRequest, provider: FakeProvider, oai: openai.AsyncOpenAI) -> Api:
    return OpenAIApi(oai) if request.param == "openai" else LiteLLMApi(provider.base_url)


INCLUDE_USAGE: dict[str, Any] = {"stream_options": {"include_usage": True}}

# litellm inspects the usage chunk with a pydantic access that warns; litellm ignores that warning itself at
# import, but `filterwarnings = error` re-arms it during tests (with a real provider just the same).
LITELLM_USAGE_WARNING = "ignore:Accessing the .* attribute on the instance is deprecated:DeprecationWarning"


# -- content through both clients -----------------------------------------------------------------------------


@pytest.mark.filterwarnings(LITELLM_USAGE_WARNING)
async def test_text_streams_in_pieces_and_usage_arrives_last(api: Api) -> None:
    got = await api.stream("text", **INCLUDE_USAGE)

    assert got.text == "Hello world"
    assert got.content_deltas == 4
    assert got.finish_reason == "stop"
    assert (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.total_tokens) == (11, 7, 18)
    assert got.usage_chunk_choices == []


async def test_non_streaming_returns_one_completion(api: Api) -> None:
    result = await api.complete("text")

    assert result.choices[0].message.content == "Hello world"
    assert result.choices[0].finish_reason == "stop"
    assert result.usage.total_tokens == 18


async def test_tool_call_arguments_arrive_in_fragments_and_reassemble(api: Api) -> None:
    got = await api.stream("tool")

    assert list(got.calls) == [0]
    call = got.calls[0]
    assert (call["id"], call["name"]) == ("call_1", "get_weather")
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert call["fragments"] >= 3
    assert got.finish_reason == "tool_calls"
    assert got.text == ""


async def test_parallel_tool_calls_use_indexes_0_and_1(api: Api) -> None:
    got = await api.stream("tool2")

    assert sorted(got.calls) == [0, 1]
    assert [got.calls[i]["name"] for i in (0, 1)] == ["get_weather", "get_time"]
    assert json.loads(got.calls[0]["arguments"]) == {"city": "Paris"}
    assert json.loads(got.calls[1]["arguments"]) == {"timezone": "Europe/Paris"}
    assert got.calls[0]["id"] != got.calls[1]["id"]


async def test_non_streaming_tool_calls(api: Api) -> None:
    result = await api.complete("tool2")

    calls = result.choices[0].message.tool_calls
    assert [(c.type, c.function.name) for c in calls] == [("function", "get_weather"), ("function", "get_time")]
    assert json.loads(calls[1].function.arguments) == {"timezone": "Europe/Paris"}
    assert result.choices[0].finish_reason == "tool_calls"


async def test_reasoning_streams_before_the_text(api: Api) -> None:
    got = await api.stream("reasoning")

    assert got.reasoning == "The user greets me; a short greeting back is enough."
    assert got.text == "Hello world"
    assert not got.reasoning_after_text


async def test_non_streaming_reasoning_is_on_the_message(api: Api) -> None:
    result = await api.complete("reasoning")

    assert result.choices[0].message.reasoning_content == "The user greets me; a short greeting back is enough."
    assert result.choices[0].message.content == "Hello world"


# -- failures through both clients ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["e401", "e429", "e500"])
async def test_http_errors_raise_the_clients_error_after_exactly_one_hit(
    api: Api, provider: FakeProvider, scenario: str
) -> None:
    with pytest.raises(api.errors[scenario]):
        await api.stream(scenario)

    assert len(provider.requests) == 1


async def test_context_overflow_is_a_bad_request_with_its_code(api: Api) -> None:
    with pytest.raises(api.errors["context"]) as caught:
        await api.complete("context")

    assert isinstance(caught.value, openai.BadRequestError)
    assert api.error_code(caught.value) == "context_length_exceeded"


async def test_dropped_connection_fails_the_stream_after_partial_output(api: Api, provider: FakeProvider) -> None:
    seen: list[str] = []

    with pytest.raises(api.errors["drop"]):
        await api.stream("drop", on_chunk=lambda got: seen.append(got.text))

    assert seen[-1] == "Hel"
    assert provider.disconnects == []  # the provider hung up, not the client


async def test_stalled_stream_hits_the_clients_read_timeout(api: Api, provider: FakeProvider) -> None:
    seen: list[str] = []

    with pytest.raises(api.errors["timeout"]):  # the stall is 30 s: only the read timeout ends it
        await api.stream("stall", timeout=0.5, on_chunk=lambda got: seen.append(got.text))

    assert seen[-1] == "Hel"
    assert [r.model for r in await provider.wait_for_disconnects()] == ["stall"]


async def test_cancelled_consumer_is_recorded_as_a_disconnect(api: Api, provider: FakeProvider) -> None:
    first_text = asyncio.Event()
    consumer = asyncio.create_task(api.stream("slowstream", on_chunk=lambda got: got.text and first_text.set()))
    await asyncio.wait_for(first_text.wait(), 5)

    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer

    disconnects = await provider.wait_for_disconnects(1, timeout=3)
    assert [r.model for r in disconnects] == ["slowstream"]


# -- choosing replies and recording requests -------------------------------------------------------------------


async def test_requests_are_recorded_exactly_as_sent(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    ]
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    await oai.chat.completions.create(model="openai/echo", messages=messages, tools=tools, extra_headers={"X-Run": "7"})

    [record] = provider.requests
    assert (record.path, record.model, record.stream) == ("/v1/chat/completions", "openai/echo", False)
    assert record.messages == messages
    assert record.tools == tools
    assert record.headers["authorization"] == "Bearer x"
    assert record.headers["x-run"] == "7"
    assert record.received_at == pytest.approx(time.time(), abs=60)


async def test_echo_answers_the_last_user_message_and_prefixes_are_ignored(oai: openai.AsyncOpenAI) -> None:
    result = await oai.chat.completions.create(
        model="openai/echo",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "second"}]},
        ],
    )

    assert result.choices[0].message.content == "echo: second"


async def test_models_that_are_no_scenario_say_hello(oai: openai.AsyncOpenAI) -> None:
    result = await oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert result.choices[0].message.content == "Hello world"


async def test_model_queue_beats_global_queue_and_both_are_fifo(
    provider: FakeProvider, oai: openai.AsyncOpenAI
) -> None:
    provider.enqueue(Reply(text="global 1"), Reply(text="global 2"))
    provider.enqueue(Reply(text="for b"), model="openai/b")

    async def ask(model: str) -> str | None:
        return (await oai.chat.completions.create(model=model, messages=MESSAGES)).choices[0].message.content

    assert [await ask("b"), await ask("a"), await ask("b"), await ask("b")] == [
        "for b",
        "global 1",
        "global 2",
        "Hello world",
    ]


async def test_queued_scenario_names_resolve_when_the_request_arrives(
    provider: FakeProvider, oai: openai.AsyncOpenAI
) -> None:
    provider.enqueue("echo", "e429")

    first = await oai.chat.completions.create(model="text", messages=[{"role": "user", "content": "ping"}])
    with pytest.raises(openai.RateLimitError) as caught:
        await oai.chat.completions.create(model="text", messages=MESSAGES)

    assert first.choices[0].message.content == "echo: ping"
    assert caught.value.response.headers["retry-after"] == "1"


async def test_header_picks_the_scenario_and_leaves_the_queue_alone(
    provider: FakeProvider, oai: openai.AsyncOpenAI
) -> None:
    provider.enqueue(Reply(text="queued"))

    overridden = await oai.chat.completions.create(
        model="text", messages=MESSAGES, extra_headers={"X-Fake-Scenario": "echo"}
    )
    then = await oai.chat.completions.create(model="text", messages=MESSAGES)

    assert overridden.choices[0].message.content == "echo: hi"
    assert then.choices[0].message.content == "queued"


async def test_unknown_scenarios_are_refused_not_guessed(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(model="text", messages=MESSAGES, extra_headers={"X-Fake-Scenario": "e492"})
    with pytest.raises(UnknownScenario):
        provider.enqueue("chunks:many")

    assert caught.value.code == "unknown_scenario"


async def test_default_function_computes_replies_from_the_request() -> None:
    def count_messages(request: RecordedRequest) -> Reply:
        return Reply(text=f"{len(request.messages)} messages to {request.model}")

    async with FakeProvider(default=count_messages) as provider:
        provider.enqueue(Reply(text="queued first"))
        async with openai.AsyncOpenAI(base_url=provider.base_url, api_key="x", max_retries=0) as client:
            queued = await client.chat.completions.create(model="m", messages=MESSAGES)
            computed = await client.chat.completions.create(model="m", messages=MESSAGES * 3)

    assert queued.choices[0].message.content == "queued first"
    assert computed.choices[0].message.content == "3 messages to m"


async def test_a_failing_default_function_is_reported_to_the_client() -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("oops")

    async with (
        FakeProvider(default=broken) as provider,
        openai.AsyncOpenAI(base_url=provider.base_url, api_key="x", max_retries=0) as client,
    ):
        with pytest.raises(openai.InternalServerError, match="KeyError"):
            await client.chat.completions.create(model="m", messages=MESSAGES)


# -- the other misbehaviours ----------------------------------------------------------------------------------


async def test_slow_first_byte_times_out_and_is_recorded(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.APITimeoutError):
        await oai.chat.completions.create(model="slow", messages=MESSAGES, timeout=0.3)

    assert [r.model for r in await provider.wait_for_disconnects()] == ["slow"]


async def test_stall_ends_and_the_stream_completes(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    provider.enqueue(Reply(text="Hello world", stall_after=2, stall_s=0.3))
    started = time.monotonic()

    got = await OpenAIApi(oai).stream("text")

    assert got.text == "Hello world"
    assert time.monotonic() - started >= 0.3


async def test_delay_paces_every_chunk(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    provider.enqueue(Reply(text="abcd", chunk_size=1, delay_s=0.05))
    arrivals: list[float] = []

    got = await OpenAIApi(oai).stream("text", on_chunk=lambda _: arrivals.append(time.monotonic()))

    assert got.text == "abcd"
    assert arrivals[-1] - arrivals[0] >= 0.2  # role chunk, then 4 text chunks 0.05 s apart


async def test_non_streaming_drop_is_a_connection_error(provider: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    provider.enqueue(Reply(text="never sent", drop_after=0))

    with pytest.raises(openai.APIConnectionError):
        await oai.chat.completions.create(model="text", messages=MESSAGES)


async def test_chunks_n_sends_n_content_deltas(oai: openai.AsyncOpenAI) -> None:
    got = await OpenAIApi(oai).stream("chunks:250")

    assert got.content_deltas == 250
    assert got.text == "tok " * 250


async def test_clock_n_ms_stamps_each_chunk_with_the_moment_it_was_sent(oai: openai.AsyncOpenAI) -> None:
    arrivals: list[float] = []
    asked = time.monotonic()
    got = await OpenAIApi(oai).stream("clock:4:30", on_chunk=lambda _: arrivals.append(time.monotonic()))

    stamps = [float(piece) for piece in got.text.split()]
    assert got.content_deltas == 4 and len(stamps) == 4
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] >= 0.09  # one every 30 ms, at the least
    # Each stamp is a moment between the request and that chunk's arrival: when it was sent.
    assert all(asked <= stamp <= arrived for stamp, arrived in zip(stamps, arrivals[-5:-1], strict=True))


async def test_closing_with_a_response_in_flight_is_prompt_and_no_disconnect() -> None:
    arrived = asyncio.Event()

    def slow_reply(request: RecordedRequest) -> Reply:
        arrived.set()
        return Reply(text="too late", first_byte_delay_s=3600)

    provider = FakeProvider(default=slow_reply)
    await provider.start()
    async with httpx.AsyncClient(base_url=provider.base_url) as client:
        pending = asyncio.create_task(client.post("/chat/completions", json={"model": "m", "messages": MESSAGES}))
        await asyncio.wait_for(arrived.wait(), 30)
        await asyncio.wait_for(provider.close(), 30)  # it does not wait out the hour the reply would take
        with pytest.raises(httpx.TransportError):
            await pending
    assert provider.disconnects == []


# -- the raw wire format ----------------------------------------------------------------------------------------


async def _raw_events(provider: FakeProvider, body: dict[str, Any]) -> list[Any]:
    async with (
        httpx.AsyncClient() as client,
        client.stream("POST", f"{provider.base_url}/chat/completions", json=body) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = (await response.aread()).decode()
    assert raw.endswith("\n\n")
    frames = raw.split("\n\n")[:-1]
    assert all(frame.startswith("data: ") for frame in frames)
    return [frame.removeprefix("data: ") for frame in frames]


async def test_stream_wire_format_follows_openai(provider: FakeProvider) -> None:
    body = {"model": "tool", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    *chunks, done = await _raw_events(provider, body)
    events = [json.loads(chunk) for chunk in chunks]

    assert done == "[DONE]"
    assert {(e["object"], e["id"], e["model"]) for e in events} == {("chat.completion.chunk", "chatcmpl-fake1", "tool")}
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {
        "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
        ]
    }
    assert all(set(d["tool_calls"][0]) == {"index", "function"} for d in deltas[2:-1])
    assert events[-2]["choices"][0] | {"delta": None} == {
        "index": 0,
        "delta": None,
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert deltas[-1] == {}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 18
    assert all(e["usage"] is None for e in events[:-1])


async def test_stream_without_include_usage_sends_no_usage(provider: FakeProvider) -> None:
    *chunks, done = await _raw_events(provider, {"model": "text", "messages": MESSAGES, "stream": True})

    assert done == "[DONE]"
    assert all("usage" not in json.loads(chunk) and json.loads(chunk)["choices"] for chunk in chunks)


async def test_models_list_and_unknown_paths(provider: FakeProvider) -> None:
    async with httpx.AsyncClient(base_url=provider.base_url) as client:
        models = (await client.get("/models")).json()
        missing = await client.post("/audio/speech", json={})
        not_json = await client.post("/chat/completions", content=b"{oops")

    assert {"text", "tool", "chunks:20"} <= {m["id"] for m in models["data"]}
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "Invalid URL (POST /v1/audio/speech)"
    assert not_json.status_code == 400
    assert set(not_json.json()["error"]) == {"message", "type", "param", "code"}
    assert len(provider.requests) == 1  # only the model's routes are recorded


# -- out-of-process control -------------------------------------------------------------------------------------


async def test_control_routes_script_and_inspect_the_fake(provider: FakeProvider) -> None:
    root = provider.base_url.removesuffix("/v1")
    reply = {
        "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}, "id": "call_mine"}],
        "usage": {"total_tokens": 3},
    }
    async with httpx.AsyncClient(base_url=root) as client:
        queued = await client.post("/_fake/enqueue", json={"model": "m", "replies": [reply, "e500"]})
        first = await client.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
        second = await client.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
        recorded = (await client.get("/_fake/requests")).json()["requests"]
        disconnects = (await client.get("/_fake/disconnects")).json()["disconnects"]
        bad = await client.post("/_fake/enqueue", json={"replies": [{"txet": "typo"}]})
        await client.post("/_fake/reset")
        after_reset = (await client.get("/_fake/requests")).json()["requests"]

    assert queued.json() == {"queued": 2}
    sent_call = first.json()["choices"][0]["message"]["tool_calls"][0]
    assert sent_call == {
        "id": "call_mine",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": "x"}'},
    }
    assert first.json()["usage"] == {"total_tokens": 3}
    assert second.status_code == 500
    assert [(r["model"], r["messages"], r["stream"]) for r in recorded] == [("m", MESSAGES, False)] * 2
    assert disconnects == []
    assert bad.status_code == 400 and "txet" in bad.json()["error"]["message"]
    assert after_reset == []


def test_replies_are_validated_when_written() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Reply(chunk_size=0)
    with pytest.raises(ValueError, match="status"):
        Reply(status=302)
    with pytest.raises(ValueError, match="wrong type"):
        reply_from_json({"drop_after": "2"})

    assert reply_from_json({"tool_calls": [{"name": "f", "arguments": "{}"}], "stall_s": 1}) == Reply(
        tool_calls=(ToolCall("f", "{}"),), stall_s=1
    )


def test_thread_mode_serves_sync_code() -> None:
    provider = FakeProvider()
    with provider.running_in_thread() as served:
        served.enqueue(Reply(text="from the main thread"))
        with httpx.Client(base_url=served.base_url) as client:
            whole = client.post("/chat/completions", json={"model": "x", "messages": MESSAGES}).json()
            body = {"model": "tool", "messages": MESSAGES, "stream": True}
            with client.stream("POST", "/chat/completions", json=body) as response:
                lines = [line for line in response.iter_lines() if line]
        assert [r.model for r in served.requests] == ["x", "tool"]

    assert whole["choices"][0]["message"]["content"] == "from the main thread"
    assert lines[-1] == "data: [DONE]"
    assert len(lines) == 10  # role, name, 6 argument fragments, finish, [DONE]
    with pytest.raises(RuntimeError, match="not running"):
        _ = provider.base_url


@pytest.fixture
def fake_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "yao_agent.testing.fake_provider", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            assert process.stdout is not None
            ready = process.stdout.readline()
            if not ready.startswith("READY http://127.0.0.1:"):
                pytest.fail(f"no READY line; got {ready!r}, stderr: {process.communicate(timeout=10)[1]}")
            yield process, ready.split()[1]
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


def test_process_mode_serves_enqueued_replies_and_stops_on_sigterm(
    fake_process: tuple[subprocess.Popen[str], str],
) -> None:
    process, base_url = fake_process
    with httpx.Client() as client:
        client.post(base_url.removesuffix("/v1") + "/_fake/enqueue", json={"replies": [{"text": "from afar"}]})
        reply = client.post(f"{base_url}/chat/completions", json={"model": "gpt-4o", "messages": MESSAGES}).json()

    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)

    assert reply["choices"][0]["message"]["content"] == "from afar"
    assert process.returncode == 0
    assert "Warning" not in stderr
