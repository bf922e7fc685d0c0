"""The in-process model doubles: what they stream, how they fail, what they record, and parity with the
loopback fake provider as the `openai` engine reads it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.connectors import TOOLS, Sleeps, assemble, drain, fake_connector
from tests.support.docs import REPO, block
from yao_agent.connectors import CallEvent, Engines, ModelRequest, RetryPolicy, stream_call
from yao_agent.connectors.deltas import Fallback, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.testing import (
    FakeProvider,
    FunctionModel,
    ModelDouble,
    RecordedRequest,
    Reply,
    ScriptedModel,
    ToolCall,
)

HELLO = ({"role": "user", "content": "hi"},)


async def call(double: ModelDouble, *, model: str = "text", timeout_s: float = 5.0) -> list[CallEvent]:
    """One call to the connector `fake.model` through the production call path, without retries."""
    connector = fake_connector(double.base_url, model=model, timeout_s=timeout_s)
    return await drain([connector], engines=double.engines(), tools=TOOLS)


async def test_text_reasoning_and_usage_stream_in_pieces() -> None:
    model = ScriptedModel()
    model.enqueue(Reply(reasoning="hmm", text="Hello there", chunk_size=4, usage={"prompt_tokens": 5}))
    events = await call(model)
    assert events == [
        ReasoningDelta("hmm"), TextDelta("Hell"), TextDelta("o th"), TextDelta("ere"), Finish("stop"), Usage(5, 0, 5),
    ]  # fmt: skip


async def test_tool_call_arguments_arrive_in_fragments_the_first_naming_the_call() -> None:
    model = ScriptedModel()
    model.enqueue(Reply(tool_calls=(ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_time")), chunk_size=5))
    events = await call(model)
    fragments = [e for e in events if isinstance(e, ToolCallDelta)]
    assert fragments[0] == ToolCallDelta(0, "call_1", "get_weather", "")
    assert all(f.id is None and f.name is None for f in fragments[1:] if f.index == 0)
    calls = assemble(events).tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "get_time", "")]  # fmt: skip
    assert assemble(events).finish == "tool_calls"


# What the provider does, and what the `openai` engine makes of it (the kinds retries and fallbacks read).
FAILURES = [
    (Reply(status=401, error_message="bad key"), "auth", False),
    (Reply(status=400, error_message="too long", error_code="context_length_exceeded"), "context_overflow", False),
    (Reply(status=429, retry_after=0), "rate_limit", True),
    (Reply(status=503), "server", True),
    (Reply(text="Hello world", drop_after=3), "incomplete", False),
    (Reply(text="Hello world", drop_after=1), "connection", True),  # the role chunk only: nothing shown yet
    (Reply(text="Hello world", stall_after=3, stall_s=60), "incomplete", False),
    (Reply(text="Hello world", stall_after=1, stall_s=60), "timeout", True),
    (Reply(text="Hello world", first_byte_delay_s=60), "timeout", True),
]


@pytest.mark.parametrize(("reply", "kind", "retryable"), FAILURES)
async def test_provider_failures_become_the_model_errors_of_the_real_engine(
    reply: Reply, kind: str, retryable: bool
) -> None:
    sleeps = Sleeps()
    model = ScriptedModel(sleep=sleeps)
    model.enqueue(reply)
    with pytest.raises(ModelError) as caught:
        await call(model, timeout_s=2.0)
    assert (caught.value.kind, caught.value.retryable, caught.value.connector) == (kind, retryable, "fake.model")
    assert sleeps.calls in ([], [2.0])  # a wait longer than timeout_s is given up after timeout_s


async def test_a_failure_the_function_raises_is_the_calls_failure() -> None:
    def refuse(request: RecordedRequest) -> Reply:
        from yao_agent.connectors.classify import model_error

        raise model_error("connection", request.connector or "", "refused")

    with pytest.raises(ModelError) as caught:
        await call(FunctionModel(refuse))
    assert (caught.value.kind, caught.value.message) == (
        "connection", "model call to fake.model failed: connection failed: refused")  # fmt: skip


Failure = tuple[str, str, int | None]  # kind, message, status


async def outcome(connector: ConnectorSpec, engines: Engines) -> tuple[list[CallEvent], Failure | None]:
    """What one call streamed, and how it failed (kind, message, status) if it did."""
    events: list[CallEvent] = []
    request = ModelRequest(list(HELLO), tools=TOOLS, options={"temperature": 0.2})
    try:
        async for event in stream_call([connector], request, engines=engines, sleep=Sleeps()):
            events.append(event)
    except ModelError as exc:
        return events, (exc.kind, exc.message, exc.status)
    finally:
        await engines.aclose()
    return events, None


PARITY = [
    Reply(text="Hello there", chunk_size=2),
    Reply(reasoning="hmm", text="ok", usage={"prompt_tokens": 3, "completion_tokens": 2}),
    Reply(tool_calls=(ToolCall("a", {"x": 1}), ToolCall("b", {"y": [1, 2]}, id="mine")), chunk_size=2),
    Reply(text="cut", finish_reason="length"),
    Reply(status=401, error_message="Incorrect API key provided: sk-test-key-0123456789"),
    Reply(status=400, error_message="too long", error_code="context_length_exceeded"),
    Reply(status=500),
    Reply(text="The answer is", chunk_size=4, drop_after=3),
]


async def test_parity_with_the_fake_provider_through_the_openai_engine() -> None:
    """The same replies give the same deltas, errors and recorded requests over HTTP and in process."""
    model = ScriptedModel()
    async with FakeProvider() as fake:
        for reply in PARITY:
            fake.enqueue(reply)
            model.enqueue(reply)
            wire = await outcome(fake_connector(fake.base_url), Engines())
            here = await outcome(fake_connector(model.base_url), model.engines())
            assert here[0] == wire[0], reply
            assert (here[1] is None) == (wire[1] is None), reply
            if here[1] is not None and wire[1] is not None:
                assert here[1][0] == wire[1][0], reply
                if wire[1][0] != "incomplete":  # a broken stream's words are the transport's
                    assert here[1] == wire[1], reply
        for sent, seen in zip(fake.requests, model.requests, strict=True):
            assert (seen.model, seen.messages, seen.tools) == (sent.model, sent.messages, sent.tools)
            assert seen.body == sent.body
            assert seen.headers["authorization"] == sent.headers["authorization"]


async def test_a_request_is_recorded_as_the_provider_would_receive_it() -> None:
    model = ScriptedModel()
    connector = dataclasses.replace(fake_connector(model.base_url, tool_calls=False), options={"temperature": 0.7})
    request = ModelRequest(list(HELLO), tools=TOOLS, options={"max_tokens": 9, "tool_choice": "auto"})
    async for _ in stream_call([connector], request, engines=model.engines()):
        pass
    [seen] = model.requests
    assert (seen.model, seen.connector, seen.messages) == ("text", "fake.model", list(HELLO))
    assert seen.tools is None  # the connector cannot call tools: none are offered, as on the wire
    assert seen.options == {"temperature": 0.7, "max_tokens": 9}
    assert seen.body["stream_options"] == {"include_usage": True}


async def test_a_function_model_answers_from_what_it_was_sent() -> None:
    async def count(request: RecordedRequest) -> Reply:
        await asyncio.sleep(0)
        return Reply(text=f"{len(request.messages)} messages to {request.connector}")

    assert assemble(await call(FunctionModel(count))).content == "1 messages to fake.model"
    assert assemble(await call(FunctionModel(lambda _: "echo"))).content == "echo: hi"  # a built-in scenario
    model = FunctionModel(lambda request: Reply(text=request.model))
    assert assemble(await call(model, model="gpt-x")).content == "gpt-x"
    assert [r.model for r in model.requests] == ["gpt-x"]


async def test_the_queue_of_a_model_then_the_global_queue_then_the_scenario_its_model_names() -> None:
    model = ScriptedModel()
    model.enqueue(Reply(text="for anyone"))
    model.enqueue(Reply(text="for b"), model="openai/b")
    assert assemble(await call(model, model="b")).content == "for b"
    assert assemble(await call(model, model="b")).content == "for anyone"
    assert model.pending == 0
    assert assemble(await call(model, model="b")).content == "Hello world"  # no scenario `b`: `text`
    with pytest.raises(ModelError) as caught:
        await call(model, model="e429")
    assert caught.value.kind == "rate_limit"
    with pytest.raises(ValueError, match="unknown fake scenario 'nope'"):
        model.enqueue("nope")
    model.reset()
    assert model.requests == [] and model.pending == 0
    defaulted = ScriptedModel(default=lambda request: Reply(text=f"default for {request.model}"))
    assert assemble(await call(defaulted)).content == "default for text"


async def test_retries_and_fallbacks_behave_as_with_a_provider() -> None:
    model = ScriptedModel()
    model.enqueue(Reply(status=500), Reply(text="second try"), model="first")
    model.enqueue(Reply(status=503), Reply(status=503), model="first")
    model.enqueue(Reply(text="from the backup"), model="backup")
    first = fake_connector(model.base_url, model="first", connector_id="a.first")
    backup = fake_connector(model.base_url, model="backup", connector_id="b.backup")
    sleeps = Sleeps()
    retried = await drain([first], engines=model.engines(), policy=RetryPolicy(max_attempts=2), sleep=sleeps)
    assert assemble(retried).content == "second try" and sleeps.calls == [0.5]
    fell = await drain([first, backup], engines=model.engines(), policy=RetryPolicy(max_attempts=2), sleep=sleeps)
    [fallback] = [e for e in fell if isinstance(e, Fallback)]
    assert (fallback.from_connector, fallback.to_connector) == ("a.first", "b.backup")
    assert assemble(fell).content == "from the backup"
    assert [r.connector for r in model.requests] == ["a.first"] * 4 + ["b.backup"]


@pytest.fixture
async def stalled() -> AsyncIterator[tuple[ScriptedModel, asyncio.Task[list[CallEvent]]]]:
    """A call whose provider went silent after its first text, for an hour."""
    model = ScriptedModel()
    model.enqueue(Reply(text="Hello world", chunk_size=5, stall_after=2, stall_s=3600))
    connector = fake_connector(model.base_url, timeout_s=7200)
    task = asyncio.create_task(drain([connector], engines=model.engines()))
    try:
        yield model, task
    finally:
        task.cancel()


async def test_a_stall_honours_cancellation_and_the_provider_sees_the_caller_go(
    stalled: tuple[ScriptedModel, asyncio.Task[list[CallEvent]]],
) -> None:
    model, task = stalled
    [request] = await model.wait_for_requests(1)
    assert model.disconnects == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await model.wait_for_disconnects(1) == [request]


async def test_a_witness_that_is_never_satisfied_fails_loudly() -> None:
    with pytest.raises(TimeoutError, match=r"saw 0 of 2 calls within 0\.01 s"):
        await ScriptedModel().wait_for_requests(2, timeout=0.01)


def test_the_doubles_stand_in_for_the_provider_engines_only() -> None:
    model = ScriptedModel()
    engines = model.engines()
    scripted = dataclasses.replace(fake_connector(model.base_url), type="scripted")
    assert engines.get(fake_connector(model.base_url)) is model
    assert engines.get(fake_connector(model.base_url, engine="litellm")) is model
    assert engines.get(scripted) is not model
    assert model.engines(scripted=True).get(scripted) is model


async def test_the_testing_guide_example_runs_against_the_example_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The testing guide's test, exactly as shown, in the example app's folder (with the real weather MCP server)."""
    scope: dict[str, Any] = {}
    exec(compile(block("scripted-model"), "docs/guides/testing.md", "exec"), scope)
    monkeypatch.chdir(REPO)
    await scope["test_the_weather_assistant_answers_from_the_forecast"](tmp_path)
