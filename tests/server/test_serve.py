"""`yao-agent serve` and `yao-agent tokens` as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files
from tests.support.servers import Live, stopped
from tests.support.waits import free_port
from yao_agent.identity import Identity
from yao_agent.pipeline import Runtime
from yao_agent.server.serve import listen, server
from yao_agent.testing import FakeProvider, Reply


def test_tokens_are_printed_once_listed_by_prefix_and_revocable(tmp_path: Path) -> None:
    app = make_app(tmp_path, {})
    code, token = cli(app, "tokens", "create", "--user", "alice", "--team", "acme", "--label", "laptop")
    token = token.strip()
    assert code == 0 and token.startswith("ya_") and len(token) > 40
    code, listing = cli(app, "tokens", "list")
    header, row = (line.split() for line in listing.splitlines())
    assert header[:5] == ["id", "user", "team", "kind", "label"]
    assert row[0].startswith("tok_") and row[1:5] == ["alice", "acme", "member", "laptop"] and row[-1] == "-"
    assert token not in listing and token not in (app / ".yao" / "agent.db").read_bytes().decode("latin-1")
    assert cli(app, "tokens", "revoke", row[0]) == (0, "revoked\n")  # by the id as listed, whole
    assert cli(app, "tokens", "list")[1].splitlines()[1].split()[-1].startswith("20")
    assert cli(app, "tokens", "revoke", token[:12])[0] == 2


async def serve_process(app: Path, port: int, *options: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "yao_agent.cli", "--app", str(app), "serve", "--port", str(port), *options,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("slow_store", [False, True], ids=["at-once", "store-busy-for-a-while"])
async def test_serve_shuts_down_gracefully_storing_the_run_in_flight_past_the_drain(
    tmp_path: Path, slow_store: bool
) -> None:
    """A run still going when the drain's time is up is cancelled and stored. Also when storing it takes a
    while (the database busy): its stream still ends with its `stream_end`, never cut short by the shutdown."""
    async with FakeProvider() as provider:
        app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        made = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "tokens", "create", "--user", "alice",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        token = (await made.communicate())[0].decode().strip()
        port = free_port()
        server = await serve_process(app, port, "--drain-s", "0.5")
        try:
            assert server.stdout is not None
            banner = await asyncio.wait_for(server.stdout.readline(), 60)
            assert f"on http://127.0.0.1:{port}/" in banner.decode()
            provider.enqueue(Reply(text="w" * 400, chunk_size=1, delay_s=0.02))
            events: list[dict[str, Any]] = []
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                assert (await client.get("/healthz")).status_code == 200  # the banner comes once it listens
                body = {"messages": [{"role": "user", "content": "long"}]}
                headers = {"Authorization": f"Bearer {token}"}
                async with client.stream("POST", "/api/assistants/chat/runs", json=body, headers=headers) as response:
                    chat_id = response.headers["x-chat-id"]
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                            if len(events) == 5:
                                held = hold_the_store(app / ".yao" / "agent.db") if slow_store else None
                                server.send_signal(signal.SIGTERM)
                                if held is not None:
                                    asyncio.get_running_loop().call_later(1.5, held.close)
            assert await asyncio.wait_for(server.wait(), 30) == 0
        finally:
            await stopped(server)
    assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "cancelled")
    rt = await Runtime.open(app)  # the store only: reading it recovers nothing
    try:
        run = await rt.store.latest_run(Identity("alice"), chat_id)
        assert run is not None and run.status == "cancelled"
    finally:
        await rt.aclose()


def hold_the_store(db: Path) -> sqlite3.Connection:
    """Take SQLite's write lock (until the connection is closed), as a busy database would hold it."""
    conn = sqlite3.connect(db, timeout=5, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


async def test_a_second_server_on_a_taken_port_says_so_in_one_line_and_never_that_it_serves(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", {})
    port = free_port()
    first = await serve_process(app, port)
    assert first.stdout is not None
    try:
        banner = (await asyncio.wait_for(first.stdout.readline(), 60)).decode()
        assert banner.endswith(f" on http://127.0.0.1:{port}/\n"), banner
        second = await serve_process(app, port)
        out, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 1
        assert out == b""  # not a word of serving
        assert err.decode() == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
        async with httpx.AsyncClient(timeout=30) as client:  # the first one serves on
            assert (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(first.wait(), 30)
        finally:
            await stopped(first)
    assert first.returncode == 0


def test_an_address_that_cannot_be_had_is_an_error_line_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = make_app(tmp_path / "app", {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli(app, "serve", "--port", str(port)) == (1, "")
    assert capsys.readouterr().err == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert cli(app, "serve", "--host", "192.0.2.1", "--port", str(port)) == (1, "")  # TEST-NET: not this host's
    assert capsys.readouterr().err == f"error: cannot listen on 192.0.2.1:{port}: cannot assign requested address\n"


async def test_the_server_sends_each_reply_at_once_not_after_the_clients_ack(live: Live) -> None:
    """Nagle's algorithm is off on every connection `serve` accepts: with it on, a reply's last write on a
    kept-alive connection waits for the client's delayed ACK, some 40 ms a response."""
    sock = listen("127.0.0.1", 0)
    served = server(live.runs, "127.0.0.1", sock.getsockname()[1])
    task = asyncio.create_task(served.serve(sockets=[sock]))
    try:
        while not served.started:  # noqa: ASYNC110 (uvicorn says so by a flag alone)
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            [connection] = served.server_state.connections
            accepted = connection.transport.get_extra_info("socket")  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0  # pyright: ignore[reportUnknownMemberType]
        finally:
            writer.close()
    finally:
        served.should_exit = True
        await task


def test_a_hook_that_does_not_compile_keeps_the_server_from_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As bad YAML does: every run of its assistant would fail, so it is the author's `file:line`, exit 2."""
    files = {"hooks/h.js": "function Create(ctx, messages) {\n  return {;\n}\n",
             "assistants/hooked/assistant.yml": "name: Hooked\nhook: hooks/h.js\n"}  # fmt: skip
    app = make_app(tmp_path / "app", files)
    assert cli(app, "serve", "--port", str(free_port())) == (2, "")
    err = capsys.readouterr().err
    assert "hooks/h.js:2" in err and "SyntaxError" in err and "serving" not in err
