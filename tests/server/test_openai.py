"""What an OpenAI client sees of runs it cannot look into: server-side tools, and runs that do not complete."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files
from yao_agent.dsl import load_app
from yao_agent.identity import Identity
from yao_agent.ids import CountingIds
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

REPO = Path(__file__).resolve().parents[2]
ALICE = Identity("alice")
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What's the weather in Paris?"}]
WEATHER = "Here is what the weather service says: Paris day 1: "


@pytest.fixture
async def example(store: SqlStore) -> AsyncIterator[Live]:
    """The repository's example app: its `weather` assistant calls a real MCP server over stdio."""
    async with running(Runtime(app=load_app(REPO), store=store, ids=CountingIds())) as served:
        yield served


async def test_server_side_tools_never_reach_the_openai_client(example: Live) -> None:
    async with openai_client(example) as client:
        raw = await client.chat.completions.with_raw_response.create(model="weather", messages=ASK)
        stream = await client.chat.completions.create(model="weather", messages=ASK, stream=True)
        chunks = [chunk async for chunk in stream]
    [choice] = raw.parse().choices
    assert choice.message.content is not None and choice.message.content.startswith(WEATHER)
    assert (choice.message.tool_calls, choice.finish_reason) == (None, "stop")
    assert set(json.loads(raw.text)["choices"][0]["message"]) == {"role", "content"}
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert all(d.tool_calls is None and d.function_call is None for d in deltas)
    assert all(set(c.choices[0].model_dump(exclude_none=True)["delta"]) <= {"role", "content"} for c in chunks)
    assert "".join(d.content or "" for d in deltas).startswith(WEATHER)
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]
    # The tools did run, on the server: the chat holds the call and its result.
    history = await example.rt.store.history(ALICE, raw.headers["x-chat-id"])
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].name == "weather__forecast" and history[2].content is not None


async def test_a_streamed_error_reaches_the_openai_client(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(
        Reply(text="The answer is cut", chunk_size=4, drop_after=3)
    )  # two text pieces, then the line drops
    seen: list[str] = []
    async with openai_client(live) as client:
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError) as failed:
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen) == "The answer is cut"[:8]  # what came before the failure was shown
    assert (failed.value.type, failed.value.code) == ("model_error", "model_error")
    assert failed.value.message


# --- runs that do not complete, as a non-streamed completion ------------------------------------------

TOOLED = "name: Tooled\nmcp: {servers: [testing], max_turns: 20}\n"
HOOK = "function Create(ctx, messages) { throw new TypeError('no way') }\n"
PROMPTED = "name: Prompted\nprompts:\n  - role: system\n    content: 'Split {{ 10 // (metadata.parts or 0) }} ways.'\n"


