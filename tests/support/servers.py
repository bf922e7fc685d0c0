"""A live server: a real uvicorn on loopback serving the runs of a runtime, with tokens for its tenants, or
`yao-agent serve` as an OS process; and what a test reads of its HTTP answers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncGenerator, Collection, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn

from tests.support import REPO
from tests.support.runtimes import app_files
from tests.support.waits import free_port
from yao_agent.identity import OPERATOR, Identity
from yao_agent.pipeline import Runtime
from yao_agent.server.serve import config
from yao_agent.service.runs import Runs


@dataclass
class Live:
    """A running server: its base URL, its runs (and their runtime), and a token per tenant."""

    url: str
    runs: Runs
    tokens: dict[str, str]

    @property
    def rt(self) -> Runtime:
        return self.runs.rt

    def client(self, who: str = "alice", **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)


def openai_client(live: Live, **extra: Any) -> openai.AsyncOpenAI:
    """The official client, as alice, without its automatic retries (each test says what it sends)."""
    return openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["alice"], max_retries=0, **extra)


ARTIFACTS = REPO / "test-artifacts"
SAVED: list[Path] = []  # the artifacts this session wrote, named at its end


def artifact(name: str) -> Path:
    """Where a test saves the file `name` for people to look at after the run (CI keeps test-artifacts/)."""
    ARTIFACTS.mkdir(exist_ok=True)
    SAVED.append(ARTIFACTS / name)
    return ARTIFACTS / name


# bob_admin is bob with a team admin token (`tokens create --admin`): the same person, whose chats are bob's,
# who may also change acme's role mappings and budgets and see its usage.
TENANTS = {"alice": Identity("alice"), "bob": Identity("bob", "acme"), "carol": Identity("carol", "acme"),
           "bob_admin": Identity("bob", "acme", admin=True)}  # fmt: skip


async def serve(runs: Runs, max_body_bytes: int | None = None) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """`runs` under uvicorn as `yao-agent serve` runs them (its protocol, its limits), on a port the system picks."""
    settings = runs.app.config.server
    if max_body_bytes is not None:
        settings = replace(settings, max_body_bytes=max_body_bytes)
    server = uvicorn.Server(config(runs, "127.0.0.1", 0, settings))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, task, f"http://127.0.0.1:{port}"


def server_files(base_url: str, **options: str) -> dict[str, str]:
    files = app_files(base_url, **options)
    files["assistants/private/assistant.yml"] = "name: Private\naccess: {teams: [acme]}\n"
    files["connectors/demo/echo.yml"] = "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n"
    return files


@asynccontextmanager
async def running(rt: Runtime, max_body_bytes: int | None = None) -> AsyncGenerator[Live]:
    """The runs of `rt` served on loopback, with a token per tenant; closed (engines, tools, hooks) afterwards,
    the tokens' last-use writes ended (the store is the caller's, closed after this)."""
    tokens = {name: await rt.store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
    runs = Runs(rt)
    server, task, url = await serve(runs, max_body_bytes=max_body_bytes)
    try:
        yield Live(url, runs, tokens)
    finally:
        server.should_exit = True
        await task
        await runs.tenancy.tokens.aclose()
        await rt.engines.aclose()
        await rt.tools.aclose()
        await rt.hooks.aclose()


async def stopped(process: asyncio.subprocess.Process) -> None:
    """Kill a server a failed test left running."""
    if process.returncode is None:
        process.kill()
        await process.wait()


def said(err: Path) -> str:
    """What a server wrote to its stderr (read when it failed to start or to stop)."""
    return err.read_text()


@asynccontextmanager
async def serve_process(
    app: Path, err: Path, *flags: str, env: Mapping[str, str] | None = None, unset: Collection[str] = ()
) -> AsyncGenerator[str]:
    """`yao-agent serve` of `app` in an OS process of its own, with `flags` after `serve`, `env` over this
    process's environment (less the names in `unset`) and its stderr in `err`; its base URL. Stopped with
    SIGTERM at the end, which it must answer by exiting 0."""
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if k not in unset}
    with err.open("w") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "serve", "--port", str(port), *flags,
            stdout=asyncio.subprocess.PIPE, stderr=errors, env={**inherited, "PYTHONPATH": str(REPO), **(env or {})},
            cwd=REPO,
        )  # fmt: skip
    try:
        assert process.stdout is not None
        banner = await asyncio.wait_for(process.stdout.readline(), 60)  # it prints it once it listens
        assert f"127.0.0.1:{port}" in banner.decode(), said(err)
        yield f"http://127.0.0.1:{port}"
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0, said(err)
    finally:
        await stopped(process)


def serving(app: Path, db: str, err: Path) -> AbstractAsyncContextManager[str]:
    """`yao-agent serve` of the app in an OS process of its own on the database `db`; its base URL."""
    return serve_process(app, err, "--db", db)


async def sse(response: httpx.Response) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events


def says(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def assert_error(response: httpx.Response, status: int, kind: str | None = None) -> dict[str, str]:
    """The contract's error: the status, JSON `{"error": {"type", "message"}}`, a message a person can read
    (on the Anthropic route, Anthropic's shape: the type is then its `details.error_code`)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    if body.get("type") == "error":  # the Anthropic route's shape: our own type is its details.error_code
        assert set(body) == {"type", "error"} and isinstance(body["error"], dict), body
        error = {**body["error"], "type": body["error"].get("details", {}).get("error_code")}
    else:
        assert set(body) == {"error"} and isinstance(body["error"], dict), body
        error = body["error"]
    assert isinstance(error.get("type"), str) and isinstance(error.get("message"), str) and error["message"], body
    if kind is not None:
        assert error["type"] == kind, body
    return error


def client_for(live: Live, token: str, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=live.url, headers={"Authorization": f"Bearer {token}", **headers}, timeout=30)
