"""The tool manager against real MCP servers: in-process, stdio subprocesses and streamable HTTP.

`tests/support/mcp_server.py` has one tool per behaviour; `mcps/weather_server.py` is the example app's server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.mcp_server import server as testing_server
from tests.support.tools import SERVERS_PY
from tests.support.waits import free_port, reached, wait_until
from yao_agent.dsl import load_app
from yao_agent.dsl.envvars import EnvValue
from yao_agent.dsl.specs import McpServerSpec, McpUse
from yao_agent.errors import ToolError
from yao_agent.tools import ToolManager, ToolOutcome, ToolSpec


def stdio_spec(
    server_id: str = "testing", *, timeout_s: float = 10.0, args: tuple[str, ...] = (SERVERS_PY,)
) -> McpServerSpec:
    return McpServerSpec(
        id=server_id,
        file=f"mcps/{server_id}.yml",
        command=EnvValue("python", "test"),
        args=tuple(EnvValue(arg, "test") for arg in args),
        timeout_s=timeout_s,
    )


def http_spec(url: str, server_id: str = "remote") -> McpServerSpec:
    return McpServerSpec(id=server_id, file=f"mcps/{server_id}.yml", transport="http", url=EnvValue(url, "test"))


async def offered(manager: ToolManager, server_id: str) -> dict[str, ToolSpec]:
    return {spec.tool: spec for spec in await manager.tools_for([McpUse(server_id)])}


async def call(manager: ToolManager, spec: ToolSpec, arguments: object = None) -> ToolOutcome:
    return await manager.call(spec, "" if arguments is None else json.dumps(arguments))


def process_gone(pid: int) -> bool:
    """True once `pid` no longer runs (a zombie waiting to be reaped counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


@pytest.fixture
async def memory() -> AsyncIterator[ToolManager]:
    """The testing server in-process, with a short timeout for the slow-tool tests."""
    spec = McpServerSpec(id="mem", file="mcps/mem.yml", timeout_s=1.0)
    manager = ToolManager({"mem": spec}, root=REPO, in_process={"mem": testing_server}, max_result_chars=200)
    yield manager
    await manager.aclose()


@pytest.fixture
async def stdio() -> AsyncIterator[ToolManager]:
    manager = ToolManager({"testing": stdio_spec()}, root=REPO)
    yield manager
    await manager.aclose()


# -- the catalogue ---------------------------------------------------------------------------------


async def test_tools_are_named_after_the_server_and_carry_its_schema(memory: ToolManager) -> None:
    tools = await memory.tools_for([McpUse("mem")])
    add = memory.find("mem__add", tools)
    assert add is not None
    assert (add.server, add.tool, add.description) == ("mem", "add", "Add two integers.")
    assert add.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.to_openai() == {
        "type": "function",
        "function": {"name": "mem__add", "description": "Add two integers.", "parameters": add.parameters},
    }
    assert all(spec.name == f"mem__{spec.tool}" for spec in tools)
    assert memory.find("mem__nope", tools) is None
    assert memory.find("add", tools) is None


async def test_a_dotted_server_id_gives_an_underscored_prefix() -> None:
    async with ToolManager({}, root=REPO, in_process={"team.tools": testing_server}) as manager:
        tools = await manager.tools_for([McpUse("team.tools", ("echo",))])
    assert [(spec.name, spec.server) for spec in tools] == [("team_tools__echo", "team.tools")]


async def test_a_filter_keeps_only_the_named_tools_and_warns_once_about_missing_ones(
    memory: ToolManager, caplog: pytest.LogCaptureFixture
) -> None:
    use = McpUse("mem", ("echo", "add", "teleport"))
    first = await memory.tools_for([use])
    second = await memory.tools_for([use])
    assert [spec.name for spec in first] == ["mem__add", "mem__echo"]  # the server's order
    assert second == first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("MCP server 'mem' (mcps/mem.yml) has no tool 'teleport' (it offers: add, big, ")


async def test_the_list_is_fetched_once_and_reused(memory: ToolManager) -> None:
    first = await memory.tools_for([McpUse("mem")])
    second = await memory.tools_for([McpUse("mem")])
    assert all(a is b for a, b in zip(first, second, strict=True))  # the same specs: not fetched and built again


async def test_an_unknown_server_is_a_tool_error_naming_it(memory: ToolManager) -> None:
    with pytest.raises(ToolError, match=r"^unknown MCP server 'nope' \(known: mem\)$"):
        await memory.tools_for([McpUse("nope")])


# -- arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            '{"text": "hi" "times": 2}',
            "invalid JSON in the arguments: Expecting ',' delimiter at line 1 column 15 "
            "(expected a JSON object matching the tool's schema)",
        ),
        ("[1, 2]", "the arguments are an array, not an object (expected a JSON object matching the tool's schema)"),
        ('"hi"', "the arguments are a string, not an object (expected a JSON object matching the tool's schema)"),
        ("null", "the arguments are null, not an object (expected a JSON object matching the tool's schema)"),
        ('{"text": "hi", "times": "two"}', "arguments.times: 'two' is not of type 'integer'"),
        ("{}", "arguments: 'text' is a required property"),
        ("", "arguments: 'text' is a required property"),
        ('{"times": 1.5}', "arguments: 'text' is a required property; arguments.times: 1.5 is not of type 'integer'"),
    ],
)
async def test_bad_arguments_come_back_to_the_model_as_retryable_errors(
    memory: ToolManager, arguments: str, message: str
) -> None:
    echo = (await offered(memory, "mem"))["echo"]
    outcome = await memory.call(echo, arguments)
    assert outcome == ToolOutcome(result=None, error=message, retryable=True)
    assert outcome.text() == f"Error: {message}"


