"""A runtime on a real store (SQLite, and PostgreSQL when available) whose model is a double.

The loop tests' model is `fake`, the in-process `ScriptedModel`: it stands in for the provider
engines, so everything of a model call but the provider and its SDK runs, without HTTP. Tests of
what goes over the wire take `http_fake`, the loopback `FakeProvider`. Both take the same `Reply`
scripts and record `requests` alike: a test moves from one to the other by the fixture it asks for
and the model it gives `make_runtime`.
"""

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
from yao_agent.testing import FakeProvider, ModelDouble, ScriptedModel

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
def fake() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def http_fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


def make_runtime(
    root: Path, store: SqlStore, files: dict[str, str], *, model: ModelDouble | FakeProvider | None = None
) -> Runtime:
    """A runtime for the app `files`, whose model is `model`: an in-process double is its engines, the
    loopback fake provider (or None) is reached over HTTP at the `base_url` its connectors name."""
    if model is None and any(ModelDouble.base_url in text for text in files.values()):
        raise AssertionError("the app's connectors name the in-process model: pass it, make_runtime(..., model=fake)")
    engines = model.engines() if isinstance(model, ModelDouble) else Engines()
    app = load_app(make_app(root, files, base={}))
    return Runtime(app=app, store=store, engines=engines, ids=CountingIds(), sleep=no_sleep,
                   retry=RetryPolicy(max_attempts=1))  # fmt: skip


@pytest.fixture
async def rt(tmp_path: Path, fake: ScriptedModel, store: SqlStore) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "app", store, app_files(fake.base_url), model=fake)
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()
