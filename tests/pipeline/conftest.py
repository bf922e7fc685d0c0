"""A runtime on a real store (SQLite, and PostgreSQL when available) whose model is a double.

The loop tests' model is `fake`, the in-process `ScriptedModel`: it stands in for the provider
engines, so everything of a model call but the provider and its SDK runs, without HTTP. Tests of
what goes over the wire take `provider`, the loopback `FakeProvider`. Both take the same `Reply`
scripts and record `requests` alike: a test moves from one to the other by the fixture it asks for
and the model it gives `make_runtime`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.apps import make_app
from tests.support.cli import Cli
from tests.support.clock import Clock
from tests.support.hooks import Make, hooked
from tests.support.quota import Quota
from tests.support.runtimes import app_files, close, make_runtime
from tests.support.tools import APPROVING, SERVERS_PY, in_process, tooled
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, ScriptedModel


@pytest.fixture
async def rt(tmp_path: Path, fake: ScriptedModel, store: SqlStore) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "app", store, app_files(fake.base_url), model=fake)
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()


@pytest.fixture
async def tooled_rt(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Runtime]:
    """A runtime whose `tooled` assistant has the in-process `testing` server."""
    runtime = in_process(tooled(tmp_path / "app", store, fake))
    try:
        yield runtime
    finally:
        await close(runtime)


@pytest.fixture
def make(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> Make:
    """Build a runtime whose `hooked` assistant runs the hook given."""

    def build(hook: str, assistant: str = "", more: dict[str, str] | None = None) -> Runtime:
        return make_runtime(tmp_path / "app", store, hooked(fake, hook, assistant, more), model=fake)

    return build


@pytest.fixture
async def timed_store(store_raw_url: str, tmp_path: Path, clock: Clock) -> AsyncIterator[SqlStore]:
    store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)), clock=clock)
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
async def quota(tmp_path: Path, timed_store: SqlStore, fake: ScriptedModel, clock: Clock) -> AsyncIterator[Quota]:
    made = Quota(tmp_path, timed_store, fake, clock)
    try:
        yield made
    finally:
        for rt in made.made:
            await rt.engines.aclose()
            await rt.hooks.aclose()


@pytest.fixture
def app(tmp_path: Path, threaded_provider: FakeProvider) -> Path:
    """The app the approvals' CLI tests run: its `tooled` assistant's `tally` waits for a person."""
    files = app_files(threaded_provider.base_url)
    files["mcps/testing.yml"] = f"command: python\nargs: [{json.dumps(SERVERS_PY)}]\n"
    files["assistants/tooled/assistant.yml"] = APPROVING
    return make_app(tmp_path / "app", files, base={})


@pytest.fixture
def cli(app: Path, store_raw_url: str) -> Cli:
    return Cli(app, store_raw_url)
