"""The usage panel of the web page (CONTRACT §8.2, §6 roles of tokens), in a real headless Chromium against a
live server: runs made through the API on a priced connector, then what a team admin and a member see of
them — the chart by day, the table and its totals, the groupings each may pick, an empty period."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Locator, Page, expect

from tests.support.browser import sign_in
from tests.support.clock import Clock
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, artifact, running, server_files
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

# The page's browser fixtures come from test_web (one harness); named here so pytest finds them.

pytestmark = [
    pytest.mark.browser,
    # The store does not matter to the page: run once, on SQLite.
    pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True),
]

# $2 per million tokens in, $8 out: 1,000 in + 250 out cost $0.004.
PRICED = "pricing: {input_per_mtok: 2.0, output_per_mtok: 8.0}\n"
# The page's "today": the panel opens on this month so far, 2026-03-01 to 2026-03-20 (days are UTC days).
PAGE_NOW = "2026-03-20T09:00:00Z"


@pytest.fixture
def ticking_clock() -> Clock:
    return Clock(ticking=True)


@pytest.fixture
async def priced(tmp_path: Path, store: SqlStore, provider: FakeProvider, ticking_clock: Clock) -> AsyncIterator[Live]:
    """A live server whose default connector has a price, with an assistant on one that has none (`model:
    text` is in no price map), and a token for dave, the admin of team acme (bob and carol: its members)."""
    files = server_files(provider.base_url)
    files["connectors/fake/model.yml"] += PRICED
    files["connectors/fake/local.yml"] = f"type: openai\nmodel: text\nbase_url: {provider.base_url}\napi_key: sk-x\n"
    files["assistants/drafts/assistant.yml"] = "name: Drafts\nconnector: fake.local\n"
    rt = make_runtime(tmp_path / "app", store, files)
    rt.clock = ticking_clock  # before `running` builds the runs service, which keeps the runtime's clock
    async with running(rt) as served:
        served.tokens["dave"] = await rt.store.create_token(OPERATOR, Identity("dave", "acme", admin=True))
        yield served


# who, day, assistant, tokens in, tokens out
RUNS = [
    ("bob", "2026-03-03", "chat", 1000, 250),  # $0.004
    ("bob", "2026-03-07", "chat", 3000, 500),  # $0.010
    ("carol", "2026-03-07", "chat", 2000, 1000),  # $0.012
    ("alice", "2026-03-07", "chat", 10000, 0),  # $0.020, but alice is in no team: never in acme's usage
    ("carol", "2026-03-12", "drafts", 100, 50),  # no known price: 150 unpriced tokens
    ("dave", "2026-03-12", "chat", 500, 500),  # $0.005
]


async def make_usage(live: Live, provider: FakeProvider, ticking_clock: Clock) -> None:
    """The runs of RUNS, each through the API on its day, the provider reporting its tokens."""
    for who, day, assistant, given, taken in RUNS:
        ticking_clock.at(day, hour=10)
        usage = {"prompt_tokens": given, "completion_tokens": taken, "total_tokens": given + taken}
        provider.enqueue(Reply(text=f"Noted, {who}.", usage=usage))
        async with live.client(who) as client:
            answer = await client.post(
                f"/api/assistants/{assistant}/runs?stream=false",
                json={"messages": [{"role": "user", "content": f"a note for {day}"}]},
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
    async with live.client("dave") as client:
        budget = await client.put("/api/budgets", json={"per_month": 50})
    assert budget.status_code == 200, budget.text


async def open_usage(page: Page, live: Live, who: str) -> None:
    """Sign in as `who` on a page whose clock says PAGE_NOW, and open the usage panel from the keyboard."""
    await page.clock.set_fixed_time(PAGE_NOW)
    await sign_in(page, live, live.tokens[who])
    await expect(page.locator("#sign-out")).to_be_visible()
    await page.locator("#usage-toggle").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#usage")).to_be_visible()
    await expect(page.locator("#chat-view")).to_be_hidden()
    await expect(page.locator("#usage-toggle")).to_have_attribute("aria-expanded", "true")


async def table(page: Page) -> list[list[str]]:
    """The usage table as a person reads it: each body row, then the totals row, cell by cell."""
    rows = page.locator("#usage-rows tr, #usage-total tr")
    return [[" ".join(cell.split()) for cell in await rows.nth(i).locator("th, td").all_inner_texts()]
            for i in range(await rows.count())]  # fmt: skip


async def bars_drawn(chart: Locator) -> int:
    """How many cost bars the chart's canvas shows: runs of the bar colour across a line of pixels just
    above the plot's floor (below where the tokens line could cross a bar)."""
    return await chart.evaluate(
        """(root) => {
          const canvas = root.querySelector("canvas");
          const plot = root.querySelector(".u-over").getBoundingClientRect();
          const box = canvas.getBoundingClientRect();
          const ratio = canvas.width / box.width;
          const y = Math.round((plot.bottom - box.top - 6) * ratio);
          const left = Math.round((plot.left - box.left) * ratio);
          const width = Math.round(plot.width * ratio);
          const pixels = canvas.getContext("2d").getImageData(left, y, width, 1).data;
          let bars = 0, inside = false;
          for (let i = 0; i < pixels.length; i += 4) {
            const bar = pixels[i] === 0x2f && pixels[i + 1] === 0x5f && pixels[i + 2] === 0xd0 && pixels[i + 3] === 255;
            if (bar && !inside) bars++;
            inside = bar;
          }
          return bars;
        }"""
    )