@asynccontextmanager
async def guarded(tmp_path: Path, store: SqlStore, provider: FakeProvider, limits: str) -> AsyncGenerator[Live]:
    files = server_files(provider.base_url, limits=limits)
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = TOOLED
    files["hooks/h.js"] = HOOK
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
    files["assistants/prompted/assistant.yml"] = PROMPTED
    rt = make_runtime(tmp_path / "app", store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    async with running(rt) as served:
        yield served


def echo(text: str, n: int, said: str = "") -> Reply:
    return Reply(text=said, tool_calls=(ToolCall("testing__echo", json.dumps({"text": text}), id=f"c{n}"),))


LIMITS = "{max_turns: 7, timeout_s: 30}"
OUTCOMES: dict[str, tuple[str, str, list[Reply], int]] = {
    # reason: (assistant, limits, the model's replies, the completion's status)
    "max_turns": ("tooled", LIMITS, [echo(str(n), n, f"Looking, step {n}.") for n in range(7)], 200),
    "loop_detected": ("tooled", LIMITS, [echo("again", n) for n in range(8)], 508),
    "tool_error": ("tooled", LIMITS, [Reply(tool_calls=(ToolCall("testing__nope", "{}", id="c1"),))], 502),
    "hook_error": ("hooked", LIMITS, [], 502),
    "prompt_error": ("prompted", LIMITS, [], 502),  # it was an internal_error, a 500: the author's mistake
    "model_error": ("chat", LIMITS, [Reply(status=500, error_message="upstream down")], 502),
    "context_overflow": ("chat", LIMITS, [Reply(status=400, error_code="context_length_exceeded")], 400),
    "timeout": ("chat", "{timeout_s: 1}", [Reply(text="slow " * 50, chunk_size=5, stall_after=3, stall_s=30)], 504),
}


@pytest.mark.parametrize("reason", list(OUTCOMES))
async def test_a_run_that_does_not_complete_gets_a_fitting_answer(
    tmp_path: Path, store: SqlStore, provider: FakeProvider, reason: str
) -> None:
    assistant, limits, replies, status = OUTCOMES[reason]
    ask: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    async with guarded(tmp_path, store, provider, limits) as live, live.client() as client:
        provider.enqueue(*replies)
        response = await client.post("/v1/chat/completions", json={"model": assistant, **ask})
        provider.enqueue(*replies)
        native = await client.post(f"/api/assistants/{assistant}/runs?stream=false", json=ask)
    assert response.status_code == status, response.text
    if status == 200:  # a limit cut it short: what was said, and the finish_reason a token limit gets
        [choice] = response.json()["choices"]
        assert (choice["message"]["content"], choice["finish_reason"]) == ("Looking, step 6.", "length")
    else:
        error = response.json()["error"]
        assert error["type"] == reason and error["message"]
        assert error["code"] == ("context_length_exceeded" if reason == "context_overflow" else reason)
        retry = response.headers.get("x-should-retry")
        assert retry == (None if reason in ("model_error", "timeout") else "false")
    # The native JSON tells the same end, always as a 200 with the run's result.
    assert native.status_code == 200, native.text
    assert (native.json()["status"], native.json()["reason"]) == ("failed", reason)
    assert native.json()["error"]["message"]
    if reason == "prompt_error":  # where the author looks
        assert (
            native.json()["error"] | {"file": "assistants/prompted/assistant.yml", "line": 4} == native.json()["error"]
        )


PICTURE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
IMAGE = [{"type": "text", "text": "what is this?"}, PICTURE]


@pytest.mark.parametrize("refused_by", ["connector", "provider"])
async def test_a_request_the_model_refuses_is_a_400_not_a_gateway_failure(
    tmp_path: Path, store: SqlStore, provider: FakeProvider, refused_by: str
) -> None:
    """Fixed: an image sent to a connector that cannot read images (or a provider's 400) was a 502."""
    content: Any = IMAGE if refused_by == "connector" else "hi"
    async with guarded(tmp_path, store, provider, LIMITS) as live, live.client() as client:
        provider.enqueue(Reply(status=400, error_message="invalid 'messages[0]'"))
        ask = {"model": "chat", "messages": [{"role": "user", "content": content}]}
        response = await client.post("/v1/chat/completions", json=ask)
    assert response.status_code == 400, response.text
    assert response.headers.get("x-should-retry") == "false"
    error = response.json()["error"]
    said = "capabilities.vision is false" if refused_by == "connector" else "invalid 'messages[0]'"
    assert error["type"] == "model_error" and said in error["message"]
    assert len(provider.requests) == (0 if refused_by == "connector" else 1)


async def test_the_openai_client_does_not_retry_a_run_whose_tool_failed(
    tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> None:
    async with guarded(tmp_path, store, provider, LIMITS) as live:
        provider.enqueue(*OUTCOMES["tool_error"][2] * 3)
        async with openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["alice"]) as client:  # retries on
            with pytest.raises(openai.InternalServerError) as failed:
                await client.chat.completions.create(model="tooled", messages=[{"role": "user", "content": "go"}])
    assert failed.value.status_code == 502 and "unknown tool 'testing__nope'" in failed.value.message
    assert len(provider.requests) == 1  # one run: its tools were not run again by a retry


# --- every field of the request is honoured or refused --------------------------------------------------

FOR_USER = "prompts:\n  - {role: system, content: 'For {{ metadata.user }} ({{ metadata.safety_identifier }}).'}\n"
JOKE_SCHEMA = {
    "type": "object",
    "properties": {"setup": {"type": "string"}, "punchline": {"type": "string"}},
    "required": ["setup", "punchline"],
    "additionalProperties": False,
}
CALL_FIELDS: dict[str, Any] = {
    "temperature": 0.25,
    "top_p": 0.5,
    "max_tokens": 300,
    "max_completion_tokens": 200,
    "stop": ["END", "\n\n"],
    "seed": 42,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "logit_bias": {"50256": -100, "15": 2.5},
    "reasoning_effort": "low",
    "parallel_tool_calls": False,
    "response_format": {"type": "json_schema", "json_schema": {"name": "Joke", "schema": JOKE_SCHEMA, "strict": True}},
}


@pytest.fixture
async def fielded(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """`plain` calls the fake through the openai engine, `lite` through litellm, `echo` is scripted; their system
    prompts show the run's metadata. The first two have tools (`parallel_tool_calls` goes with them) and
    reason (`reasoning_effort` goes to models that do)."""
    files = server_files(provider.base_url)
    model = (
        f"type: openai\nmodel: text\nbase_url: {provider.base_url}\napi_key: sk-x\ncapabilities: {{reasoning: true}}\n"
    )
    files["connectors/fake/plain.yml"] = model
    files["connectors/fake/lite.yml"] = model + "engine: litellm\n"
    files["mcps/testing.yml"] = "command: python\n"
    tools = "mcp: {servers: [testing]}\n"
    for name, connector, more in [
        ("plain", "fake.plain", tools),
        ("lite", "fake.lite", tools),
        ("echo", "demo.echo", ""),
    ]:
        files[f"assistants/{name}/assistant.yml"] = f"name: {name}\nconnector: {connector}\n{more}{FOR_USER}"
    rt = make_runtime(tmp_path / "app", store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    async with running(rt) as served:
        yield served


def ask(assistant: str, **fields: Any) -> dict[str, Any]:
    return {"model": assistant, "messages": [{"role": "user", "content": "tell me one"}], **fields}


@pytest.mark.parametrize("assistant", ["plain", "lite"])
@pytest.mark.parametrize("stream", [False, True])
async def test_each_model_call_field_reaches_the_provider(
    fielded: Live, provider: FakeProvider, assistant: str, stream: bool
) -> None:
    provider.enqueue(Reply(text='{"setup": "a", "punchline": "b"}'))
    body = ask(assistant, **CALL_FIELDS, user="u-42", safety_identifier="hash-7", stream=stream)
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    [sent] = provider.requests
    assert {name: sent.body.get(name) for name in CALL_FIELDS} == CALL_FIELDS
    assert sent.messages[0] == {"role": "system", "content": "For u-42 (hash-7)."}  # user: the run's metadata
    assert "user" not in sent.body and "safety_identifier" not in sent.body  # (not the provider's business)


async def test_the_fields_do_not_trouble_a_scripted_connector(fielded: Live, provider: FakeProvider) -> None:
    # Not response_format: it makes the answer one the schema must fit, which an echo is not
    # (tests/server/test_structured_output_api.py).
    fields = {name: value for name, value in CALL_FIELDS.items() if name != "response_format"}
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", json=ask("echo", **fields, user="u-42"))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "echo: tell me one"
    assert provider.requests == []


class Joke(BaseModel):
    """What LangChain's `with_structured_output(Joke)` (and the openai client's `parse`) ask for."""

    setup: str
    punchline: str


async def test_structured_output_through_the_official_client(fielded: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='{"setup": "Why?", "punchline": "Because."}'))
    async with openai_client(fielded) as client:
        parsed = await client.chat.completions.parse(
            model="plain", messages=[{"role": "user", "content": "a joke"}], response_format=Joke, seed=7,
            stop="END", temperature=0, user="u-1", logit_bias={"42": 10},
        )  # fmt: skip
    assert parsed.choices[0].message.parsed == Joke(setup="Why?", punchline="Because.")
    sent = provider.requests[0].body
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "Joke"
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert set(sent["response_format"]["json_schema"]["schema"]["properties"]) == {"setup", "punchline"}
    assert (sent["seed"], sent["stop"], sent["temperature"], sent["logit_bias"]) == (7, "END", 0, {"42": 10})


async def test_json_object_mode_reaches_the_provider(fielded: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='{"ok": true}'))  # JSON mode: the answer must be a JSON object
    async with openai_client(fielded) as client:
        await client.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "as JSON"}], response_format={"type": "json_object"}
        )
    assert provider.requests[0].body["response_format"] == {"type": "json_object"}


