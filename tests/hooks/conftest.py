"""Hooks run in real V8: a host double for `ctx`, a runner per test, and helpers to call a hook file."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.hooks import Host
from yao_agent.hooks import HookRunner


@pytest.fixture
async def runner() -> AsyncIterator[HookRunner]:
    hooks = HookRunner()
    yield hooks
    await hooks.aclose()


@pytest.fixture
def host() -> Host:
    return Host()
