"""A real uvicorn on loopback serving the runs of a runtime whose model is the fake provider; tokens for two
tenants; a headless Chromium for the page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.support.browser import ARGS, CHROMIUM, HAVE_CHROMIUM, REQUIRE_SERVICES, WAIT
from tests.support.clock import Clock
from tests.support.runtimes import make_runtime
from tests.support.servers import SAVED, Live, running, server_files
from tests.support.usage import BETA, files
from yao_agent.identity import OPERATOR
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    saved = [path for path in dict.fromkeys(SAVED) if path.is_file()]
    if saved:
        terminalreporter.write_sep("-", "test artifacts")
        for path in saved:
            terminalreporter.write_line(f"saved {path}")


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url)), 64 * 1024) as served:
        yield served


@pytest.fixture
async def usage_live(tmp_path: Path, store: SqlStore, provider: FakeProvider, clock: Clock) -> AsyncIterator[Live]:
    """A live server on the usage app (two teams, priced connectors), its runtime on `clock`."""
    rt = make_runtime(tmp_path / "app", store, files(provider.base_url))
    rt.clock = clock
    async with running(rt) as served:
        for name, who in BETA.items():
            served.tokens[name] = await rt.store.create_token(OPERATOR, who)
        yield served


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        message = f"no Chromium at {CHROMIUM} (install Debian's chromium or set YAO_AGENT_CHROMIUM)"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    opened = await context.new_page()
    opened.set_default_timeout(WAIT)
    problems: list[str] = []  # script errors; an HTTP error status (the resume check's 404) is no script error
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "console", lambda m: problems.append(m.text) if m.type == "error" and "Failed to load" not in m.text else None
    )
    try:
        yield opened
    finally:
        await context.close()
    assert not problems, problems
