"""Tool approvals on the web chat page (CONTRACT §4.8), in a real headless Chromium against a live server:
a call that needs a person shows as a card to approve or deny; the decisions continue the run on the page."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, Request, Route, expect

from tests.support.approvals import payer_runtime, tally
from tests.support.browser import send, sign_in
from tests.support.servers import Live, artifact, running
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

# The page's browser fixtures come from test_web (one harness); named here so pytest finds them.

pytestmark = [
    pytest.mark.browser,
    # The store does not matter to the page: run once, on SQLite.
    pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True),
]


@pytest.fixture
async def approving(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with an assistant whose `tally` calls wait for approval (the in-process MCP server)."""
    async with running(payer_runtime(tmp_path / "app", store, provider)) as served:
        yield served


def counted(ledger: Path) -> list[str]:
    return ledger.read_text().split("\n")[:-1] if ledger.exists() else []


def decisions_posted(page: Page) -> list[Request]:
    """The decision requests the page sends, as they go out."""
    posted: list[Request] = []
    page.on("request", lambda r: posted.append(r) if r.method == "POST" and r.url.endswith("/approvals") else None)
    return posted


def tool_messages(provider: FakeProvider) -> dict[str, Any]:
    """What the model's latest request said each tool call returned, by call id."""
    return {m["tool_call_id"]: m["content"] for m in provider.requests[-1].messages if m["role"] == "tool"}


