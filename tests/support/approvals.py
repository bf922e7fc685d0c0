"""The approvals app: a `payer` assistant whose `tally` tool needs a person to approve each call, and the
ledger file that says how often it really ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.support import REPO
from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import server_files
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

# Every tally waits for a person; add needs nobody.
PAYER = "name: Payer\nmcp:\n  servers: [{server: testing, approve: [tally]}]\n  max_turns: 3\n"
APPROVE = {"decisions": [{"tool_call_id": "t1", "approve": True}]}
Events = list[dict[str, Any]]


def payer_files(base_url: str) -> dict[str, str]:
    """The app: its MCP server is a stdio subprocess (what a `yao-agent serve` of this folder starts)."""
    files = server_files(base_url)
    files["mcps/testing.yml"] = f"command: python\nargs: [-m, tests.support.mcp_server]\ncwd: {REPO}\n"
    files["assistants/payer/assistant.yml"] = PAYER
    return files


def payer_runtime(root: Path, store: SqlStore, provider: FakeProvider) -> Runtime:
    """The app on `store`, its MCP server in this process (fast; the same tools as the stdio one)."""
    rt = make_runtime(root, store, payer_files(provider.base_url))
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    return rt


def tally(ledger: Path, label: str, call_id: str) -> ToolCall:
    return ToolCall("testing__tally", json.dumps({"path": str(ledger), "label": label}), id=call_id)


def counted(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def waiting_reply(ledger: Path, text: str = "") -> Reply:
    """A reply asking for a tally (a person must approve) and an add (nobody must): neither runs yet."""
    return Reply(text=text, tool_calls=(tally(ledger, "paid", "t1"), add("a1")))


async def events_of(client: httpx.AsyncClient, path: str, body: object) -> Events:
    """The SSE events of one POST, read to the end."""
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        return [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]


def add(call_id: str) -> ToolCall:
    return ToolCall("testing__add", json.dumps({"a": 2, "b": 3}), id=call_id)
