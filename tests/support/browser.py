"""A real headless Chromium on the web chat page: where it is, how it is started, and what a person does on the page."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.async_api import Locator, Page

from tests.support.servers import Live

CHROMIUM = os.environ.get("YAO_AGENT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


HAVE_CHROMIUM = Path(CHROMIUM).is_file()


REQUIRE_SERVICES = os.environ.get("YAO_AGENT_REQUIRE_SERVICES") == "1"


ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


WAIT = 20_000  # ms: the longest any wait or expectation takes (a loaded CI machine is slow)


async def sign_in(page: Page, live: Live, token: str) -> None:
    await page.goto(live.url + "/")
    await page.fill("#token", token)
    await page.click("#save-token")


async def send(page: Page, text: str, assistant: str | None = None) -> Locator:
    """Send `text` (to `assistant`, when given, chosen first) as a person would; the turn it starts."""
    if assistant is not None:
        await page.select_option("#assistant", assistant)
    await page.fill("#message", text)
    await page.click("#send")
    return page.locator("#transcript .turn").last
