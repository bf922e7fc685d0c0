"""A real uvicorn on loopback serving a runtime whose model is the fake provider; tokens for two tenants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.pipeline.conftest import app_files, make_runtime
from yao_agent.identity import OPERATOR, Identity
from yao_agent.pipeline import Runtime
from yao_agent.server import create_app
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider


@dataclass
class Live:
    """A running server: its base URL, its runtime, and a token per tenant."""

    url: str
    rt: Runtime
    tokens: dict[str, str]

    def client(self, who: str = "alice", **kwargs: object) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


TENANTS = {"alice": Identity("alice"), "bob": Identity("bob", "acme"), "carol": Identity("carol", "acme")}


async def serve(rt: Runtime, max_body_bytes: int | None = None) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    config = uvicorn.Config(create_app(rt, max_body_bytes=max_body_bytes), host="127.0.0.1", port=0,
                            lifespan="off", log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
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


def server_files(base_url: str) -> dict[str, str]:
    files = app_files(base_url)
    files["assistants/private/assistant.yml"] = "name: Private\naccess: {teams: [acme]}\n"
    files["connectors/demo/echo.yml"] = "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n"
    return files


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, fake: FakeProvider) -> AsyncIterator[Live]:
    rt = make_runtime(tmp_path / "app", store, server_files(fake.base_url))
    tokens = {name: await store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
    server, task, url = await serve(rt, max_body_bytes=64 * 1024)
    try:
        yield Live(url, rt, tokens)
    finally:
        server.should_exit = True
        await task
        await rt.engines.aclose()
        await rt.tools.aclose()