BY_DAY = [
    ["2026-03-03", "1", "1,000", "250", "$0.004"],
    ["2026-03-07", "2", "5,000", "1,500", "$0.022"],
    ["2026-03-12", "2", "600", "550", "$0.005 150 tokens without a known price"],
    ["Total", "5", "6,600", "2,300", "$0.031 150 tokens without a known price"],
]


async def test_a_team_admin_sees_the_teams_usage_by_day_and_by_user(
    priced: Live, provider: FakeProvider, ticking_clock: Clock, page: Page
) -> None:
    await make_usage(priced, provider, ticking_clock)
    await open_usage(page, priced, "dave")

    # This month so far, the whole team's, by day: the chart and the table.
    await expect(page.locator("#usage-from")).to_have_value("2026-03-01")
    await expect(page.locator("#usage-to")).to_have_value("2026-03-20")
    await expect(page.locator("#usage-scope")).to_have_text("Team acme: everyone's usage")
    await expect(page.locator("#usage-table caption")).to_have_text("Usage by day, 2026-03-01 to 2026-03-20")
    await expect(page.locator("#usage-total")).to_contain_text("$0.031")
    assert await table(page) == BY_DAY
    # Only a team admin may group by user: the API said so, the page offers it.
    await expect(page.locator("#usage-by option")).to_have_text(["Day", "Assistant", "Connector", "User"])

    chart = page.locator("#usage-chart")
    await expect(chart.locator(".u-legend .u-series .u-label")).to_have_text(["Day", "Cost (USD)", "Tokens"])
    assert await bars_drawn(chart) == 3  # 3, 7 and 12 March; the other days of the range cost nothing
    await expect(chart).to_have_attribute("role", "img")
    await expect(page.locator("#usage-chart-summary")).to_contain_text("$0.031 and 8,900 tokens over 5 runs")
    await expect(page.locator("#usage-budget-list li")).to_have_text(
        ["Team acme: $0.031 spent of $50.00 this month (resets 2026-04-01, UTC)"]
    )
    await page.screenshot(path=str(artifact("web-usage-admin.png")), full_page=True)

    # By user: each member of the team, and nobody of another.
    await page.select_option("#usage-by", "user")
    await expect(page.locator("#usage-key-head")).to_have_text("User")
    await expect(page.locator("#usage-rows tr")).to_have_count(3)
    assert await table(page) == [
        ["bob", "2", "4,000", "750", "$0.014"],
        ["carol", "2", "2,100", "1,050", "$0.012 150 tokens without a known price"],
        ["dave", "1", "500", "500", "$0.005"],
        BY_DAY[-1],
    ]
    assert await bars_drawn(chart) == 3  # the chart stays by day

    # By connector: the one without a price costs nothing known, and says how much it left out.
    await page.select_option("#usage-by", "connector")
    await expect(page.locator("#usage-key-head")).to_have_text("Connector")
    await expect(page.locator("#usage-rows tr").first).to_contain_text("fake.local")
    assert await table(page) == [
        ["fake.local", "1", "100", "50", "$0.00 150 tokens without a known price"],
        ["fake.model", "4", "6,500", "2,250", "$0.031"],
        BY_DAY[-1],
    ]

    # A period without runs says so, instead of an empty chart and table.
    await page.fill("#usage-from", "2026-02-01")
    await page.fill("#usage-to", "2026-02-28")
    await page.click("#usage-show")
    await expect(page.locator("#usage-empty")).to_have_text("No usage in this period.")
    await expect(page.locator("#usage-empty")).to_be_visible()
    await expect(page.locator("#usage-results")).to_be_hidden()
    await page.screenshot(path=str(artifact("web-usage-empty.png")), full_page=True)

    # Escape goes back to the chat, the focus back to the button that opened the panel.
    await page.locator("#usage-by").focus()
    await page.keyboard.press("Escape")
    await expect(page.locator("#usage")).to_be_hidden()
    await expect(page.locator("#chat-view")).to_be_visible()
    await expect(page.locator("#usage-toggle")).to_be_focused()
    await expect(page.locator("#usage-toggle")).to_have_attribute("aria-expanded", "false")


