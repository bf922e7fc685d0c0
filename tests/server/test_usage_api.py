"""Usage, budgets and admin tokens over a real uvicorn (CONTRACT §6 "Roles of tokens", §8.2), on SQLite
and PostgreSQL.

Two teams: acme (bob and carol, members; bob_admin, bob's admin token) and beta (dave, a member; erin,
its admin), and alice without a team. Their runs are spread over three days across a month's end by a
clock the test moves (the runtime's: the usage ledger's days are its days). Connectors: `fake.model`
(model `text`, in no price map: unpriced), `fake.priced` (its own `pricing`) and `fake.mini`
(`gpt-4o-mini`, priced from litellm's published map), all answered by the loopback fake provider.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.clock import Clock
from tests.support.servers import Live, assert_error, client_for, says
from tests.support.usage import APRIL_1, APRIL_2, MARCH_31, run_as
from yao_agent.identity import OPERATOR
from yao_agent.metering.pricing import published
from yao_agent.testing import FakeProvider

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

MINI = published("openai", "gpt-4o-mini")
assert MINI is not None
# USD: pricing 2/8 per Mtok; the mini call's from litellm's map.
BOB_PRICED, CAROL_PRICED, ALICE_PRICED, DAVE_PRICED = 0.004, 0.0018, 0.001, 0.008
BOB_MINI = 100_000 * MINI.input + 10_000 * MINI.output


@pytest.fixture
async def spread(usage_live: Live, provider: FakeProvider, clock: Clock) -> Live:
    """The server after everybody's runs over three days, the first in March; now is April 2nd, 15:00 UTC."""
    clock.at(MARCH_31)
    await run_as(usage_live, provider, "bob", "priced", (1000, 250))
    await run_as(usage_live, provider, "carol", "chat", (10, 5))
    await run_as(usage_live, provider, "dave", "priced", (2000, 500))
    clock.at(APRIL_1)
    await run_as(usage_live, provider, "bob", "mini", (100_000, 10_000))
    await run_as(usage_live, provider, "carol", "priced", (500, 100))
    await run_as(usage_live, provider, "alice", "priced", (100, 100))
    await run_as(usage_live, provider, "erin", "chat", (7, 3))
    clock.at(APRIL_2, hour=15)
    await run_as(usage_live, provider, "bob", "chat", (20, 10))
    await run_as(usage_live, provider, "bob_admin", "chat", (1, 1))  # bob's admin token runs as bob
    return usage_live


async def usage_of(usage_live: Live, who: str, **params: str) -> dict[str, Any]:
    async with usage_live.client(who) as client:
        response = await client.get("/api/usage", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"scope", "from", "to", "by", "rows", "total"}
    return body


def row(key: str, runs: int, tokens: tuple[int, int], cost: float, unpriced: int = 0) -> dict[str, Any]:
    return {"key": key, "runs": runs, "input_tokens": tokens[0], "output_tokens": tokens[1],
            "cost_usd": pytest.approx(cost, abs=1e-9), "unpriced_tokens": unpriced}  # fmt: skip


def total(*rows: dict[str, Any]) -> dict[str, Any]:
    """The total of rows in which each run is counted once."""
    summed = {k: sum(r[k] for r in rows) for k in ("runs", "input_tokens", "output_tokens", "unpriced_tokens")}
    costs = [getattr(r["cost_usd"], "expected", r["cost_usd"]) for r in rows]  # expected (approx) or answered rows
    return {**summed, "cost_usd": pytest.approx(sum(costs), abs=1e-9)}


# --- usage ---------------------------------------------------------------------------------------------


def test_litellms_published_price_for_gpt_4o_mini_is_the_one_openai_lists() -> None:
    """$0.15 in, $0.60 out per million tokens: what OpenAI publishes, read from litellm's offline map."""
    assert MINI is not None and (MINI.input * 1e6, MINI.output * 1e6) == pytest.approx((0.15, 0.60))


