"""A real uvicorn on loopback serving the runs of a runtime whose model is the fake provider; tokens for two tenants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from tests.pipeline.conftest import app_files, make_runtime
from yao_agent.identity import OPERATOR, Identity
from yao_agent.pipeline import Runtime
from yao_agent.server.serve import config
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider


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


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SAVED: list[Path] = []  # the artifacts this session wrote, named at its end


def artifact(name: str) -> Path:
    """Where a test saves the file `name` for people to look at after the run (CI keeps test-artifacts/)."""
    ARTIFACTS.mkdir(exist_ok=True)
    SAVED.append(ARTIFACTS / name)
    return ARTIFACTS / name


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    saved = [path for path in dict.fromkeys(SAVED) if path.is_file()]
    if saved:
        terminalreporter.write_sep("-", "test artifacts")
        for path in saved:
            terminalreporter.write_line(f"saved {path}")


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


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


def server_files(base_url: str, **options: str) -> dict[str, str]:
    files = app_files(base_url, **options)
    files["assistants/private/assistant.yml"] = "name: Private\naccess: {teams: [acme]}\n"
    files["connectors/demo/echo.yml"] = "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n"
    return files


@asynccontextmanager
async def running(rt: Runtime, max_body_bytes: int | None = None) -> AsyncGenerator[Live]:
    """The runs of `rt` served on loopback, with a token per tenant; closed (engines, tools, hooks) afterwards."""
    tokens = {name: await rt.store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
    runs = Runs(rt)
    server, task, url = await serve(runs, max_body_bytes=max_body_bytes)
    try:
        yield Live(url, runs, tokens)
    finally:
        server.should_exit = True
        await task
        await rt.engines.aclose()
        await rt.tools.aclose()
        await rt.hooks.aclose()


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, fake: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(fake.base_url)), 64 * 1024) as served:
        yield served
