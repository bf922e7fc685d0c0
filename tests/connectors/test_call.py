"""The model call over real HTTP against the fake provider, through both engines."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket

import pytest

from tests.support.connectors import ENGINES, TOOLS, EngineName, Sleeps, assemble, drain, fake_connector
from yao_agent.connectors import CallEvent, Engines, FailedTry, Fallback, ModelRequest, RetryPolicy, stream_call
from yao_agent.connectors.deltas import Finish, TextDelta, ToolCallDelta, Usage
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply, ToolCall


@pytest.mark.parametrize("engine", ENGINES)
async def test_text_streams_in_pieces_with_usage(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(text="Hello there, world", chunk_size=4, usage={"prompt_tokens": 5, "completion_tokens": 4}))
    events = await drain([fake_connector(provider.base_url, engine=engine)])
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) >= 4 and "".join(texts) == "Hello there, world"
    assert Finish("stop") in events
    assert events[-1] == Usage(5, 4, 9)
    [request] = provider.requests
    assert request.body["stream"] is True and request.body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("engine", ENGINES)
async def test_tool_call_fragments_reassemble(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(tool_calls=(ToolCall("get_weather", {"city": "Paris"}, id="call_1"),), chunk_size=3))
    events = await drain([fake_connector(provider.base_url, engine=engine)], tools=TOOLS)
    fragments = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(fragments) >= 3
    [call] = assemble(events).tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_1", "get_weather", {"city": "Paris"})
    assert assemble(events).finish == "tool_calls"
    assert provider.requests[0].tools == TOOLS


@pytest.mark.parametrize("engine", ENGINES)
async def test_parallel_tool_calls_keep_their_index(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(
        Reply(tool_calls=(ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_time", {"tz": "CET"})))
    )
    events = await drain([fake_connector(provider.base_url, engine=engine)], tools=TOOLS)
    calls = assemble(events).tool_calls
    assert [(c.index, c.name, json.loads(c.arguments)) for c in calls] == [
        (0, "get_weather", {"city": "Paris"}),
        (1, "get_time", {"tz": "CET"}),
    ]
    assert len({c.id for c in calls}) == 2


@pytest.mark.parametrize("engine", ENGINES)
async def test_reasoning_arrives_before_text(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(reasoning="thinking hard", text="42"))
    out = assemble(await drain([fake_connector(provider.base_url, engine=engine)]))
    assert (out.reasoning_text, out.content) == ("thinking hard", "42")


async def test_no_tools_are_sent_to_a_model_without_tool_calls(provider: FakeProvider) -> None:
    await drain([fake_connector(provider.base_url, tool_calls=False)], tools=TOOLS)
    assert "tools" not in provider.requests[0].body


ERRORS = [
    (Reply(status=401, error_message="bad key sk-test-key-0123456789"), "auth", False),
    (Reply(status=400, error_message="nope"), "bad_request", False),
    (Reply(status=400, error_message="too long", error_code="context_length_exceeded"), "context_overflow", False),
    (Reply(status=429, error_message="slow down", retry_after=0), "rate_limit", True),
    (Reply(status=500, error_message="boom"), "server", True),
    (Reply(status=503, error_message="down"), "server", True),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("reply", "kind", "retryable"), ERRORS, ids=[e[1] + str(e[0].status) for e in ERRORS])
async def test_error_classes(
    provider: FakeProvider, engine: EngineName, reply: Reply, kind: str, retryable: bool
) -> None:
    provider.enqueue(reply)
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(provider.base_url, engine=engine)])
    assert (caught.value.kind, caught.value.retryable, caught.value.status) == (kind, retryable, reply.status)
    assert caught.value.connector == "fake.model"
    assert "sk-test-key-0123456789" not in str(caught.value)
    assert len(provider.requests) == 1  # the SDKs' own retries are off


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_drop_after_the_first_token_is_incomplete_with_partial_text(
    provider: FakeProvider, engine: EngineName
) -> None:
    provider.enqueue(Reply(text="Hello world, how are you", chunk_size=5, drop_after=3))
    events: list[object] = []
    with pytest.raises(ModelError) as caught:
        request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
        connector = fake_connector(provider.base_url, engine=engine)
        engines = Engines()
        try:
            async for event in stream_call([connector], request, engines=engines, sleep=Sleeps()):
                events.append(event)
        finally:
            await engines.aclose()
    assert caught.value.kind == "incomplete" and not caught.value.retryable
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown and "Hello world, how are you".startswith(shown) and len(shown) < 24


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_stall_before_the_first_token_times_out(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(text="late", first_byte_delay_s=3))
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(provider.base_url, engine=engine, timeout_s=0.3)])
    assert (caught.value.kind, caught.value.retryable) == ("timeout", True)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_stall_mid_stream_ends_incomplete(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(text="partial answer", chunk_size=4, stall_after=2, stall_s=3))
    with pytest.raises(ModelError) as caught:
        await drain([fake_connector(provider.base_url, engine=engine, timeout_s=0.3)])
    assert caught.value.kind == "incomplete"


@pytest.mark.parametrize("engine", ENGINES)
async def test_connection_refused_is_a_retryable_connection_error(engine: EngineName) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(ModelError) as caught:
            await drain([fake_connector(f"http://127.0.0.1:{port}/v1", engine=engine)])
    assert (caught.value.kind, caught.value.retryable) == ("connection", True)


async def test_retryable_errors_are_retried_with_back_off(provider: FakeProvider) -> None:
    provider.enqueue(Reply(status=500), Reply(status=429, retry_after=0), Reply(text="third time lucky"))
    sleeps = Sleeps()
    events = await drain([fake_connector(provider.base_url)], policy=RetryPolicy(max_attempts=3), sleep=sleeps)
    assert assemble(events).content == "third time lucky"
    assert sleeps.calls == [0.5, 1.0]
    assert len(provider.requests) == 3
    # Each try gone past is said, before its back-off: a run records it.
    tries = [e for e in events if isinstance(e, FailedTry)]
    assert [(t.connector, t.kind) for t in tries] == [("fake.model", "server"), ("fake.model", "rate_limit")]
    assert events.index(tries[-1]) < len(events) - 1 and "HTTP 429" in tries[-1].message


async def test_fatal_errors_are_not_retried(provider: FakeProvider) -> None:
    provider.enqueue(Reply(status=401), Reply(text="never asked"))
    with pytest.raises(ModelError):
        await drain([fake_connector(provider.base_url)], policy=RetryPolicy(max_attempts=3))
    assert len(provider.requests) == 1


async def test_retries_stop_at_the_connector_timeout(provider: FakeProvider) -> None:
    provider.enqueue(*[Reply(status=500)] * 5)
    with pytest.raises(ModelError):
        policy = RetryPolicy(max_attempts=5, base_delay_s=0.6)
        await drain([fake_connector(provider.base_url, timeout_s=1.0)], policy=policy)
    assert len(provider.requests) == 2  # 0.6 s waited, the next 1.2 s wait would pass the 1 s budget


@pytest.mark.parametrize("engine", ENGINES)
async def test_fallback_before_the_first_token(provider: FakeProvider, engine: EngineName) -> None:
    first = fake_connector(provider.base_url, model="first", connector_id="a.first", engine=engine)
    second = fake_connector(provider.base_url, model="second", connector_id="b.second", engine=engine)
    provider.enqueue(Reply(status=500, error_message="upstream down"), model="first")
    provider.enqueue(Reply(text="from the second"), model="second")
    events = await drain([first, second])
    [fallback] = [e for e in events if isinstance(e, Fallback)]
    assert (fallback.from_connector, fallback.to_connector) == ("a.first", "b.second")
    assert "provider error (HTTP 500)" in fallback.reason and "upstream down" in fallback.reason
    [failed] = [e for e in events if isinstance(e, FailedTry)]  # the try the chain went past
    assert (failed.connector, failed.kind, failed.message) == ("a.first", "server", fallback.reason)
    assert events.index(failed) == events.index(fallback) - 1
    assert assemble(events).content == "from the second"
    assert [r.model for r in provider.requests] == ["first", "second"]


async def test_no_fallback_after_the_first_token(provider: FakeProvider) -> None:
    first = fake_connector(provider.base_url, model="first", connector_id="a.first")
    second = fake_connector(provider.base_url, model="second", connector_id="b.second")
    provider.enqueue(Reply(text="Hello world", chunk_size=3, drop_after=3), model="first")
    with pytest.raises(ModelError) as caught:
        await drain([first, second])
    assert caught.value.kind == "incomplete"
    assert [r.model for r in provider.requests] == ["first"]  # never spliced with another model's answer


async def test_fatal_error_does_not_fall_back(provider: FakeProvider) -> None:
    first = fake_connector(provider.base_url, model="first", connector_id="a.first")
    second = fake_connector(provider.base_url, model="second", connector_id="b.second")
    provider.enqueue(Reply(status=401), model="first")
    with pytest.raises(ModelError):
        await drain([first, second])
    assert [r.model for r in provider.requests] == ["first"]


async def test_a_missing_key_falls_back_and_names_the_variable(provider: FakeProvider) -> None:
    from yao_agent.dsl.envvars import EnvValue

    first = fake_connector(provider.base_url, model="first", connector_id="a.first")
    first = dataclasses.replace(first, api_key=EnvValue("$ENV.NOPE_KEY", "x.yml:3 api_key"))
    second = fake_connector(provider.base_url, model="second", connector_id="b.second")
    events = await drain([first, second], environ={})
    [fallback] = [e for e in events if isinstance(e, Fallback)]
    assert "environment variable NOPE_KEY is not set (needed by x.yml:3 api_key)" in fallback.reason
    assert [r.model for r in provider.requests] == ["second"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_cancelling_a_call_closes_the_upstream_connection(provider: FakeProvider, engine: EngineName) -> None:
    provider.enqueue(Reply(text="x" * 200, chunk_size=1, delay_s=0.05))
    connector = fake_connector(provider.base_url, engine=engine)
    engines = Engines()
    first = asyncio.Event()

    async def consume() -> None:
        request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
        async for event in stream_call([connector], request, engines=engines):
            if isinstance(event, TextDelta):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await engines.aclose()
    [gone] = await provider.wait_for_disconnects(1, timeout=5)
    assert gone.model == "text"


async def test_litellm_ends_the_call_at_its_usage(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm hands the usage over only once the provider's reply is complete; the engine closes the stream
    there instead of asking on, which would only run litellm's success logging (this process registers no
    callbacks for it). The whole reply still arrives, and the provider sees no client go away."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    dispatched: list[object] = []

    async def record(*args: object, **kwargs: object) -> None:
        dispatched.append(args)

    monkeypatch.setattr(Logging, "dispatch_success_handlers", record)
    provider.enqueue(Reply(text="Hello there, world", chunk_size=4, usage={"prompt_tokens": 5, "completion_tokens": 4}))
    events = await drain([fake_connector(provider.base_url, engine="litellm")])
    await asyncio.sleep(0.05)  # litellm dispatches its logging in a task of its own
    assert assemble(events).content == "Hello there, world" and Finish("stop") in events
    assert events[-1] == Usage(5, 4, 9)
    assert dispatched == [] and provider.disconnects == []


async def test_both_engines_yield_the_same_deltas(provider: FakeProvider) -> None:
    """Parity: every kind of reply gives identical deltas through the openai SDK and litellm."""
    replies = [
        Reply(text="Hello there", chunk_size=2),
        Reply(reasoning="hmm", text="ok"),
        Reply(tool_calls=(ToolCall("get_weather", {"city": "Paris"}, id="c1"),)),
        Reply(tool_calls=(ToolCall("a", {"x": 1}, id="c1"), ToolCall("b", {"y": [1, 2]}, id="c2")), chunk_size=2),
        Reply(text="cut", finish_reason="length"),
    ]
    for reply in replies:
        outputs: list[list[CallEvent]] = []
        for engine in ENGINES:
            provider.enqueue(reply)
            outputs.append(await drain([fake_connector(provider.base_url, engine=engine)], tools=TOOLS))
        assert outputs[0] == outputs[1], reply