async def test_a_schema_error_deep_in_the_arguments_names_its_path(memory: ToolManager) -> None:
    total = (await offered(memory, "mem"))["total"]
    outcome = await call(memory, total, {"numbers": [1, "x"]})
    assert outcome.error == "arguments.numbers[1]: 'x' is not of type 'integer'"
    assert (await call(memory, total, {"numbers": [1, 2]})).result == "3"


async def test_empty_arguments_mean_an_empty_object(memory: ToolManager) -> None:
    pid = (await offered(memory, "mem"))["pid"]
    assert await memory.call(pid, "") == ToolOutcome(result=str(os.getpid()), error=None, retryable=False)


# -- results and tool errors -----------------------------------------------------------------------


async def test_a_result_is_the_text_parts_joined(memory: ToolManager) -> None:
    tools = await offered(memory, "mem")
    outcome = await call(memory, tools["words"], {"text": "sunny and warm"})
    assert outcome == ToolOutcome(result="sunny\nand\nwarm", error=None, retryable=False)
    assert outcome.text() == "sunny\nand\nwarm"


async def test_an_empty_result_still_tells_the_model_something(memory: ToolManager) -> None:
    silence = (await offered(memory, "mem"))["silence"]
    outcome = await call(memory, silence)
    assert (outcome.result, outcome.error) == ("", None)
    assert outcome.text() == "(the tool returned no output)"


async def test_structured_content_stands_in_when_there_is_no_text(memory: ToolManager) -> None:
    measurements = (await offered(memory, "mem"))["measurements"]
    outcome = await call(memory, measurements, {"city": "Lima"})
    assert outcome.result == {"city": "Lima", "readings": [1, 2, 3]}
    assert outcome.text() == '{"city": "Lima", "readings": [1, 2, 3]}'


async def test_a_long_result_is_cut_with_a_note(memory: ToolManager) -> None:
    big = (await offered(memory, "mem"))["big"]
    outcome = await call(memory, big, {"size": 1000})
    assert outcome.text() == "x" * 200 + "\n[truncated: the result has 1,000 characters; only the first 200 are shown]"


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("refuse", {"reason": "policy"}, "Error executing tool refuse: refused: policy"),
        ("explode", {"reason": "x"}, "Error executing tool explode"),  # the server keeps crash details to itself
    ],
)
async def test_a_tool_reported_error_is_retryable_with_the_tools_words(
    memory: ToolManager, tool: str, arguments: dict[str, str], message: str
) -> None:
    spec = (await offered(memory, "mem"))[tool]
    outcome = await call(memory, spec, arguments)
    assert outcome == ToolOutcome(result=None, error=message, retryable=True)
    assert outcome.text() == message


async def test_a_protocol_error_is_not_retryable(memory: ToolManager) -> None:
    spec = (await offered(memory, "mem"))["protocol_fail"]
    outcome = await call(memory, spec)
    assert outcome == ToolOutcome(
        result=None, error="MCP server 'mem' failed the call to 'protocol_fail': custom protocol error", retryable=False
    )