REFUSED: list[tuple[str, Any]] = [
    ("n", 2),
    ("logprobs", True),
    ("top_logprobs", 3),
    ("top_logprobs", 0),
    ("functions", [{"name": "f", "parameters": {}}]),
    ("function_call", {"name": "f"}),
    ("audio", {"voice": "alloy", "format": "wav"}),
    ("modalities", ["text", "audio"]),
    ("store", True),
    ("service_tier", "flex"),
    ("prediction", {"type": "content", "content": "x"}),
    ("web_search_options", {}),
    ("prompt_cache_key", "k"),
    ("verbosity", "low"),
    ("top_k", 5),  # not OpenAI's: unknown
    ("chat_template_kwargs", {"enable_thinking": False}),
]


@pytest.mark.parametrize(("field", "value"), REFUSED, ids=[f"{f}={v!r}"[:40] for f, v in REFUSED])
async def test_what_cannot_be_honoured_is_refused_naming_the_field(
    fielded: Live, provider: FakeProvider, field: str, value: Any
) -> None:
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", json=ask("plain", **{field: value}))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["param"] == field
    assert error["message"].startswith(f"{field}: ") and error["code"] in ("unsupported_parameter", "unsupported_value")
    assert provider.requests == [] and await fielded.rt.store.list_chats(ALICE) == []


