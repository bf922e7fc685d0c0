"""`yao-agent validate --mcp` starts the MCP servers the assistants use, checks their tool filters, stops them."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Mapping
from pathlib import Path

from tests.support.apps import make_app
from tests.support.mcp_server import server as testing_server
from tests.support.tools import SERVERS_PY
from yao_agent.cli import main
from yao_agent.dsl.refs import known_list

# The test server, started through a wrapper that appends its pid to a file: to count starts and find leftovers.
COUNTED_PY = f"""\
import os, runpy, sys
with open(sys.argv[1], "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")
sys.argv = [{SERVERS_PY!r}]
runpy.run_path({SERVERS_PY!r}, run_name="__main__")
"""


def tools_app(root: Path, assistants: dict[str, str], more: Mapping[str, str] | None = None) -> Path:
    """An app whose `testing` MCP server is the test server, counted into `root/pids`."""
    files: dict[str, str | bytes | None] = {
        "mcps/counted.py": COUNTED_PY,
        "mcps/testing.yml": f"command: python\nargs: [mcps/counted.py, {root / 'pids'}]\ntimeout_s: 20\n",
    }
    files.update({f"assistants/{name}/assistant.yml": text for name, text in assistants.items()})
    return make_app(root / "app", {**files, **(more or {})})


def validate(app: Path, *extra: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main(["validate", "--app", str(app), *extra], out=out)
    return code, out.getvalue().splitlines()


def started(root: Path) -> list[int]:
    pids = root / "pids"
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


def running(pid: int) -> bool:
    """Whether `pid` still exists (an unreaped zombie counts: it is a leftover too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_filter_naming_a_tool_the_server_lacks_is_located(tmp_path: Path) -> None:
    tooled = "name: Tooled\nmcp:\n  servers:\n    - server: testing\n      tools:\n        - add\n        - ech0\n"
    app = tools_app(tmp_path, {"tooled": tooled, "plain": "name: Plain\nmcp: {servers: [testing]}\n"})
    code, lines = validate(app, "--mcp")
    names = [tool.name for tool in asyncio.run(testing_server.list_tools())]
    assert code == 2
    assert lines == [
        "assistants/tooled/assistant.yml:7 mcp.servers[0].tools[1]: server 'testing' has no tool 'ech0' "
        f"(did you mean 'echo'? known: {known_list(names)})",
        "1 error",
    ]
    [pid] = started(tmp_path)  # one start for both assistants
    assert not running(pid)


def test_filters_naming_real_tools_pass_and_the_server_is_stopped(tmp_path: Path) -> None:
    app = tools_app(tmp_path, {"tooled": "name: Tooled\nmcp:\n  servers: [{server: testing, tools: [add, echo]}]\n"})
    assert validate(app, "--mcp") == (0, ["OK: 2 assistants, 1 connector, 1 MCP server"])
    [pid] = started(tmp_path)
    assert not running(pid)


def test_a_server_that_cannot_start_is_named_with_its_file_and_why(tmp_path: Path) -> None:
    uses = "name: Tooled\nmcp:\n  servers: [ghost, dying, {server: testing, tools: [add, nope]}]\n"
    dying = 'import sys; print("no API key for the dying server", file=sys.stderr); sys.exit(3)'
    more = {
        "mcps/ghost.yml": "command: no-such-command-for-yao-agent\n",
        "mcps/dying.yml": f"command: python\nargs: [-c, '{dying}']\n",
    }
    app = tools_app(tmp_path, {"tooled": uses}, more)
    code, lines = validate(app, "--mcp")
    assert code == 2
    assert lines[0].startswith("assistants/tooled/assistant.yml:3 mcp.servers[2].tools[1]: server 'testing' has no ")
    assert lines[1:] == [
        "mcps/dying.yml: MCP server 'dying' could not be started: it closed the connection "
        "(its last words: no API key for the dying server)",
        "mcps/ghost.yml: MCP server 'ghost' could not be started: FileNotFoundError: [Errno 2] "
        "No such file or directory: 'no-such-command-for-yao-agent'",
        "3 errors",
    ]
    [pid] = started(tmp_path)
    assert not running(pid)


def test_only_the_servers_assistants_use_are_started_and_only_with_the_flag(tmp_path: Path) -> None:
    unused = "command: no-such-command-for-yao-agent\n"
    app = tools_app(tmp_path, {"tooled": "name: Tooled\nmcp:\n  servers: [{server: testing, tools: [nope]}]\n"},
                    {"mcps/unused.yml": unused})  # fmt: skip
    assert validate(app) == (0, ["OK: 2 assistants, 1 connector, 2 MCP servers"])
    assert started(tmp_path) == []
    code, lines = validate(app, "--mcp")  # the unused server, which cannot start, is not started
    assert (code, lines[1:]) == (2, ["1 error"])
    assert lines[0].startswith("assistants/tooled/assistant.yml:3 mcp.servers[0].tools[0]: server 'testing' has no "
                               "tool 'nope' (known: add, ")  # fmt: skip
    assert len(started(tmp_path)) == 1


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    mute = "import os, sys, time\nopen(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\ntime.sleep(60)\n"
    server = f"command: python\nargs: [mcps/mute.py, {tmp_path / 'pids'}]\ntimeout_s: 1\n"
    more = {"mcps/mute.py": mute, "mcps/mute.yml": server}
    app = tools_app(tmp_path, {"tooled": "name: Tooled\nmcp: {servers: [mute]}\n"}, more)
    assert validate(app, "--mcp") == (2, ["mcps/mute.yml: MCP server 'mute' did not answer within 1 s of starting",
                                          "1 error"])  # fmt: skip
    [pid] = started(tmp_path)
    assert not running(pid)


def test_a_tool_to_approve_is_checked_like_a_filter(tmp_path: Path) -> None:
    tooled = "name: Tooled\nmcp:\n  servers:\n    - server: testing\n      approve: [tally, tallly]\n"
    every = "name: All\nmcp: {servers: [{server: testing, approve: all}]}\n"
    app = tools_app(tmp_path, {"tooled": tooled, "all": every})
    code, lines = validate(app, "--mcp")
    assert code == 2
    assert lines[0].startswith(
        "assistants/tooled/assistant.yml:5 mcp.servers[0].approve[1]: server 'testing' has no tool 'tallly' "
        "(did you mean 'tally'?"
    )
    assert lines[1:] == ["1 error"]