async def test_a_tool_the_server_no_longer_has_is_not_retryable(memory: ToolManager) -> None:
    await memory.tools_for([McpUse("mem")])
    gone = ToolSpec(name="mem__vanished", server="mem", tool="vanished", description="", parameters={"type": "object"})
    outcome = await call(memory, gone)
    assert outcome == ToolOutcome(
        result=None, error="MCP server 'mem' has no tool 'vanished' any more", retryable=False
    )


async def test_a_call_on_an_unknown_server_is_not_retryable(memory: ToolManager) -> None:
    ghost = ToolSpec(name="ghost__x", server="ghost", tool="x", description="", parameters={"type": "object"})
    outcome = await call(memory, ghost)
    assert outcome == ToolOutcome(result=None, error="unknown MCP server 'ghost' (known: mem)", retryable=False)


async def test_a_slow_tool_times_out_and_the_server_stays_usable(memory: ToolManager) -> None:
    tools = await offered(memory, "mem")
    outcome = await call(memory, tools["nap"], {"seconds": 60})  # only the timeout can end it
    assert outcome == ToolOutcome(result=None, error="tool timed out after 1 s", retryable=False)
    assert (await call(memory, tools["add"], {"a": 1, "b": 1})).result == "2"


# -- concurrency and cancellation ------------------------------------------------------------------


async def test_parallel_calls_each_get_their_own_result(memory: ToolManager) -> None:
    nap = (await offered(memory, "mem"))["nap"]
    finished: list[str] = []

    async def timed(label: str, seconds: float) -> ToolOutcome:
        outcome = await call(memory, nap, {"seconds": seconds, "label": label})
        finished.append(label)
        return outcome

    outcomes = await asyncio.gather(timed("slow", 0.3), timed("fast", 0.05), timed("middle", 0.15))
    assert [o.result for o in outcomes] == ["woke slow", "woke fast", "woke middle"]
    assert finished == ["fast", "middle", "slow"]


async def test_cancelling_a_call_stops_the_tool_in_process(memory: ToolManager, tmp_path: Path) -> None:
    tools = await offered(memory, "mem")
    marker = tmp_path / "nap"
    task = asyncio.create_task(call(memory, tools["nap_marked"], {"seconds": 60, "marker": str(marker)}))
    await wait_until(lambda: reached(marker, "started"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: reached(marker, "cancelled"))  # stopped where it was, not left to finish
    assert not reached(marker, "finished")
    assert (await call(memory, tools["add"], {"a": 2, "b": 2})).result == "4"


# -- stdio servers ---------------------------------------------------------------------------------


async def test_the_example_weather_server_runs_from_the_app_yaml() -> None:
    app = load_app(REPO)
    async with ToolManager(app.mcps, root=app.root) as manager:
        tools = await manager.tools_for(app.assistant("weather").mcp.servers)
        assert [spec.name for spec in tools] == ["weather__forecast"]
        outcome = await manager.call(tools[0], '{"city": "Paris", "days": 2}')
        bad = await manager.call(tools[0], '{"city": "Paris", "days": 9}')
    assert outcome.error is None
    assert outcome.text().splitlines()[0].startswith("Paris day 1: ")
    assert len(outcome.text().splitlines()) == 2
    assert bad == ToolOutcome(
        result=None, error="Error executing tool forecast: days must be between 1 and 7, got 9", retryable=True
    )


async def test_a_stdio_server_runs_our_python_in_the_app_root_with_only_its_env_and_stderr_goes_to_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="yao_agent.mcp")
    monkeypatch.setenv("TOOLS_TEST_SECRET", "s3cret-for-the-tool-0042")
    monkeypatch.setenv("TOOLS_TEST_PARENT", "inherited")  # the server's own environment is not the tool's
    yml = f"command: python\nargs: ['{SERVERS_PY}']\nenv: {{SECRET: $ENV.TOOLS_TEST_SECRET}}\n"
    app = load_app(make_app(tmp_path, {"mcps/testing.yml": yml}))
    async with ToolManager(app.mcps, root=app.root) as manager:
        tools = await offered(manager, "testing")
        where = await call(manager, tools["where"])
        secret = await call(manager, tools["getenv"], {"name": "SECRET"})
        parent = await call(manager, tools["getenv"], {"name": "TOOLS_TEST_PARENT"})
        shout = await call(manager, tools["shout"])
        await wait_until(lambda: "noise on stderr" in caplog.text)
    assert where.result == f"{sys.executable}|{tmp_path}"
    # The tool got its declared variable, and said it: what it says never carries a resolved secret.
    assert (secret.result, parent.result, shout.result) == ("****", "<unset>", "ok")
    assert [r.name for r in caplog.records if r.getMessage() == "noise on stderr"] == ["yao_agent.mcp.testing"]
    captured = capfd.readouterr()
    assert "noise on stderr" not in captured.out + captured.err


