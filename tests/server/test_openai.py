"""What an OpenAI client sees of runs it cannot look into: server-side tools, and runs that do not complete."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.pipeline.conftest import make_runtime
from tests.server.conftest import Live, openai_client, running, server_files
from tests.tools.servers import server as testing_server
from yao_agent.dsl import load_app
from yao_agent.identity import Identity
from yao_agent.ids import CountingIds
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

REPO = Path(__file__).resolve().parents[2]
ALICE = Identity("alice")
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
WEATHER = "Here is what the weather service says: Paris day 1: "


@pytest.fixture
async def example(store: SqlStore) -> AsyncIterator[Live]:
    """The repository's example app: its `weather` assistant calls a real MCP server over stdio."""
    async with running(Runtime(app=load_app(REPO), store=store, ids=CountingIds())) as served:
        yield served


async def test_server_side_tools_never_reach_the_openai_client(example: Live) -> None:
    async with openai_client(example) as client:
        raw = await client.chat.completions.with_raw_response.create(model="weather", messages=ASK)  # type: ignore[arg-type]
        stream = await client.chat.completions.create(model="weather", messages=ASK, stream=True)  # type: ignore[arg-type]
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


async def test_a_streamed_error_reaches_the_openai_client(live: Live, fake: FakeProvider) -> None:
    fake.enqueue(Reply(text="The answer is cut", chunk_size=4, drop_after=3))  # two text pieces, then the line drops
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


@asynccontextmanager
async def guarded(tmp_path: Path, store: SqlStore, fake: FakeProvider, limits: str) -> AsyncIterator[Live]:
    files = server_files(fake.base_url, limits=limits)
    files["mcps/testing.yml"] = "command: python\n"
    files["assistants/tooled/assistant.yml"] = TOOLED
    files["hooks/h.js"] = HOOK
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
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
    "model_error": ("chat", LIMITS, [Reply(status=500, error_message="upstream down")], 502),
    "context_overflow": ("chat", LIMITS, [Reply(status=400, error_code="context_length_exceeded")], 400),
    "timeout": ("chat", "{timeout_s: 1}", [Reply(text="slow " * 50, chunk_size=5, stall_after=3, stall_s=30)], 504),
}


@pytest.mark.parametrize("reason", list(OUTCOMES))
async def test_a_run_that_does_not_complete_gets_a_fitting_answer(
    tmp_path: Path, store: SqlStore, fake: FakeProvider, reason: str
) -> None:
    assistant, limits, replies, status = OUTCOMES[reason]
    ask: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    async with guarded(tmp_path, store, fake, limits) as live, live.client() as client:
        fake.enqueue(*replies)
        response = await client.post("/v1/chat/completions", json={"model": assistant, **ask})
        fake.enqueue(*replies)
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


async def test_the_openai_client_does_not_retry_a_run_whose_tool_failed(
    tmp_path: Path, store: SqlStore, fake: FakeProvider
) -> None:
    async with guarded(tmp_path, store, fake, LIMITS) as live:
        fake.enqueue(*OUTCOMES["tool_error"][2] * 3)
        async with openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["alice"]) as client:  # retries on
            with pytest.raises(openai.InternalServerError) as failed:
                await client.chat.completions.create(model="tooled", messages=[{"role": "user", "content": "go"}])
    assert failed.value.status_code == 502 and "unknown tool 'testing__nope'" in failed.value.message
    assert len(fake.requests) == 1  # one run: its tools were not run again by a retry
