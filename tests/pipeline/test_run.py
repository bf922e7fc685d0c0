"""The pipeline end to end: events in order, what is stored, on success and on every kind of failure."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, runs_of, stored, turn
from yao_agent.connectors import Engines
from yao_agent.connectors.deltas import Delta, Embedded, TextDelta
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import NotFound, PermissionDenied, UsageError
from yao_agent.events import Event, MessageDelta, MessageEnd, MessageStart, StreamEnd, StreamStart
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.step_inputs import ModelCall
from yao_agent.testing import Reply, ScriptedModel


async def test_a_plain_run_streams_in_order_and_stores_the_turn(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Hello, Alice!", chunk_size=4))
    events = await turn(rt, "hi")
    assert isinstance(events[0], StreamStart) and events[0].chat_id == "c1" and events[0].assistant_id == "chat"
    assert isinstance(events[1], MessageStart) and events[1].kind == "text"
    deltas = [e for e in events if isinstance(e, MessageDelta)]
    assert "".join(d.text or "" for d in deltas) == "Hello, Alice!" and len(deltas) == 4
    [done] = [e for e in events if isinstance(e, MessageEnd)]
    assert (done.content, done.status) == ("Hello, Alice!", "completed")
    end = end_of(events)
    assert (end.status, end.reason) == ("completed", "completed")
    assert end.usage == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18, "cost_usd": None, "calls": 1}
    assert [type(e).__name__ for e in events].count("StreamEnd") == 1
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "Hello, Alice!", "completed")]
    [request] = fake.requests
    assert request.messages == [{"role": "system", "content": "You are Chat."}, {"role": "user", "content": "hi"}]


async def test_the_next_turn_sends_history(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="one"), Reply(text="two"))
    await turn(rt, "first")
    await turn(rt, "second")
    assert fake.requests[1].messages[1:] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
    ]


async def test_non_streaming_drains_the_same_run(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="quiet answer"))
    result = await runs_of(rt).run(RunRequest("chat", ALICE, [{"role": "user", "content": "hi"}], chat_id="c9"))
    assert (result.status, result.reason, result.chat_id) == ("completed", "completed", "c9")
    assert [(m["role"], m["content"]) for m in result.messages] == [("user", "hi"), ("assistant", "quiet answer")]
    assert result.to_api()["usage"]["total_tokens"] == 18


async def test_a_new_chat_gets_an_id(rt: Runtime, fake: ScriptedModel) -> None:
    events = [e async for e in runs_of(rt).stream(RunRequest("chat", ALICE, [{"role": "user", "content": "x"}]))]
    start_event = events[0]
    assert isinstance(start_event, StreamStart) and start_event.chat_id.startswith("chat_")
    assert len(await stored(rt, start_event.chat_id)) == 2


async def test_provider_error_before_the_first_token_fails_the_run_and_keeps_the_input(
    rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(Reply(status=500, error_message="upstream exploded"))
    end = end_of(await turn(rt, "hello?"))
    assert (end.status, end.reason) == ("failed", "model_error")
    assert "provider error (HTTP 500): upstream exploded" in end.error["message"]
    assert await stored(rt) == [("user", "hello?", "completed")]
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("llm", "failed")]
    assert isinstance(given := point.steps[0].input, ModelCall)
    assert given.messages[-1] == {"role": "user", "content": "hello?"}


async def test_resume_after_a_500_completes_without_a_second_user_message(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(status=500), Reply(text="Sorry, here it is."))
    await turn(rt, "hello?")
    handle = await runs_of(rt).resume(ALICE, "c1")
    events = [e async for e in handle.events()]
    assert end_of(events).status == "completed"
    assert await stored(rt) == [("user", "hello?", "completed"), ("assistant", "Sorry, here it is.", "completed")]
    assert fake.requests[1].messages[-1] == {"role": "user", "content": "hello?"}
    assert await rt.store.resume_point(ALICE, "c1") is None  # a completed run clears it
    with pytest.raises(NotFound, match="has no resume point"):
        await runs_of(rt).resume(ALICE, "c1")


async def test_a_drop_mid_stream_stores_the_partial_reply_as_incomplete(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="The answer is forty-two", chunk_size=4, drop_after=3), Reply(text="again"))
    events = await turn(rt, "question")
    end = end_of(events)
    assert (end.status, end.reason) == ("failed", "model_error")
    [cut] = [e for e in events if isinstance(e, MessageEnd)]
    assert cut.status == "incomplete" and cut.content == "The answ"
    assert await stored(rt) == [("user", "question", "completed"), ("assistant", "The answ", "incomplete")]
    await turn(rt, "try again")
    assert {"role": "assistant", "content": "The answ"} not in fake.requests[1].messages


async def test_cancel_mid_stream_stores_incomplete_and_the_next_run_never_sees_it(
    rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(Reply(text="a" * 400, chunk_size=2, delay_s=0.02), Reply(text="fresh"))
    handle = await runs_of(rt).start(RunRequest("chat", ALICE, [{"role": "user", "content": "long one"}], chat_id="c1"))
    events: list[Event] = []
    async for event in handle.events():
        events.append(event)
        if isinstance(event, MessageDelta) and len(events) == 5:
            handle.cancel()
    end = end_of(events)
    assert (end.status, end.reason) == ("cancelled", "cancelled")
    [cut] = [e for e in events if isinstance(e, MessageEnd)]
    assert cut.status == "incomplete" and 0 < len(cut.content) < 400
    assert await stored(rt) == [("user", "long one", "completed"), ("assistant", cut.content, "incomplete")]
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and point.run.status == "cancelled" and point.steps[0].type == "llm"
    await fake.wait_for_disconnects(1)
    await turn(rt, "next")
    assert all(m.get("content") != cut.content for m in fake.requests[1].messages)


async def test_a_reader_that_leaves_cancels_the_run_which_is_still_stored(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="b" * 300, chunk_size=1, delay_s=0.01))
    stream = runs_of(rt).stream(RunRequest("chat", ALICE, [{"role": "user", "content": "go"}], chat_id="c1"))
    async for event in stream:
        if isinstance(event, MessageDelta):
            break
    await stream.aclose()
    run = await rt.store.latest_run(ALICE, "c1")
    assert run is not None and (run.status, run.reason) == ("cancelled", "cancelled")
    assert [row[2] for row in await stored(rt)] == ["completed", "incomplete"]


class Boom(Exception):
    pass


class BrokenEngine:
    """A model engine with a bug: it raises something no stage expects, after one token."""

    name = "openai"

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        yield TextDelta("half")
        raise Boom("a bug inside a stage")

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        raise Boom("a bug inside a stage")

    async def aclose(self) -> None:
        return None


async def test_an_unexpected_exception_is_flushed_then_propagates(tmp_path: Path, store: SqlStore) -> None:
    rt = make_runtime(tmp_path / "app", store, app_files("http://127.0.0.1:9/v1"))
    rt.engines = Engines({"openai": BrokenEngine()})
    events: list[Event] = []
    with pytest.raises(Boom):
        async for event in runs_of(rt).stream(
            RunRequest("chat", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1")
        ):
            events.append(event)
    end = end_of(events)
    assert (end.status, end.reason, end.error) == ("failed", "internal_error", {"message": "internal error: Boom"})
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "half", "incomplete")]
    run = await rt.store.latest_run(ALICE, "c1")
    assert run is not None and run.reason == "internal_error"


async def test_run_timeout(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    rt = make_runtime(tmp_path / "app", store, app_files(fake.base_url, limits="{timeout_s: 2}"), model=fake)
    fake.enqueue(Reply(text="slow " * 50, chunk_size=5, stall_after=3, stall_s=30))  # two pieces, then silence
    end = end_of(await turn(rt, "hi"))
    assert (end.status, end.reason) == ("failed", "timeout")
    assert end.error == {"message": "the run took longer than 2 s (limits.timeout_s)"}
    assert [row[2] for row in await stored(rt)] == ["completed", "incomplete"]
    await rt.engines.aclose()


async def test_a_missing_key_at_call_time_fails_the_run_naming_the_variable(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = app_files(fake.base_url)
    files["connectors/fake/model.yml"] = (
        f"type: openai\nmodel: text\nbase_url: {fake.base_url}\napi_key: $ENV.NO_SUCH_KEY\n"
    )
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    rt.environ = {}
    end = end_of(await turn(rt, "hi"))
    assert (end.status, end.reason) == ("failed", "model_error")
    assert "environment variable NO_SUCH_KEY is not set (needed by connectors/fake/model.yml:4 api_key)" in str(
        end.error
    )
    assert fake.requests == []


async def test_no_identity_is_refused_before_anything_exists(rt: Runtime, fake: ScriptedModel) -> None:
    with pytest.raises(PermissionDenied):
        await runs_of(rt).start(RunRequest("chat", None, [{"role": "user", "content": "hi"}], chat_id="c1"))
    assert await rt.store.check_chat(ALICE, "c1") is None
    assert fake.requests == []


async def test_access_rules_refuse_other_callers(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    files = app_files(fake.base_url)
    files["assistants/private/assistant.yml"] = "name: Private\naccess: {teams: [acme]}\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    with pytest.raises(NotFound, match=r"^unknown assistant 'private' \(known: chat\)$"):  # as over HTTP
        await runs_of(rt).start(RunRequest("private", ALICE, [{"role": "user", "content": "hi"}]))
    events = await turn(rt, "hi", who=Identity("bob", "acme"), assistant="private")
    assert end_of(events).status == "completed"
    await rt.engines.aclose()


async def test_another_tenants_chat_is_not_found(rt: Runtime, fake: ScriptedModel) -> None:
    await turn(rt, "mine")
    with pytest.raises(NotFound, match="no chat 'c1'"):
        await runs_of(rt).start(
            RunRequest("chat", Identity("mallory"), [{"role": "user", "content": "hi"}], chat_id="c1")
        )
    with pytest.raises(NotFound):
        await runs_of(rt).start(
            RunRequest("chat", Identity("alice", "acme"), [{"role": "user", "content": "x"}], chat_id="c1")
        )
    assert len(await stored(rt)) == 2


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "messages: expected a non-empty list of messages"),
        ([{"role": "robot", "content": "x"}], "messages[0].role: expected one of system, user, assistant, tool"),
        ([{"role": "user", "content": 3}], "messages[0].content: expected a string or a non-empty list"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id: expected the id of the tool call"),
    ],
)
async def test_malformed_input_is_a_usage_error(rt: Runtime, messages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        await runs_of(rt).start(RunRequest("chat", ALICE, messages, chat_id="c1"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # A request sets call options only: what else a run decides is the app's and its hooks' (a connector
        # picked this way used to be taken as a Create hook's choice; MCP servers failed the run).
        (
            {"connector": "demo.echo"},
            "options: 'connector' is not an option a request may set (expected one of: "
            "temperature, top_p, max_tokens, max_completion_tokens, stop, seed, "
            "presence_penalty, frequency_penalty, logit_bias, reasoning_effort, "
            "parallel_tool_calls, response_format)",
        ),
        ({"mcp_servers": ["testing"]}, "options: 'mcp_servers' is not an option a request may set"),
        ({"tool_choice": "none"}, "options: 'tool_choice' is not an option a request may set"),  # the operator's
        # It reaches the hooks, the provider and the store as JSON (it used to cost the run its journal).
        ({"temperature": float("nan")}, "options: 'temperature' has no JSON form"),
    ],
)
async def test_an_option_a_request_may_not_set_is_a_usage_error(
    rt: Runtime, fake: ScriptedModel, options: dict[str, Any], message: str
) -> None:
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1", options=options)
    with pytest.raises(UsageError, match=re.escape(message)):
        await runs_of(rt).start(request)
    assert await stored(rt) == [] and fake.requests == []


async def test_a_requests_call_options_reach_the_model_over_the_assistants(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    """The assistant's options as its file lists them, then the request's: the provider's body is the same
    whichever way the run carries them."""
    files = app_files(fake.base_url)
    files["assistants/chat/assistant.yml"] += "options: {max_tokens: 50, temperature: 0.1}\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue("echo")
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1",
                         options={"seed": 7, "temperature": 0.5})  # fmt: skip
    assert end_of([e async for e in runs_of(rt).stream(request)]).status == "completed"
    [sent] = fake.requests
    options = {k: v for k, v in sent.body.items() if k not in ("model", "messages", "stream", "stream_options")}
    assert list(options.items()) == [("max_tokens", 50), ("temperature", 0.5), ("seed", 7)]
    await rt.engines.aclose()


async def test_stream_end_is_last_and_once_even_on_failure(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(status=401))
    events = await turn(rt, "hi")
    assert [isinstance(e, StreamEnd) for e in events].count(True) == 1 and isinstance(events[-1], StreamEnd)


async def test_runs_on_one_chat_take_turns(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue("echo", "echo")
    await asyncio.gather(turn(rt, "one"), turn(rt, "two"))
    rows = await stored(rt)
    first, second = rows[0][1], rows[2][1]
    assert {first, second} == {"one", "two"}  # whichever was accepted first runs first...
    assert rows == [  # ...and each answer directly follows its question: never interleaved
        ("user", first, "completed"),
        ("assistant", f"echo: {first}", "completed"),
        ("user", second, "completed"),
        ("assistant", f"echo: {second}", "completed"),
    ]