async def test_the_official_client_sees_a_refusal_with_its_param(fielded: Live, provider: FakeProvider) -> None:
    async with openai_client(fielded) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}], n=3)
    assert (refused.value.param, refused.value.code) == ("n", "unsupported_value")
    assert "n: only one choice" in refused.value.message


HARMLESS: dict[str, Any] = {  # null, or the value OpenAI assumes when the field is absent, for each refused field
    "n": 1,
    "logprobs": False,
    "top_logprobs": None,
    "functions": [],
    "function_call": "auto",
    "audio": None,
    "modalities": ["text"],
    "store": False,
    "service_tier": "auto",
    "prediction": None,
    "web_search_options": None,
    "prompt_cache_key": None,
    "verbosity": None,
    "top_k": None,
    "chat_template_kwargs": None,
}


async def test_a_refused_field_at_null_or_its_default_asks_for_nothing(fielded: Live, provider: FakeProvider) -> None:
    """Every refused field of REFUSED, when it asks for nothing, is accepted (and reaches nobody)."""
    assert set(HARMLESS) == {field for field, _ in REFUSED}
    extra = {"stream_options": {"include_usage": False, "include_obfuscation": False}, "metadata": {"topic": "jokes"}}
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", json=ask("plain", **HARMLESS, **extra))
        again = await client.post("/v1/chat/completions", json=ask("plain", tool_choice="auto", service_tier="default"))
        refused = await client.post("/v1/chat/completions", json=ask("plain", **{**HARMLESS, "n": 2}))
    assert (response.status_code, again.status_code) == (200, 200), response.text
    assert refused.json()["error"]["param"] == "n"  # (one field asking for something is enough)
    sent = provider.requests[0].body
    assert [name for name in HARMLESS if name in sent] == []
    assert {t["function"]["name"] for t in sent["tools"]} >= {"testing__echo"}


