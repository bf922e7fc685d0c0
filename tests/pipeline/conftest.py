"""A runtime on a real store (SQLite, and PostgreSQL when available) whose model is the fake provider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.apps import make_app
from yao_agent.connectors import Engines, RetryPolicy
from yao_agent.dsl import load_app
from yao_agent.ids import CountingIds
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider

CHAT = "name: Chat\nprompts:\n  - {role: system, content: 'You are {{ assistant.name }}.'}\n"


def app_files(base_url: str, *, limits: str = "{max_turns: 10, timeout_s: 30}") -> dict[str, str]:
    return {
        "app.yml": f"roles:\n  default: fake.model\nhistory_size: 20\nlimits: {limits}\n",
        "connectors/fake/model.yml": f"type: openai\nmodel: text\nbase_url: {base_url}\napi_key: sk-x\ntimeout_s: 5\n",
        "assistants/chat/assistant.yml": CHAT,
    }


async def no_sleep(_seconds: float) -> None:
    return None


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


def make_runtime(root: Path, store: SqlStore, files: dict[str, str]) -> Runtime:
    app = load_app(make_app(root, files, base={}))
    return Runtime(app=app, store=store, engines=Engines(), ids=CountingIds(), sleep=no_sleep,
                   retry=RetryPolicy(max_attempts=1))  # fmt: skip


@pytest.fixture
async def rt(tmp_path: Path, fake: FakeProvider, store: SqlStore) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "app", store, app_files(fake.base_url))
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()