async def test_approving_a_call_runs_it_once_and_the_answer_streams(
    approving: Live, provider: FakeProvider, page: Page, ledger: Path
) -> None:
    await sign_in(page, approving, approving.tokens["alice"])
    provider.enqueue(Reply(tool_calls=(tally(ledger, "rent", "t1"),)), Reply(text="Paid the rent.", chunk_size=3))
    await send(page, "pay the rent", "payer")
    turn = page.locator("#transcript .turn").first  # `send`'s turn is the last one: the continuation, later

    # The run stops before the call runs; a card asks, showing the tool and its arguments.
    panel = turn.locator(".approvals")
    card = panel.locator(".approval-card")
    await expect(card).to_have_count(1)
    await expect(card.locator(".tool-name")).to_have_text("testing__tally")
    arguments = json.dumps({"path": str(ledger), "label": "rent"}, indent=2)
    await expect(card.locator(".approval-args")).to_have_text(arguments, use_inner_text=False)
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "waiting")
    await expect(turn.locator(".tool-card .badge")).to_have_text("waiting for approval")
    await expect(page.locator("#status")).to_have_text("Waiting for your approval (1 tool call).")
    assert counted(ledger) == []
    await page.screenshot(path=str(artifact("web-approval-asked.png")), full_page=True)

    # By keyboard: the panel's heading has the focus; Tab reaches Approve, Enter presses it. The POST is
    # held back (a slow network) to see the page wait for it with every button disabled.
    release = asyncio.Event()

    async def slow(route: Route) -> None:
        await release.wait()
        await route.continue_()

    await page.route("**/approvals", slow)
    posted = decisions_posted(page)
    await expect(panel.locator(".approvals-title")).to_be_focused()
    await page.keyboard.press("Tab")
    approve = card.get_by_role("button", name="Approve")
    await expect(approve).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(panel.locator(".approvals-progress")).to_have_text("Sending your decisions…")
    await expect(approve).to_be_disabled()
    await expect(card.get_by_role("button", name="Deny")).to_be_disabled()
    await expect(page.locator("#send")).to_be_disabled()
    release.set()

    # The continuation streams into the conversation as a run does; the call ran exactly once.
    continued = page.locator("#transcript .turn").last
    await expect(continued.locator(".who")).to_have_text("Assistant (continued)")
    await expect(continued.locator(".kind-text .bubble")).to_have_text("Paid the rent.")
    await expect(continued.locator(".tool-result pre")).to_have_text("counted rent")
    await expect(continued.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(card.locator(".approval-note")).to_have_text("Approved")
    await expect(approve).to_be_hidden()
    await expect(turn.locator(".tool-card .badge")).to_have_text("approved")  # no longer "waiting"
    await expect(page.locator("#status")).to_contain_text("Completed")
    assert [json.loads(r.post_data or "") for r in posted] == [{"decisions": [{"tool_call_id": "t1", "approve": True}]}]
    assert counted(ledger) == ["rent"]
    await page.screenshot(path=str(artifact("web-approval-approved.png")), full_page=True)


async def test_a_denial_with_a_reason_reaches_the_model_and_stays_in_the_history(
    approving: Live, provider: FakeProvider, page: Page, ledger: Path
) -> None:
    await sign_in(page, approving, approving.tokens["alice"])
    calls = (tally(ledger, "rent", "t1"), tally(ledger, "rent-again", "t2"))
    provider.enqueue(Reply(tool_calls=calls), Reply(text="I paid the rent once."))
    await send(page, "pay the rent twice", "payer")
    turn = page.locator("#transcript .turn").first
    cards = turn.locator(".approvals .approval-card")
    await expect(cards).to_have_count(2)
    await expect(cards.locator(".approval-args")).to_contain_text(['"label": "rent"', '"label": "rent-again"'])
    posted = decisions_posted(page)

    # One call decided: nothing is sent yet (the run goes on when every call of it is decided).
    await cards.nth(0).get_by_role("button", name="Approve").click()
    await expect(cards.nth(0).get_by_role("button", name="Approve")).to_have_attribute("aria-pressed", "true")
    await expect(turn.locator(".approvals-progress")).to_have_text(
        "1 of 2 decided. The run goes on once every call is decided."
    )
    asked = len(provider.requests)
    assert posted == [] and counted(ledger) == []

    # The other denied with a reason (typed, then Enter): both decisions go out together.
    await cards.nth(1).get_by_role("textbox", name="Reason for denying").fill("paid already")
    await cards.nth(1).get_by_role("textbox", name="Reason for denying").press("Enter")
    continued = page.locator("#transcript .turn").last
    await expect(continued.locator(".kind-text .bubble")).to_have_text("I paid the rent once.")
    await expect(cards.nth(1).locator(".approval-note")).to_have_text("Denied: paid already")
    assert len(provider.requests) == asked + 1
    assert tool_messages(provider) == {"t1": "counted rent", "t2": "denied: paid already"}
    assert counted(ledger) == ["rent"]
    assert len(posted) == 1

    # Loaded again, the history says who decided each call, and why one was denied; nothing waits any more.
    await page.reload()
    await page.locator("#chats .chat-item").first.click()
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text(["pay the rent twice"])
    # Each result on its call's card (the continuation stored them under its own run).
    tool_cards = page.locator("#transcript .tool-card")
    await expect(tool_cards).to_have_count(2)
    await expect(tool_cards.locator(".tool-name")).to_have_text(["testing__tally", "testing__tally"])
    await expect(tool_cards.locator(".approval-badge")).to_have_text(
        ["approved by alice", "denied by alice: paid already"]
    )
    await expect(tool_cards.locator(".tool-result pre")).to_have_text(["counted rent", "denied: paid already"])
    await expect(page.locator("#transcript .approvals")).to_have_count(0)
    await expect(page.locator("#message")).to_be_focused()
    await page.screenshot(path=str(artifact("web-approval-history.png")), full_page=True)


async def test_a_chat_opened_while_calls_wait_shows_them_and_says_when_they_were_decided_elsewhere(
    approving: Live, provider: FakeProvider, page: Page, ledger: Path
) -> None:
    label = "rent <b>now</b>"  # arguments come from the model: markup in them is shown, never parsed
    provider.enqueue(Reply(tool_calls=(tally(ledger, label, "t1"),)))
    async with approving.client("alice") as alice:
        started = await alice.post(
            "/api/assistants/payer/runs?stream=false",
            json={"messages": [{"role": "user", "content": "pay the rent"}]},
        )
    assert started.json()["status"] == "waiting"
    chat_id = started.json()["chat_id"]

    # Opened later (a new page, a new sign-in): the call that waits has its card, ready to decide.
    await sign_in(page, approving, approving.tokens["alice"])
    await page.locator("#chats .chat-item").first.click()
    card = page.locator("#transcript .approvals .approval-card")
    await expect(card).to_have_count(1)
    await expect(card.locator(".tool-name")).to_have_text("testing__tally")
    await expect(card.locator(".approval-args")).to_contain_text(f'"label": "{label}"')
    await expect(page.locator("#transcript b")).to_have_count(0)
    await expect(page.locator("#transcript .tool-card .badge")).to_have_text("waiting for approval")
    await expect(page.locator("#transcript .approvals-title")).to_be_focused()
    await expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    await expect(page.locator("#resume-bar")).to_be_hidden()  # nothing failed: it waits for a person

    # Someone decides first (another tab, the CLI): the page's decision is refused, in the server's words.
    provider.enqueue(Reply(text="Paid."))
    async with approving.client("alice") as alice:
        decided = await alice.post(
            f"/api/chats/{chat_id}/approvals?stream=false",
            json={"decisions": [{"tool_call_id": "t1", "approve": True}]},
        )
    assert decided.json()["status"] == "completed"
    await card.get_by_role("textbox", name="Reason for denying").fill("too late")
    await card.get_by_role("button", name="Deny").click()
    error = page.locator("#transcript .approvals-error")
    await expect(error).to_contain_text(f"Your decisions were not accepted: chat '{chat_id}' has no pending approvals")
    await expect(card.get_by_role("button", name="Deny")).to_be_disabled()
    await expect(page.locator("#transcript .who", has_text="continued")).to_have_count(0)  # nothing streamed
    await page.screenshot(path=str(artifact("web-approval-conflict.png")), full_page=True)
    assert counted(ledger) == [label]  # once: the page's late denial changed nothing

    # Reloaded, the chat shows what happened: approved, run, answered.
    await error.get_by_role("button", name="Reload the chat").click()
    await expect(page.locator("#transcript .approval-badge")).to_have_text("approved by alice")
    await expect(page.locator("#transcript .kind-text .bubble").last).to_have_text("Paid.")
    await expect(page.locator("#transcript .approvals")).to_have_count(0)


async def test_a_new_message_while_calls_wait_denies_them(
    approving: Live, provider: FakeProvider, page: Page, ledger: Path
) -> None:
    await sign_in(page, approving, approving.tokens["alice"])
    provider.enqueue(Reply(tool_calls=(tally(ledger, "rent", "t1"),)), Reply(text="All right, I will not pay."))
    await send(page, "pay the rent", "payer")
    card = page.locator("#transcript .turn").first.locator(".approvals .approval-card")
    await expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    later = await send(page, "actually, don't")
    await expect(card.locator(".approval-note")).to_have_text("Denied: you sent a new message")
    await expect(card.get_by_role("button", name="Approve")).to_be_hidden()
    await expect(later.locator(".kind-text .bubble")).to_have_text("All right, I will not pay.")
    assert tool_messages(provider) == {"t1": "denied: the user sent a new message"}
    assert counted(ledger) == []


async def test_arguments_that_are_no_plain_json_are_shown_as_the_model_wrote_them(
    approving: Live, provider: FakeProvider, page: Page, ledger: Path
) -> None:
    """A key given twice: parsed on the page, only one value would show; the card shows the very text."""
    from yao_agent.testing import ToolCall

    written = f'{{"path": {json.dumps(str(ledger))}, "label": "cheap", "label": "dear"}}'
    await sign_in(page, approving, approving.tokens["alice"])
    provider.enqueue(Reply(tool_calls=(ToolCall("testing__tally", written, id="t1"),)))
    await send(page, "pay", "payer")
    card = page.locator("#transcript .turn").first.locator(".approvals .approval-card")
    await expect(card.locator(".approval-args")).to_have_text(written, use_inner_text=False)
