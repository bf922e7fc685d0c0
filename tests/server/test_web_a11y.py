"""The web chat page for people who use a keyboard, a screen reader or a phone, in a real headless Chromium
against a live server: axe-core finds no serious or critical problem on a chat with a markdown answer, a
tool card and an approval panel, at desktop and phone widths; on a phone the chat list is a drawer a
keyboard opens and closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Locator, Page, ViewportSize, expect

from tests.support import REPO
from tests.support.approvals import add, payer_runtime, tally
from tests.support.browser import WAIT, send, sign_in
from tests.support.servers import Live, artifact, running
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

pytestmark = [
    pytest.mark.browser,
    # The store does not matter to the page: run once, on SQLite.
    pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True),
]

expect.set_options(timeout=WAIT)

# axe-core, for the tests only: it is not part of the package, and the page never loads it itself.
AXE = REPO / "tests/support/vendor/axe.min.js"
WEB = REPO / "yao_agent/server/web"

DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)

ANSWER = """\
## Paying the rent

It is **5** in all, as the `add` tool said:

1. Rent
2. Tickets

```python
total = 2 + 3
```
"""


@pytest.fixture
async def approving(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with an assistant whose `tally` calls wait for approval and whose `add` needs nobody."""
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


async def checked(page: Page) -> None:
    """axe-core in every document `page` opens from now on. As an init script, since the page's Content
    Security Policy (script-src 'self') rightly refuses a script tag a test adds inline."""
    await page.add_init_script(path=str(AXE))


async def problems(page: Page) -> list[str]:
    """What axe-core finds serious or critical on the page as it is now, one line per element."""
    results: dict[str, Any] = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found: list[str] = []
    for rule in results["violations"]:
        if rule["impact"] not in ("serious", "critical"):
            continue
        for node in rule["nodes"]:
            found.append(
                f"{rule['id']} ({rule['impact']}): {rule['help']} — {node['target']}: {node['failureSummary']}"
            )
    return found


