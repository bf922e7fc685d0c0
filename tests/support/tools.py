"""A runtime whose `tooled` assistant uses the `testing` MCP server (in this process or as a child), and tool
calls for a model's scripts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import REPO
from tests.support.runtimes import app_files, make_runtime
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import ScriptedModel, ToolCall
from yao_agent.tools import ToolManager

SERVERS_PY = str(REPO / "tests" / "support" / "mcp_server.py")  # run as a script: `python SERVERS_PY [http PORT]`
ASSISTANT = "name: Tooled\nmcp:\n  servers: [testing]\n  max_turns: {max_turns}\n"
# A `tooled` assistant whose every tally waits for a person.
APPROVING = "name: Tooled\nmcp:\n  servers: [{server: testing, approve: [tally]}]\n  max_turns: 3\n"


def tooled(
    root: Path, store: SqlStore, fake: ScriptedModel, *,
    mcp: str = "command: python\nargs: [-m, tests.support.mcp_server]\n",
    limits: str = "{max_turns: 10, max_tool_retries: 3}", assistant: str = ASSISTANT.format(max_turns=3),
    more: dict[str, str] | None = None,
) -> Runtime:  # fmt: skip
    """A runtime whose `tooled` assistant uses the `testing` MCP server (`mcp`: its mcps/testing.yml)."""
    files = app_files(fake.base_url, limits=limits)
    files["mcps/testing.yml"] = mcp
    files["assistants/tooled/assistant.yml"] = assistant
    return make_runtime(root, store, {**files, **(more or {})}, model=fake)


def in_process(runtime: Runtime) -> Runtime:
    """`runtime` with its `testing` server in this process."""
    # Imported here, not at the top: the pipeline's conftest imports this module, and creating the MCP server
    # before pytest has set up its log capture makes the SDK put a handler on the root logger, which would
    # print every library's INFO lines on the stderr of the tests that read it.
    from tests.support.mcp_server import server as testing_server

    runtime.tools = ToolManager(runtime.app.mcps, root=runtime.app.root, in_process={"testing": testing_server})
    return runtime


def call(name: str, arguments: object, call_id: str) -> ToolCall:
    return ToolCall(name, arguments if isinstance(arguments, str) else json.dumps(arguments), id=call_id)


def weather_call(call_id: str = "call_w1", city: str = "Paris") -> ToolCall:
    """The model calling the client's `get_weather` tool (the client-tools tests' own tool)."""
    return ToolCall("get_weather", json.dumps({"city": city}), id=call_id)
