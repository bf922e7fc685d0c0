"""Shared test set-up: the store each test runs on, and the doubles, each under one name:

- `fake`: the in-process `ScriptedModel`, given to a runtime as its engines (the loop tests' model);
- `provider`: the loopback `FakeProvider`, reached over real HTTP (what goes over the wire);
- `threaded_provider`: the same, served from a thread of its own, for tests that run synchronous code;
- `clock`: the time a runtime and its store see, set by the test.

litellm must stay offline: these are set before anything imports it."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.clock import Clock
from tests.support.postgres import PG_URL, REQUIRE_SERVICES, pg_admin, pg_admin_truncate
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, ScriptedModel


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throw-away database on the local PostgreSQL server, dropped after the session."""
    if not PG_URL:
        if REQUIRE_SERVICES:
            pytest.fail("PostgreSQL is required (YAO_AGENT_TEST_PG is not set)")
        pytest.skip("PostgreSQL not available (set YAO_AGENT_TEST_PG)")
    name = f"yao_agent_test_{os.getpid()}_{secrets.token_hex(3)}"
    pg_admin(f'CREATE DATABASE "{name}"')
    base = PG_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Every test runs on SQLite; those whose subject is what the database does (the store's SQL, isolation,
# concurrency, budgets) are marked `both_stores` and run on PostgreSQL too. The rest would repeat on
# PostgreSQL what SQLite showed, at twice the suite's time; YAO_AGENT_TEST_ALL_STORES=1 runs them anyway.
ALL_STORES = os.environ.get("YAO_AGENT_TEST_ALL_STORES") == "1"
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_raw_url" not in metafunc.fixturenames or _parametrizes_store(metafunc):
        return
    both = ALL_STORES or metafunc.definition.get_closest_marker("both_stores") is not None
    metafunc.parametrize("store_raw_url", STORES if both else ["sqlite"], indirect=True)


def _parametrizes_store(metafunc: pytest.Metafunc) -> bool:
    """Whether the test chooses its store itself (`parametrize("store_raw_url", [...], indirect=True)`)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "store_raw_url" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return True
    return False


@pytest.fixture
def store_raw_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store URL of one test: a fresh SQLite file, or the session's PostgreSQL database (emptied)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'agent.db'}"
    url = request.getfixturevalue("pg_database")
    pg_admin_truncate(url)
    return url


@pytest.fixture
async def store(store_raw_url: str, tmp_path: Path) -> AsyncIterator[SqlStore]:
    engine = await open_engine(store_url(store_raw_url, tmp_path))
    store = SqlStore(engine)
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """The file the `testing` server's `tally` tool appends a line to each time it really runs."""
    return tmp_path / "ledger"


@pytest.fixture
def fake() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as served:
        yield served


@pytest.fixture
def threaded_provider() -> Iterator[FakeProvider]:
    with FakeProvider().running_in_thread() as served:
        yield served


@pytest.fixture
def clock() -> Clock:
    return Clock()