async def test_a_team_admin_sees_the_team_by_day_this_month_by_default(spread: Live) -> None:
    usage_live = spread
    report = await usage_of(usage_live, "bob_admin")
    assert (report["scope"], report["from"], report["to"], report["by"]) == (
        {"team_id": "acme"},
        APRIL_1,
        APRIL_2,
        "day",
    )
    april_1 = row(APRIL_1, 2, (100_500, 10_100), BOB_MINI + CAROL_PRICED)
    april_2 = row(APRIL_2, 2, (21, 11), 0.0, unpriced=32)
    assert report["rows"] == [april_1, april_2]
    assert report["total"] == total(april_1, april_2)


async def test_usage_by_each_grouping_over_days(spread: Live) -> None:
    usage_live = spread
    span = {"from": MARCH_31, "to": APRIL_2}
    by_day = await usage_of(usage_live, "bob_admin", **span, by="day")
    assert [r["key"] for r in by_day["rows"]] == [MARCH_31, APRIL_1, APRIL_2]
    assert by_day["rows"][0] == row(MARCH_31, 2, (1010, 255), BOB_PRICED, unpriced=15)  # dave's (beta) is not here
    by_assistant = await usage_of(usage_live, "bob_admin", **span, by="assistant")
    assert by_assistant["rows"] == [
        row("chat", 3, (31, 16), 0.0, unpriced=47),
        row("mini", 1, (100_000, 10_000), BOB_MINI),
        row("priced", 2, (1500, 350), BOB_PRICED + CAROL_PRICED),
    ]
    by_connector = await usage_of(usage_live, "bob_admin", **span, by="connector")
    assert [(r["key"], r["runs"]) for r in by_connector["rows"]] == [("fake.mini", 1), ("fake.model", 3),
                                                                     ("fake.priced", 2)]  # fmt: skip
    by_user = await usage_of(usage_live, "bob_admin", **span, by="user")
    assert by_user["rows"] == [
        row("bob", 4, (101_021, 10_261), BOB_PRICED + BOB_MINI, unpriced=32),
        row("carol", 2, (510, 105), CAROL_PRICED, unpriced=15),
    ]
    for report in (by_day, by_assistant, by_connector, by_user):  # the same total, however it is grouped
        assert report["total"] == total(*by_user["rows"])
        assert report["total"]["runs"] == 6


async def test_one_members_usage_for_an_admin_and_a_members_own(spread: Live) -> None:
    usage_live = spread
    carol_by_admin = await usage_of(usage_live, "bob_admin", user="carol", **{"from": MARCH_31}, by="assistant")
    assert carol_by_admin["scope"] == {"team_id": "acme", "user_id": "carol"}
    assert carol_by_admin["rows"] == [row("chat", 1, (10, 5), 0.0, unpriced=15),
                                      row("priced", 1, (500, 100), CAROL_PRICED)]  # fmt: skip
    carols_own = await usage_of(usage_live, "carol", **{"from": MARCH_31}, by="assistant")
    assert carols_own == carol_by_admin
    bobs_own = await usage_of(usage_live, "bob", by="connector")  # this month: his two April runs
    assert bobs_own["scope"] == {"team_id": "acme", "user_id": "bob"}
    assert bobs_own["rows"] == [row("fake.mini", 1, (100_000, 10_000), BOB_MINI),
                                row("fake.model", 2, (21, 11), 0.0, unpriced=32)]  # fmt: skip
    assert await usage_of(usage_live, "bob", user="bob", by="connector") == bobs_own  # naming himself is fine
    alice = await usage_of(usage_live, "alice", by="user")  # without a team: her own scope, of which she is the admin
    assert alice["scope"] == {"user_id": "alice"}
    assert alice["rows"] == [row("alice", 1, (100, 100), ALICE_PRICED)]