async def test_a_missing_env_variable_stops_the_start_and_names_the_variable(tmp_path: Path) -> None:
    yml = f"command: python\nargs: ['{SERVERS_PY}']\nenv: {{KEY: $ENV.TOOLS_TEST_UNSET}}\n"
    app = load_app(make_app(tmp_path, {"mcps/testing.yml": yml}))
    async with ToolManager(app.mcps, root=app.root, environ={}) as manager:
        with pytest.raises(ToolError) as caught:
            await manager.tools_for([McpUse("testing")])
        spec = ToolSpec(name="testing__pid", server="testing", tool="pid", description="", parameters={})
        outcome = await call(manager, spec)
    expected = (
        "MCP server 'testing' cannot start: environment variable TOOLS_TEST_UNSET is not set "
        "(needed by mcps/testing.yml:3 env.KEY)"
    )
    assert caught.value.message == expected
    assert outcome == ToolOutcome(result=None, error=expected, retryable=False)


async def test_a_server_that_cannot_start_is_a_tool_error_with_its_last_words() -> None:
    crash = stdio_spec("crashy", args=("-c", "import sys; sys.exit('no API key configured')"))
    missing = McpServerSpec(id="missing", file="mcps/missing.yml", command=EnvValue("/nonexistent/mcp-server", "t"))
    silent = stdio_spec("silent", timeout_s=0.5, args=("-c", "import sys; sys.stdin.read()"))
    async with ToolManager({"crashy": crash, "missing": missing, "silent": silent}, root=REPO) as manager:
        with pytest.raises(ToolError) as crashed:
            await manager.tools_for([McpUse("crashy")])
        with pytest.raises(ToolError) as absent:
            await manager.tools_for([McpUse("missing")])
        with pytest.raises(ToolError) as mute:
            await manager.tools_for([McpUse("silent")])
    assert crashed.value.message == (
        "MCP server 'crashy' (mcps/crashy.yml) could not be started: it closed the connection "
        "(its last words: no API key configured)"
    )
    assert absent.value.message == (
        "MCP server 'missing' (mcps/missing.yml) could not be started: "
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )
    assert mute.value.message == "MCP server 'silent' (mcps/silent.yml) did not answer within 0.5 s of starting"


async def test_a_server_started_ahead_that_cannot_start_is_launched_once_for_its_first_use(tmp_path: Path) -> None:
    launches = tmp_path / "launches"
    script = (
        f"import os, sys; open({str(launches)!r}, 'a').write(f'{{os.getpid()}} '); sys.exit('no API key configured')"
    )
    async with ToolManager({"crashy": stdio_spec("crashy", args=("-c", script))}, root=REPO) as manager:
        manager.warm([McpUse("crashy"), McpUse("not-declared")])  # as `chat` does before the first run
        await wait_until(launches.exists)
        first = int(launches.read_text())
        await wait_until(lambda: process_gone(first))  # the start has failed, with nobody waiting for it
        with pytest.raises(ToolError) as caught:
            await manager.tools_for([McpUse("crashy")])
        assert launches.read_text().split() == [str(first)]  # launched once
        with pytest.raises(ToolError):
            await manager.tools_for([McpUse("crashy")])  # a later use tries again
        assert len(launches.read_text().split()) == 2
    assert caught.value.message == (
        "MCP server 'crashy' (mcps/crashy.yml) could not be started: it closed the connection "
        "(its last words: no API key configured)"
    )