async def test_a_member_sees_only_their_own_usage(
    priced: Live, provider: FakeProvider, ticking_clock: Clock, page: Page
) -> None:
    await make_usage(priced, provider, ticking_clock)
    async with priced.client("bob") as bob:
        refused = await bob.get("/api/usage", params={"from": "2026-03-01", "to": "2026-03-20", "by": "user"})
    assert (refused.status_code, refused.json()["error"]["type"]) == (403, "forbidden")

    await open_usage(page, priced, "bob")
    await expect(page.locator("#usage-scope")).to_have_text("Your own usage (bob in team acme)")
    await expect(page.locator("#usage-total")).to_contain_text("$0.014")
    assert await table(page) == [
        ["2026-03-03", "1", "1,000", "250", "$0.004"],
        ["2026-03-07", "1", "3,000", "500", "$0.01"],
        ["Total", "2", "4,000", "750", "$0.014"],
    ]
    await expect(page.locator("#usage-by option")).to_have_text(["Day", "Assistant", "Connector"])  # no "User"
    assert await bars_drawn(page.locator("#usage-chart")) == 2
    # The team's budget holds bob's runs too: he sees it, and the team's spend against it.
    await expect(page.locator("#usage-budget-list li")).to_have_text(
        ["Team acme: $0.031 spent of $50.00 this month (resets 2026-04-01, UTC)"]
    )
    await page.screenshot(path=str(artifact("web-usage-member.png")), full_page=True)

    # Signing out closes the panel and forgets what it showed; the next token starts from nothing.
    await page.click("#usage-close")
    await expect(page.locator("#chat-view")).to_be_visible()
    await page.click("#usage-toggle")
    await expect(page.locator("#usage")).to_be_visible()
    await page.click("#sign-out")
    await expect(page.locator("#usage")).to_be_hidden()
    await expect(page.locator("#usage-rows tr")).to_have_count(0)
    await expect(page.locator("#usage-scope")).to_have_text("")


async def test_the_operator_sees_every_teams_usage_by_team(
    priced: Live, provider: FakeProvider, ticking_clock: Clock, page: Page
) -> None:
    await make_usage(priced, provider, ticking_clock)
    priced.tokens["ops"] = await priced.rt.store.create_token(OPERATOR, Identity("ops", operator=True))
    await open_usage(page, priced, "ops")
    # The operator's own scope has no runs; grouping by team is offered: the API answers it for this token.
    await expect(page.locator("#usage-by option")).to_have_text(["Day", "Assistant", "Connector", "Team"])
    await page.select_option("#usage-by", "team")
    await expect(page.locator("#usage-key-head")).to_have_text("Team")
    await expect(page.locator("#usage-scope")).to_have_text("Every team: the whole deployment's usage")
    await expect(page.locator("#usage-rows tr")).to_have_count(2)
    assert await table(page) == [
        ["(no team)", "1", "10,000", "0", "$0.02"],
        ["acme", "5", "6,600", "2,300", "$0.031 150 tokens without a known price"],
        ["Total", "6", "16,600", "2,300", "$0.051 150 tokens without a known price"],
    ]
    await expect(page.locator("#usage-chart-summary")).to_contain_text("$0.051 over 6 runs of every team")
    await expect(page.locator("#usage-chart")).to_be_hidden()  # no chart: its days would be the operator's own
    await page.screenshot(path=str(artifact("web-usage-operator.png")), full_page=True)
