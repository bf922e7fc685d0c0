"""Claude Code, Anthropic's command-line agent, against the Anthropic door: `claude -p` with its base URL
set to the server answers with the assistant's words, offline.

Claude Code is an npm package with a native binary (hundreds of MB), not a Python one: the test runs
when `YAO_AGENT_TEST_CLAUDE` names that binary or `claude` is on the PATH, and is skipped otherwise.
Without its tools (`--tools ""`) it prints the assistant's answer; with them, the model's `tool_use`
reaches Claude Code, which runs its own tool here and sends the `tool_result` that continues the run.
Its side requests (a title, on its small model) go to a second assistant on a model of their own, so the
test's scripted replies reach the conversation they are written for.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall

CLAUDE = os.environ.get("YAO_AGENT_TEST_CLAUDE") or shutil.which("claude")
pytestmark = pytest.mark.skipif(not CLAUDE, reason="Claude Code is not installed (npm @anthropic-ai/claude-code)")


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with the default body limit: Claude Code's requests, its tools' schemas in them, are large."""
    files = server_files(provider.base_url)
    files["connectors/fake/side.yml"] = f"type: openai\nmodel: side\nbase_url: {provider.base_url}\napi_key: sk-x\n"
    files["assistants/side/assistant.yml"] = "name: Side\nconnector: fake.side\n"
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        yield served


async def claude(live: Live, home: Path, *args: str) -> tuple[int, str, str]:
    """`claude ARGS` as alice, offline: no update check, telemetry or other traffic but to the server."""
    assert CLAUDE is not None
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(home), "ANTHROPIC_BASE_URL": live.url,
        "ANTHROPIC_API_KEY": live.tokens["alice"], "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        "ANTHROPIC_SMALL_FAST_MODEL": "side", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "side", "CI": "1",
    }  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        CLAUDE, *args, env=env, cwd=home, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def test_claude_code_prints_the_assistants_answer(live: Live, provider: FakeProvider, tmp_path: Path) -> None:
    provider.enqueue(*[Reply(text="Hello from the assistant.")] * 5)  # (it may ask for a title as well)
    code, out, err = await claude(
        live, tmp_path, "-p", "Say hello", "--model", "chat", "--tools", "", "--output-format", "json"
    )
    assert code == 0, (out, err)
    said = json.loads(out)
    assert said["is_error"] is False and said["result"] == "Hello from the assistant.", said
    asked = [m for r in provider.requests for m in r.messages if m["role"] == "user"]
    assert any("Say hello" in json.dumps(m) for m in asked)
    chats = await live.rt.store.list_chats(Identity("alice"))
    assert chats  # stored as alice's, whose key it was


async def test_claude_code_runs_its_own_tool_the_model_calls(
    live: Live, provider: FakeProvider, tmp_path: Path
) -> None:
    note = tmp_path / "note.txt"
    write = json.dumps({"file_path": str(note), "content": "written by the assistant\n"})
    provider.enqueue(Reply(text="I will write it.", tool_calls=(ToolCall("Write", write, id="toolu_w1"),)),
                     Reply(text="The note is written."), model="text")  # fmt: skip
    code, out, err = await claude(live, tmp_path, "-p", "Write the note", "--model", "chat", "--allowedTools", "Write",
                                  "--output-format", "json")  # fmt: skip
    assert code == 0, (out, err)
    said = json.loads(out)
    assert said["is_error"] is False and said["result"] == "The note is written.", said
    assert note.read_text() == "written by the assistant\n"  # Claude Code ran its own tool
    chat_requests = [r for r in provider.requests if r.model == "text"]
    offered = [t["function"]["name"] for t in chat_requests[0].body["tools"]]
    assert "Write" in offered  # its tools, offered to the model as the client's
    results = [m for m in chat_requests[-1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["toolu_w1"]
    [chat] = await live.rt.store.list_chats(Identity("alice"))  # continued by its results: one chat
    history = await live.rt.store.history(Identity("alice"), chat.id)
    assert [m.role for m in history if m.role != "system"][-4:] == ["user", "assistant", "tool", "assistant"]
