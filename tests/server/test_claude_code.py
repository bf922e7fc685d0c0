"""Claude Code, Anthropic's command-line agent, against the Anthropic door: `claude -p` with its base URL
set to the server answers with the assistant's words, offline.

Claude Code is an npm package with a native binary (hundreds of MB), not a Python one: the test runs
when `YAO_AGENT_TEST_CLAUDE` names that binary or `claude` is on the PATH, and is skipped otherwise.
It runs without Claude Code's own tools (`--tools ""`): the door refuses tools a client brings until the
client-tools machinery serves it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.servers import Live
from yao_agent.identity import Identity
from yao_agent.testing import FakeProvider, Reply

CLAUDE = os.environ.get("YAO_AGENT_TEST_CLAUDE") or shutil.which("claude")
pytestmark = pytest.mark.skipif(not CLAUDE, reason="Claude Code is not installed (npm @anthropic-ai/claude-code)")


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