async def test_one_stdio_server_serves_concurrent_calls_each_paired_with_its_own_result(stdio: ToolManager) -> None:
    pid = ToolSpec(name="testing__pid", server="testing", tool="pid", description="", parameters={})
    pids = await asyncio.gather(*(call(stdio, pid) for _ in range(4)))  # all arrive before the server is up
    assert len({o.result for o in pids}) == 1
    assert pids[0].result != str(os.getpid())
    nap = (await offered(stdio, "testing"))["nap"]
    finished: list[str] = []

    async def timed(label: str, seconds: float) -> ToolOutcome:
        outcome = await call(stdio, nap, {"seconds": seconds, "label": label})
        finished.append(label)
        return outcome

    outcomes = await asyncio.gather(timed("slow", 0.4), timed("fast", 0.0), timed("middle", 0.2))
    assert [o.result for o in outcomes] == ["woke slow", "woke fast", "woke middle"]
    assert finished == ["fast", "middle", "slow"]


async def test_cancelling_a_stdio_call_cancels_the_request_on_the_server(stdio: ToolManager, tmp_path: Path) -> None:
    tools = await offered(stdio, "testing")
    pid = (await call(stdio, tools["pid"])).result
    marker = tmp_path / "nap"
    task = asyncio.create_task(call(stdio, tools["nap_marked"], {"seconds": 60, "marker": str(marker)}))
    await wait_until(lambda: reached(marker, "started"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # at once: the call is not waited for
    assert (await call(stdio, tools["add"], {"a": 2, "b": 3})).result == "5"
    await wait_until(lambda: reached(marker, "cancelled"))  # the server was told, and stopped it
    assert not reached(marker, "finished")
    assert (await call(stdio, tools["pid"])).result == pid  # the same server, not a restarted one


async def test_a_server_killed_mid_call_fails_that_call_and_is_restarted_on_next_use(
    stdio: ToolManager, tmp_path: Path
) -> None:
    tools = await offered(stdio, "testing")
    first_pid = int((await call(stdio, tools["pid"])).result)
    marker = tmp_path / "nap"
    task = asyncio.create_task(call(stdio, tools["nap_marked"], {"seconds": 60, "marker": str(marker)}))
    await wait_until(lambda: reached(marker, "started"))
    os.kill(first_pid, signal.SIGKILL)
    outcome = await asyncio.wait_for(task, 30)  # ended by the server's death, not by the nap
    assert outcome == ToolOutcome(
        result=None,
        error="MCP server 'testing' stopped during the call to 'nap_marked' (the connection closed); "
        "it will be restarted on its next use",
        retryable=False,
    )
    second = await call(stdio, tools["add"], {"a": 20, "b": 22})
    assert second.result == "42"
    assert int((await call(stdio, tools["pid"])).result) != first_pid


def seen_dead(manager: ToolManager, server_id: str) -> bool:
    """Whether the manager has seen the server's process go (its pipes closed): where a server that died
    while idle is by its next call in production. Nothing announces it, so the test reads the state."""
    session = manager._links[server_id]._session  # pyright: ignore[reportPrivateUsage]
    return session is None or session.dead()


async def test_a_server_that_died_while_idle_is_restarted_and_the_call_succeeds(stdio: ToolManager) -> None:
    tools = await offered(stdio, "testing")
    first_pid = int((await call(stdio, tools["pid"])).result)
    os.kill(first_pid, signal.SIGKILL)
    await wait_until(lambda: process_gone(first_pid) and seen_dead(stdio, "testing"))
    outcome = await call(stdio, tools["pid"])
    assert outcome.error is None
    assert int(outcome.result) != first_pid


async def test_aclose_stops_the_server_processes() -> None:
    manager = ToolManager({"one": stdio_spec("one"), "two": stdio_spec("two")}, root=REPO)
    await manager.tools_for([McpUse("one"), McpUse("two")])
    pids: list[int] = []
    for server_id in ("one", "two"):
        pid = ToolSpec(name=f"{server_id}__pid", server=server_id, tool="pid", description="", parameters={})
        pids.append(int((await call(manager, pid)).result))
    assert all(not process_gone(p) for p in pids)
    await manager.aclose()
    assert all(process_gone(p) for p in pids)
    with pytest.raises(ToolError, match="the tool manager is closed"):
        await manager.tools_for([McpUse("one")])


# -- streamable HTTP -------------------------------------------------------------------------------


def start_http_server(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, SERVERS_PY, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the HTTP MCP server did not start") from None
            time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """One HTTP server for the module: a process, unlike an MCP session, is not bound to a test's loop."""
    port = free_port()
    process = start_http_server(port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(process)


async def test_an_http_server_lists_and_runs_tools_with_the_configured_headers(http_url: str) -> None:
    spec = McpServerSpec(
        id="remote", file="mcps/remote.yml", transport="http", url=EnvValue(http_url, "t"),
        headers={"X-Team-Token": EnvValue("$ENV.TOOLS_TEST_TOKEN", "t", secret=True)},
    )  # fmt: skip
    async with ToolManager({"remote": spec}, root=REPO, environ={"TOOLS_TEST_TOKEN": "tok-1"}) as manager:
        tools = await offered(manager, "remote")
        nap = tools["nap"]
        outcomes = await asyncio.gather(
            call(manager, nap, {"seconds": 0.3, "label": "slow"}), call(manager, nap, {"seconds": 0.0, "label": "fast"})
        )
        refused = await call(manager, tools["refuse"], {"reason": "no"})
        token = await call(manager, tools["header"], {"name": "X-Team-Token"})
    assert tools["add"].name == "remote__add"
    assert [o.result for o in outcomes] == ["woke slow", "woke fast"]
    assert token.result == "tok-1"
    assert refused == ToolOutcome(result=None, error="Error executing tool refuse: refused: no", retryable=True)


async def test_cancelling_an_http_call_cancels_it_on_the_server(http_url: str, tmp_path: Path) -> None:
    async with ToolManager({"remote": http_spec(http_url)}, root=REPO) as manager:
        tools = await offered(manager, "remote")
        marker = tmp_path / "nap"
        task = asyncio.create_task(call(manager, tools["nap_marked"], {"seconds": 60, "marker": str(marker)}))
        await wait_until(lambda: reached(marker, "started"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await call(manager, tools["add"], {"a": 1, "b": 2})).result == "3"
        await wait_until(lambda: reached(marker, "cancelled"))  # the server was told, and stopped it
    assert not reached(marker, "finished")


async def test_an_unreachable_http_server_is_a_tool_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with ToolManager({"remote": http_spec(url)}, root=REPO) as manager:
        with pytest.raises(ToolError) as caught:
            await manager.tools_for([McpUse("remote")])
    assert caught.value.message.startswith("MCP server 'remote' (mcps/remote.yml) is unreachable: ConnectError")


async def test_an_http_server_that_went_away_is_reconnected_when_it_is_back() -> None:
    port = free_port()
    process = start_http_server(port)
    try:
        async with ToolManager({"remote": http_spec(f"http://127.0.0.1:{port}/mcp")}, root=REPO) as manager:
            add = (await offered(manager, "remote"))["add"]
            assert (await call(manager, add, {"a": 1, "b": 1})).result == "2"
            stop(process)
            down = await call(manager, add, {"a": 1, "b": 1})
            process = start_http_server(port)
            back = await call(manager, add, {"a": 2, "b": 2})
    finally:
        stop(process)
    assert down.retryable is False
    assert down.error is not None and down.error.startswith("MCP server 'remote' (mcps/remote.yml) is unreachable")
    assert back.result == "4"


def test_importing_the_tools_package_does_not_import_the_mcp_sdk_or_litellm() -> None:
    code = "import sys, yao_agent.tools; print(sorted(m for m in ('mcp', 'litellm', 'httpx2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"


async def test_a_missing_env_variable_in_http_headers_names_the_variable() -> None:
    token = EnvValue("Bearer $ENV.TOOLS_TEST_TOKEN", "mcps/remote.yml:4 headers.Authorization", secret=True)
    spec = McpServerSpec(
        id="remote", file="mcps/remote.yml", transport="http", url=EnvValue("http://127.0.0.1:9/mcp", "t"),
        headers={"Authorization": token},
    )  # fmt: skip
    async with ToolManager({"remote": spec}, root=REPO, environ={}) as manager:
        with pytest.raises(ToolError) as caught:
            await manager.tools_for([McpUse("remote")])
    assert caught.value.message == (
        "MCP server 'remote' cannot connect: environment variable TOOLS_TEST_TOKEN is not set "
        "(needed by mcps/remote.yml:4 headers.Authorization)"
    )