async def test_no_team_sees_another_teams_usage(spread: Live) -> None:
    usage_live = spread
    span = {"from": MARCH_31, "to": APRIL_2}
    beta = await usage_of(usage_live, "erin", **span, by="user")
    assert beta["scope"] == {"team_id": "beta"}
    assert beta["rows"] == [row("dave", 1, (2000, 500), DAVE_PRICED), row("erin", 1, (7, 3), 0.0, unpriced=10)]
    assert (await usage_of(usage_live, "erin", **span, user="bob"))["rows"] == []  # bob of beta: nobody's runs
    acme = await usage_of(usage_live, "bob_admin", **span, by="user")
    assert {r["key"] for r in acme["rows"]} == {"bob", "carol"}
    assert (await usage_of(usage_live, "bob_admin", **span, user="dave"))["rows"] == []
    assert (await usage_of(usage_live, "alice", **span))["total"]["runs"] == 1  # alice's own, not a team's


@pytest.mark.parametrize(
    ("who", "params"),
    [("bob", {"user": "carol"}), ("bob", {"by": "user"}), ("carol", {"user": "bob", "by": "day"}),
     ("alice", {"user": "bob"}), ("dave", {"user": "erin"})],
)  # fmt: skip
async def test_a_member_asking_for_the_teams_usage_is_forbidden(spread: Live, who: str, params: dict[str, str]) -> None:
    async with spread.client(who) as client:
        error = assert_error(await client.get("/api/usage", params=params), 403, "forbidden")
    assert "usage" in error["message"], error
    assert "$" not in error["message"] and "tokens" not in error["message"].replace("tokens create", "")


@pytest.mark.parametrize(
    ("query", "param", "words"),
    [
        ("from=2026-4-1", "from", "YYYY-MM-DD"),
        ("from=2026-02-30", "from", "2026-02-30"),
        ("to=2026W014", "to", "YYYY-MM-DD"),
        ("from=2026-04-02&to=2026-04-01", "from", "after"),
        ("by=model", "by", "day, assistant, connector, user, team"),
        ("by=", "by", "day"),
        ("when=today", "when", "unknown query parameter"),
        ("by=day&by=user", "by", "more than once"),
        ("user=has%20space", "user", "invalid user id"),
        ("user=" + "u" * 129, "user", "invalid user id"),
    ],
)
async def test_bad_usage_queries_are_a_400_naming_the_field(
    usage_live: Live, query: str, param: str, words: str
) -> None:
    async with usage_live.client("bob_admin") as client:
        error = assert_error(await client.get(f"/api/usage?{query}"), 400, "invalid_request")
    assert error["message"].startswith(f"{param}: ") or param in error["message"], error
    assert words in error["message"] and error.get("param") == param, error


# --- budgets -------------------------------------------------------------------------------------------