BAD: list[tuple[str, Any, str]] = [
    # (field, value, a piece of the message)
    ("stop", 5, "expected a non-empty string or a list of 1 to 4"),
    ("stop", ["a", "b", "c", "d", "e"], "list of 1 to 4"),
    ("stop", [], "list of 1 to 4"),
    ("stop", ["ok", 3], "list of 1 to 4"),
    ("stop", "", "non-empty string"),
    ("stop", "\ud800", "unpaired UTF-16 surrogate"),
    ("seed", "7", "expected a whole number"),
    ("seed", 1.5, "expected a whole number"),
    ("seed", 2**64, "less than"),
    ("seed", True, "expected a whole number"),
    ("logit_bias", {"abc": 1}, "token ids"),
    ("logit_bias", {"1": 500}, "from -100 to 100"),
    ("logit_bias", {"1": "high"}, "from -100 to 100"),
    ("logit_bias", [1, 2], "expected an object"),
    ("temperature", "hot", "expected a number"),
    ("temperature", 2.5, "at most 2"),
    ("top_p", -0.1, "at least 0"),
    ("presence_penalty", 3, "at most 2"),
    ("frequency_penalty", -3, "at least -2"),
    ("max_tokens", 0, "at least 1"),
    ("max_completion_tokens", "100", "expected a whole number"),
    ("reasoning_effort", "max", "'low'"),
    ("parallel_tool_calls", "yes", "expected true or false"),
    ("response_format", "json", "expected an object"),
    ("response_format", {"type": "xml"}, "'json_schema'"),
    ("response_format", {"type": "json_schema"}, "json_schema is given with type json_schema"),
    ("response_format", {"type": "text", "json_schema": {"name": "x"}}, "json_schema is given with type json_schema"),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "a joke"}}, "json_schema.name"),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "j", "schema": []}}, "json_schema.schema"),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "j", "schema": {"\ud800": 1}}}, "surrogate"),
    ("user", 42, "expected a string"),
    ("n", 0, "at least 1"),
    ("n", "2", "expected a whole number"),
    ("tool_choice", 5, "expected auto, none, required or a function"),
    ("tool_choice", "sometimes", "expected auto, none, required or a function"),
    ("tools", [{"type": "function", "function": {"name": "a b"}}], "tools.0.function.name"),
    ("tools", [{"type": "function", "function": {"name": "f"}, "extra": 1}], "tools.0.extra"),
    ("stream_options", {"include_usage": "yes"}, "include_usage"),
    ("stream_options", {"include_obfuscation": True}, "include_obfuscation"),
    ("stream_options", {"includeUsage": True}, "includeUsage"),
    ("stream", "true", "expected true or false"),
]


@pytest.mark.parametrize(("field", "value", "said"), BAD, ids=[f"{f}={v!r}"[:40] for f, v, _ in BAD])
async def test_a_wrong_type_or_value_is_a_400_naming_the_field(
    fielded: Live, provider: FakeProvider, field: str, value: Any, said: str
) -> None:
    content = json.dumps(ask("plain", **{field: value})).encode()  # (a lone surrogate goes as its JSON escape)
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", content=content,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request", field), error
    assert error["message"].startswith(field) and said in error["message"], error
    assert "Input should" not in error["message"] and "Value error" not in error["message"]  # never pydantic's words
    assert provider.requests == []


@pytest.mark.parametrize("name", ["\r", "top k", "x\ny", ""])
async def test_an_unknown_field_with_an_odd_name_is_refused_in_one_readable_line(fielded: Live, name: str) -> None:
    content = json.dumps(ask("plain", **{name: 1})).encode()
    async with fielded.client() as client:
        response = await client.post("/v1/chat/completions", content=content,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith(json.dumps(name) + ": unknown field"), error
    assert error["param"] == name
