"""Knowledge on the chat page, in a real headless Chromium against a live server: a team admin adds a PDF to
the team's collection from the page; a member's answer shows its sources beside it, the cited one marked,
and a cited number that matches no source is said; the stored chat shows the same when opened again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.support.browser import WAIT, send, sign_in
from tests.support.pdfs import facilities_guide
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.identity import OPERATOR
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

pytestmark = [pytest.mark.browser, pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True)]
expect.set_options(timeout=WAIT)


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    files = server_files(provider.base_url)
    files["assistants/kb/assistant.yml"] = "name: KB\nsearch: {knowledge: [team]}\n"
    rt = make_runtime(tmp_path / "app", store, files)
    async with running(rt) as served:
        await rt.knowledge.create(OPERATOR, "policies", None, team="acme")
        yield served


async def test_an_admin_uploads_and_a_member_sees_the_cited_source(
    live: Live, provider: FakeProvider, page: Page, tmp_path: Path
) -> None:
    document = facilities_guide(tmp_path)
    await sign_in(page, live, live.tokens["bob_admin"])
    section = page.locator("#knowledge")
    await expect(section).to_be_visible()
    await expect(page.locator("#knowledge-collection option")).to_have_text(["policies (team acme, 0 documents)"])
    await page.set_input_files("#knowledge-file", str(document))
    await page.click("#knowledge-upload")
    await expect(page.locator("#knowledge-status")).to_have_text("Added Facilities guide (1 passage).")
    await page.set_input_files("#knowledge-file", str(document))
    await page.click("#knowledge-upload")
    await expect(page.locator("#knowledge-status")).to_contain_text("already there, unchanged")

    await page.click("#sign-out")
    await sign_in(page, live, live.tokens["carol"])
    await page.select_option("#assistant", "kb")
    provider.enqueue(Reply(text="Park on level 2 [1] (see also [4])."))
    await send(page, "Where do I park?")
    turn = page.locator("#transcript .turn").last
    sources = turn.locator(".sources")
    await expect(sources.locator("summary").first).to_have_text("Sources (1)")
    cited = sources.locator(".source.cited")
    await expect(cited).to_have_count(1)
    await expect(cited.locator(".source-text")).to_contain_text("bays 200 to 260")
    await expect(sources.locator(".source-unknown")).to_have_text("The answer cites [4], which matches no source.")
    await expect(page.locator("#knowledge-status")).to_have_text("")  # a member: nothing uploaded as carol

    await page.reload()  # the stored chat shows the same sources
    await page.locator("#chats .chat-item").first.click()
    await expect(page.locator("#transcript .sources .source.cited .source-text")).to_contain_text("level 2")