async def budgets_of(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await client.get("/api/budgets", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def windows(view: dict[str, Any]) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """(scope, id, window) → (budget, source, spent) of each budget shown, checking the rest of its shape."""
    found: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    for b in view["budgets"]:
        assert set(b) == {"scope", "id", "window", "budget_usd", "source", "ceiling_usd", "ceiling_source",
                          "admin_usd", "spent_usd", "remaining_usd", "since", "resets_at"}  # fmt: skip
        binding = [v for v in (b["ceiling_usd"], b["admin_usd"]) if v is not None]
        assert b["budget_usd"] == (min(binding) if binding else None)  # the lower of the two binds
        left = None if b["budget_usd"] is None else max(0.0, b["budget_usd"] - b["spent_usd"])
        assert b["remaining_usd"] == pytest.approx(left)
        found[(b["scope"], b["id"], b["window"])] = (b["budget_usd"], b["source"], pytest.approx(b["spent_usd"]))
    return found


async def test_a_member_sees_the_budgets_that_hold_their_runs(spread: Live) -> None:
    usage_live = spread  # now: April 2nd, 15:00 UTC
    async with usage_live.client("carol") as carol:
        view = await budgets_of(carol)
    assert view["scope"] == {"team_id": "acme", "user_id": "carol"}
    assert windows(view) == {
        ("team", "acme", "per_day"): (None, "app.yml", 0.0),  # only unpriced runs today
        ("team", "acme", "per_month"): (1.0, "app.yml", BOB_MINI + CAROL_PRICED),  # April's, not March's
        ("user", "carol@acme", "per_day"): (0.5, "app.yml", 0.0),
        ("user", "carol@acme", "per_month"): (None, "app.yml", CAROL_PRICED),
    }
    resets = {(b["window"], b["since"], b["resets_at"]) for b in view["budgets"]}
    assert resets == {("per_day", "2026-04-02T00:00:00Z", "2026-04-03T00:00:00Z"),
                      ("per_month", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z")}  # fmt: skip


def ceilings(view: dict[str, Any]) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """(scope, id, window) → (ceiling, its source, the admin's budget) of each budget shown."""
    return {(b["scope"], b["id"], b["window"]): (b["ceiling_usd"], b["ceiling_source"], b["admin_usd"])
            for b in view["budgets"]}  # fmt: skip


async def test_an_admin_sets_the_teams_budget_and_a_members_and_the_next_run_is_held_to_it(spread: Live) -> None:
    usage_live = spread
    async with usage_live.client("bob_admin") as admin, usage_live.client("carol") as carol:
        set_team = await admin.put("/api/budgets", json={"per_month": 0.02})
        assert set_team.status_code == 200, set_team.text
        assert set_team.json()["scope"] == {"team_id": "acme"}
        assert windows(set_team.json()) == {
            ("team", "acme", "per_day"): (None, "app.yml", 0.0),
            ("team", "acme", "per_month"): (0.02, "admin", BOB_MINI + CAROL_PRICED),
        }
        assert ceilings(set_team.json())[("team", "acme", "per_month")] == (1.0, "app.yml", 0.02)  # both shown
        set_carol = await admin.put("/api/budgets?user=carol", json={"per_day": 0.25, "per_month": 5})
        assert set_carol.json()["scope"] == {"team_id": "acme", "user_id": "carol"}
        assert windows(await budgets_of(carol))[("user", "carol@acme", "per_day")] == (0.25, "admin", 0.0)
        assert windows(await budgets_of(admin, user="carol")) == windows(await budgets_of(carol))
        refused = await carol.post("/api/assistants/chat/runs?stream=false", json={"messages": says("one more")})
    error = assert_error(refused, 429, "budget_exceeded")  # acme spent $0.0228 of April's $0.02
    assert error["message"] == "team acme spent $0.02 of its $0.02 monthly budget; it resets 2026-05-01T00:00:00Z"
    settings = {(b.scope_kind, b.scope_id): (dict(b.limits), dict(b.ceilings))
                for b in await usage_live.rt.store.list_budgets(OPERATOR)}  # fmt: skip
    assert settings == {("team", "acme"): ({"per_month": 0.02}, {}),
                        ("user", "acme/carol"): ({"per_day": 0.25, "per_month": 5.0}, {})}  # fmt: skip


@pytest.mark.parametrize(
    ("query", "body", "words"),
    [
        ("", {"per_month": 1.01}, "per_month: team acme's monthly budget may not be $1.01: its ceiling is $1.00 "
                                  "(app.yml's budgets.team.per_month)"),
        ("", {"per_month": None}, "per_month: team acme's monthly budget may not be none (null): its ceiling is "
                                  "$1.00 (app.yml's budgets.team.per_month)"),
        ("?user=carol", {"per_day": 5}, "per_day: user carol@acme's daily budget may not be $5.00: its ceiling is "
                                        "$0.50 (app.yml's budgets.user.per_day)"),
        ("?user=carol", {"per_month": 1, "per_day": None}, "per_day: user carol@acme's daily budget may not be none"),
    ],
)  # fmt: skip
async def test_an_admin_never_raises_or_lifts_a_budget_over_the_operators_ceiling(
    usage_live: Live, query: str, body: dict[str, Any], words: str
) -> None:
    async with usage_live.client("bob_admin") as admin:
        error = assert_error(await admin.put(f"/api/budgets{query}", json=body), 403, "forbidden")
    assert error["message"].startswith(words), error
    assert "only the operator raises the ceiling" in error["message"]
    assert (
        await usage_live.rt.store.list_budgets(OPERATOR) == []
    )  # nothing of the body was set, not even a window allowed


async def test_an_admin_sets_a_budget_at_or_below_the_ceiling_and_the_operators_ceiling_binds_it(
    usage_live: Live,
) -> None:
    async with usage_live.client("bob_admin") as admin:
        at = await admin.put("/api/budgets", json={"per_month": 1.0})  # at app.yml's ceiling
        assert at.status_code == 200, at.text
        below = await admin.put("/api/budgets?user=carol", json={"per_day": 0.1, "per_month": None})  # no ceiling
        assert below.status_code == 200, below.text
        assert ceilings(below.json())[("user", "carol@acme", "per_day")] == (0.5, "app.yml", 0.1)
        await usage_live.rt.store.set_ceilings(("team", "acme"), {"per_month": 0.75})  # the operator lowers the ceiling
        view = await budgets_of(admin)
        assert windows(view)[("team", "acme", "per_month")] == (0.75, "operator", 0.0)  # the lower binds
        assert ceilings(view)[("team", "acme", "per_month")] == (0.75, "operator", 1.0)
        again = await admin.put("/api/budgets", json={"per_month": 1.0})  # now above it
        assert "its ceiling is $0.75 (set by the operator)" in assert_error(again, 403, "forbidden")["message"]
        await usage_live.rt.store.set_ceilings(("team", "acme"), {"per_day": None, "per_month": None})  # none: lifted
        lifted = await admin.put("/api/budgets", json={"per_day": None, "per_month": 2000})
        assert lifted.status_code == 200, lifted.text
        assert windows(lifted.json())[("team", "acme", "per_month")] == (2000.0, "admin", 0.0)


async def test_a_member_changes_no_budget_and_no_team_role(usage_live: Live) -> None:
    async with usage_live.client("bob") as bob, usage_live.client("carol") as carol:
        attempts = [
            await bob.put("/api/budgets", json={"per_month": 1000}),
            await bob.put("/api/budgets?user=bob", json={"per_day": None}),  # not even his own
            await carol.put("/api/budgets?user=bob", json={"per_day": 1000}),
            await carol.get("/api/budgets?user=bob"),  # another member's are not hers to see
            await carol.put("/api/roles/default", json={"connector": "demo.echo"}),
            await carol.put("/api/roles/default", json={"connector": "no.such"}),  # says nothing of connectors
            await bob.delete("/api/roles/default"),
        ]
        for response in attempts:
            error = assert_error(response, 403, "forbidden")
            assert "team admin" in error["message"] and "tokens create --admin" in error["message"], error
        assert await usage_live.rt.store.list_budgets(OPERATOR) == []
        assert await usage_live.rt.store.list_roles(OPERATOR) == []
    async with usage_live.client("bob_admin") as admin, usage_live.client("carol") as carol:
        assert (await admin.put("/api/roles/default", json={"connector": "demo.echo"})).status_code == 200
        assert_error(await carol.delete("/api/roles/default"), 403, "forbidden")
        assert (await carol.get("/api/roles")).json()["roles"][0]["connectors"] == ["demo.echo"]  # members read
        assert (await admin.delete("/api/roles/default")).status_code == 200


async def test_a_caller_without_a_team_changes_no_budget_and_stays_held_to_app_ymls(
    usage_live: Live, provider: FakeProvider
) -> None:
    async with usage_live.client("alice") as alice:
        for query, body in (("", {"per_day": None}), ("", {"per_day": 0.25}), ("", {"per_month": 1000}),
                            ("?user=alice", {"per_day": None}), ("?user=bob", {"per_day": 1})):  # fmt: skip
            error = assert_error(await alice.put(f"/api/budgets{query}", json=body), 403, "forbidden")
            assert error["message"].startswith("a caller without a team cannot change budgets: the operator"), error
        assert_error(await alice.get("/api/budgets?user=bob"), 403, "forbidden")
        view = await budgets_of(alice)  # she still sees the budgets that hold her
    assert await usage_live.rt.store.list_budgets(OPERATOR) == []
    assert windows(view)[("user", "alice", "per_day")] == (0.5, "app.yml", 0.0)
    await run_as(usage_live, provider, "alice", "priced", (50_000, 50_000))  # $0.50 of her $0.50 a day
    async with usage_live.client("alice") as alice:
        refused = await alice.post("/api/assistants/chat/runs?stream=false", json={"messages": says("more")})
    assert assert_error(refused, 429, "budget_exceeded")["message"].startswith("user alice spent $0.50 of its $0.50")


async def test_another_teams_admin_never_sees_or_sets_acmes_budgets(spread: Live, provider: FakeProvider) -> None:
    usage_live = spread
    async with usage_live.client("bob_admin") as acme, usage_live.client("erin") as beta:
        before = await budgets_of(acme, user="bob")
        assert (await beta.put("/api/budgets", json={"per_month": 0.0})).status_code == 200
        assert (await beta.put("/api/budgets?user=bob", json={"per_day": 0.0})).status_code == 200  # beta's bob
        view = await budgets_of(beta)
        assert await budgets_of(acme, user="bob") == before
        refused = await beta.post("/api/assistants/chat/runs?stream=false", json={"messages": says("hi")})
    assert view["scope"] == {"team_id": "beta"}
    assert windows(view)[("team", "beta", "per_month")] == (0.0, "admin", 0.0)  # dave's $0.008 was in March
    assert assert_error(refused, 429, "budget_exceeded")["message"].startswith("team beta spent $0.00 of its $0.00")
    settings = {(b.scope_kind, b.scope_id) for b in await usage_live.rt.store.list_budgets(OPERATOR)}
    assert settings == {("team", "beta"), ("user", "beta/bob")}
    await run_as(spread, provider, "bob", "chat", (1, 1))  # acme's bob still runs


@pytest.mark.parametrize(
    ("body", "param"),
    [({"per_day": -1}, "per_day"), ({"per_month": "5"}, "per_month"), ({"per_day": True}, "per_day"),
     ({"per_week": 1}, "per_week"), ({}, None), ([{"per_day": 1}], None),
     ({"per_day": 1, "team_id": "beta"}, "team_id")],
)  # fmt: skip
async def test_bad_budget_bodies_are_a_400_and_set_nothing(usage_live: Live, body: Any, param: str | None) -> None:
    async with usage_live.client("bob_admin") as admin:
        error = assert_error(await admin.put("/api/budgets", json=body), 400, "invalid_request")
    assert error.get("param") == param, error
    if param is None and body == {}:
        assert "per_day" in error["message"] and "per_month" in error["message"]
    assert await usage_live.rt.store.list_budgets(OPERATOR) == []


async def test_budget_bodies_with_a_non_finite_amount_are_a_400(usage_live: Live) -> None:
    async with client_for(usage_live, usage_live.tokens["bob_admin"], **{"Content-Type": "application/json"}) as admin:
        for raw in (b'{"per_day": 1e400}', b'{"per_month": NaN}'):
            assert_error(await admin.put("/api/budgets", content=raw), 400, "invalid_request")
    assert await usage_live.rt.store.list_budgets(OPERATOR) == []
