"""The chat page's pictures in the documentation, taken again: a live server as the browser tests start it
(the loopback fake model, an in-process MCP server for the tool), Debian's Chromium driven by Playwright.

    PYTHONPATH=$PWD .venv/bin/python scripts/screenshots.py [--out docs/images]

Writes chat-desktop.png (1280×800), chat-phone.png and chat-phone-drawer.png (390×844). Look at them
before committing: they are what a reader sees of the page."""

from __future__ import annotations

import os

# litellm stays offline, as in the tests: set before anything imports it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import argparse
import asyncio
import json
import logging
import tempfile
from pathlib import Path

from playwright.async_api import Page, ViewportSize, async_playwright, expect

from tests.support import REPO
from tests.support.browser import ARGS, CHROMIUM, WAIT, send, sign_in
from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)

PLANNER = "name: Trip planner\nmcp:\n  servers: [testing]\n"

ANSWER = """\
## Your trip to Lisbon

That makes **5 nights** in all — 2 in Lisbon, then 3 in Porto.

1. Book the train from Lisbon to Porto for the third morning.
2. Keep the last evening free: the `Alfa Pendular` leaves at 18:09.

```python
nights = {"Lisbon": 2, "Porto": 3}
print(sum(nights.values()))  # 5
```
"""

EARLIER = [
    ("Draft a packing list for a rainy weekend", "A light rain jacket, a spare pair of socks and an umbrella."),
    ("Which museums open late on Thursdays?", "Most of them stay open until 21:00 on Thursdays."),
]


async def chat(page: Page, live: Live, provider: FakeProvider) -> None:
    """Signed in as alice: two earlier chats listed, and the open one with a tool call and a markdown answer."""
    await sign_in(page, live, live.tokens["alice"])
    for question, answer in EARLIER:
        provider.enqueue(Reply(text=answer))
        turn = await send(page, question, "planner")
        await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")
        await page.click("#new-chat")
    nights = ToolCall("testing__add", json.dumps({"a": 2, "b": 3}), id="c1")
    provider.enqueue(Reply(tool_calls=(nights,)), Reply(text=ANSWER, chunk_size=8, delay_s=0.005))
    turn = await send(page, "How many nights is 2 in Lisbon and 3 in Porto? Plan it.", "planner")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(page.locator("#chats .chat-item")).to_have_count(3)
    await page.locator("#message").blur()  # no focus ring in the picture


async def shoot(out: Path) -> None:
    logging.disable(logging.INFO)  # the server's and the store's progress lines say nothing here; warnings do
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        store = SqlStore(await open_engine(store_url(f"sqlite:///{root / 'agent.db'}", root)))
        try:
            async with FakeProvider() as provider:
                files = server_files(provider.base_url)
                files["mcps/testing.yml"] = "command: python\nargs: [-m, tests.support.mcp_server]\n"
                files["assistants/planner/assistant.yml"] = PLANNER
                rt = make_runtime(root / "app", store, files)
                rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
                async with running(rt) as live, async_playwright() as p:
                    browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                    try:
                        context = await browser.new_context(viewport=DESKTOP, device_scale_factor=1)
                        page = await context.new_page()
                        page.set_default_timeout(WAIT)
                        await chat(page, live, provider)
                        await page.screenshot(path=out / "chat-desktop.png", animations="disabled")

                        await page.set_viewport_size(PHONE)
                        await expect(page.locator("#chats-toggle")).to_be_visible()
                        await page.screenshot(path=out / "chat-phone.png", animations="disabled")
                        await page.click("#chats-toggle")
                        await expect(page.locator("#chat-drawer")).to_be_visible()
                        await page.screenshot(path=out / "chat-phone-drawer.png", animations="disabled")
                    finally:
                        await browser.close()
        finally:
            await store.aclose()
    for name in ("chat-desktop.png", "chat-phone.png", "chat-phone-drawer.png"):
        print(f"wrote {out / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Take the chat page's pictures in the documentation again.")
    parser.add_argument("--out", type=Path, default=REPO / "docs/images", help="the folder for the PNGs")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(out))


if __name__ == "__main__":
    main()