async def full_chat(page: Page, live: Live, provider: FakeProvider, ledger: Path) -> None:
    """Signed in, one chat holding a tool card with its result, a streamed markdown answer, and a call
    waiting for approval."""
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(tool_calls=(add("a1"),)), Reply(text=ANSWER, chunk_size=4, delay_s=0.01))
    answered = await send(page, "what do I owe?", "payer")
    await expect(answered.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(answered.locator(".tool-card .tool-result pre")).to_have_text("5")
    await expect(answered.locator(".kind-text .bubble h2")).to_have_text("Paying the rent")
    provider.enqueue(Reply(tool_calls=(tally(ledger, "rent", "t1"),)))
    await send(page, "pay the rent")
    await expect(page.locator(".approvals .approval-card")).to_have_count(1)
    await expect(page.locator("#status")).to_have_text("Waiting for your approval (1 tool call).")


async def tab_to(page: Page, target: Locator) -> None:
    """Press Tab until `target` has the focus, as a person would (a few dozen presses at most)."""
    for _ in range(40):
        if await target.evaluate("node => node === document.activeElement"):
            return
        await page.keyboard.press("Tab")
    await expect(target).to_be_focused()


async def test_axe_finds_nothing_serious_on_a_desktop_or_a_phone(
    approving: Live, provider: FakeProvider, page: Page, tmp_path: Path
) -> None:
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    await checked(page)
    await page.goto(approving.url + "/")  # signed out: the token form
    await expect(page.locator("#auth-message")).to_contain_text("Paste an API token")
    assert await problems(page) == []
    await page.set_viewport_size(DESKTOP)
    await full_chat(page, approving, provider, tmp_path / "ledger.txt")
    assert await problems(page) == []

    await page.set_viewport_size(PHONE)
    await expect(page.locator("#chats-toggle")).to_be_visible()
    await expect(page.locator("#chat-drawer")).to_be_hidden()
    assert await problems(page) == []
    await page.click("#chats-toggle")
    await expect(page.locator("#chat-drawer")).to_be_visible()
    assert await problems(page) == []
    await page.screenshot(path=str(artifact("web-a11y-phone-drawer.png")), animations="disabled")
    await page.keyboard.press("Escape")

    # The usage panel, shown in place of the chat.
    await page.set_viewport_size(DESKTOP)
    await page.click("#usage-toggle")
    await expect(page.locator("#usage-rows tr").first).to_be_visible()
    assert await problems(page) == []

    # Everything the page loaded came from the server itself (axe came in by the test, not over the network).
    assert [url for url in fetched if not url.startswith(approving.url)] == []
    assert not list(WEB.rglob("axe*"))  # the checker is the tests', never shipped with the page


async def test_on_a_phone_the_chat_list_is_a_drawer_the_keyboard_opens_and_closes(
    live: Live, provider: FakeProvider, page: Page
) -> None:
    await page.set_viewport_size(PHONE)
    await sign_in(page, live, live.tokens["alice"])
    drawer, toggle = page.locator("#chat-drawer"), page.locator("#chats-toggle")
    provider.enqueue(Reply(text="First answer."))
    await expect((await send(page, "first chat")).locator(".run-end")).to_have_attribute("data-status", "completed")

    # The list is out of sight; the conversation has the whole width.
    await expect(drawer).to_be_hidden()
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    shown = await page.locator("#transcript").bounding_box()
    assert shown is not None and shown["width"] >= PHONE["width"] - 32, shown

    # By keyboard alone: Tab, from the message box, round the page to the skip link, which goes straight
    # back to the message box; round again, the menu button is the next Tab stop after it.
    skip = page.get_by_role("link", name="Skip to the message box")
    await tab_to(page, skip)
    await page.keyboard.press("Enter")
    await expect(page.locator("#message")).to_be_focused()
    await tab_to(page, skip)
    await page.keyboard.press("Tab")
    await expect(toggle).to_be_focused()

    # Enter opens the list, with the focus in it.
    await page.keyboard.press("Enter")
    await expect(drawer).to_be_visible()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(drawer.locator(":focus")).to_have_count(1)
    # Tab goes round the drawer, never to the page behind it.
    for _ in range(12):
        await page.keyboard.press("Tab")
        where = await page.evaluate("document.activeElement.id || document.activeElement.tagName")
        assert await drawer.evaluate(
            "(d) => d.contains(document.activeElement) || document.activeElement === document.body"
        ), where
    await page.screenshot(path=str(artifact("web-phone-drawer.png")), animations="disabled")

    # Escape closes it, the focus back on the menu button; so do the close button and a tap beside the drawer.
    await page.keyboard.press("Escape")
    await expect(drawer).to_be_hidden()
    await expect(toggle).to_be_focused()
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    await page.keyboard.press("Enter")
    await page.get_by_role("button", name="Close chats").click()
    await expect(drawer).to_be_hidden()
    await expect(toggle).to_be_focused()
    await toggle.click()
    await page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)  # the backdrop, right of the drawer
    await expect(drawer).to_be_hidden()

    # Choosing a chat, by keyboard, closes it and shows the chat.
    await toggle.click()
    await drawer.locator(".chat-item").focus()
    await page.keyboard.press("Enter")
    await expect(drawer).to_be_hidden()
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text("first chat")
    await expect(page.locator("#message")).to_be_focused()  # where app.js puts a person who opened a chat

    # So does "New chat": an empty conversation, ready to write in.
    await toggle.click()
    await drawer.get_by_role("button", name="New chat").click()
    await expect(drawer).to_be_hidden()
    await expect(page.locator("#transcript .msg")).to_have_count(0)
    await expect(page.locator("#message")).to_be_focused()

    # On a wider screen the list is a column beside the conversation again, with no menu button.
    await page.set_viewport_size(DESKTOP)
    await expect(drawer).to_be_visible()
    await expect(toggle).to_be_hidden()
