"""Claude Code, Anthropic's command-line agent, against the Anthropic door: `claude -p` with its base URL
set to the server answers with the assistant's words, offline.

Claude Code is an npm package with a native binary (hundreds of MB), not a Python one: the test runs
when `YAO_AGENT_TEST_CLAUDE` names that binary or `claude` is on the PATH, and is skipped otherwise.
It runs without Claude Code's own tools (`--tools ""`): the door refuses tools a client brings until the
client-tools machinery serves it, and Claude Code shows that refusal as it is.
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
from yao_agent.testing import FakeProvider, Reply

CLAUDE = os.environ.get("YAO_AGENT_TEST_CLAUDE") or shutil.which("claude")
pytestmark = pytest.mark.skipif(not CLAUDE, reason="Claude Code is not installed (npm @anthropic-ai/claude-code)")


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with the default body limit: Claude Code's requests, its tools' schemas in them, are large."""
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url))) as served:
        yield served


async def claude(live: Live, home: Path, *args: str) -> tuple[int, str, str]:
    """`claude ARGS` as alice, offline: no update check, telemetry or other traffic but to the server."""
    assert CLAUDE is not None
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(home), "ANTHROPIC_BASE_URL": live.url,
        "ANTHROPIC_API_KEY": live.tokens["alice"], "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        "ANTHROPIC_SMALL_FAST_MODEL": "chat", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "chat", "CI": "1",
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
    # With its own tools, it says why the door refuses them.
    code, out, err = await claude(live, tmp_path, "-p", "Say hello", "--model", "chat", "--output-format", "json")
    said = json.loads(out)
    assert said["is_error"] is True and "tools: not supported yet" in said["result"], said
