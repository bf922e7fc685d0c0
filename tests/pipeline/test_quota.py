"""Budgets and rate limits at stage 1 (CONTRACT §3.1 `budgets`, `limits.*_per_minute`, §8.2), as a caller
of `Runs` meets them: on a real store (SQLite, and PostgreSQL when available), with the in-process model
double (its replies' `usage` decide what a call costs) and one injected clock for the runtime and the
store, so a budget's day or month, and a rate limit's minute, pass when a test says so.

Every connector here is priced at $0.01 a token, in and out, so a reply's tokens are its cents.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, func, select

from tests.support.clock import Clock
from tests.support.quota import BOB, CAROL, DAVE, LIMITS, Quota, hello
from tests.support.runtimes import end_of, runs_of, turn
from yao_agent.errors import BudgetExceeded, RateLimited
from yao_agent.identity import Identity
from yao_agent.ids import RandomIds
from yao_agent.pipeline import Runtime
from yao_agent.pipeline import quota as stage1
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, Store, open_engine, store_url
from yao_agent.store.schema import chats, messages, rate_events, runs, usage_ledger
from yao_agent.testing import Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ALICE = Identity("alice")  # no team: only her user scope


def costing(cents: int, text: str = "Done.", **extra: Any) -> Reply:
    """A reply whose call costs `cents` (its tokens: the first half in, the rest out)."""
    usage = {"prompt_tokens": cents // 2, "completion_tokens": cents - cents // 2, "total_tokens": cents}
    return Reply(text=text, usage=usage, **extra)


async def rows(store: Store, table: Table) -> int:
    return int(await store.db.read_tx(lambda tx: tx.scalar(select(func.count()).select_from(table))))


async def counts(store: Store) -> dict[str, int]:
    """How many chats, runs, messages, ledger rows and rate events the store holds."""
    tables = (chats, runs, messages, usage_ledger, rate_events)
    return {table.name: await rows(store, table) for table in tables}


async def runs_now(q: Quota, rt: Runtime, who: Identity, chat_id: str, cents: int = 1) -> None:
    """A run of `who` is admitted, and completes, its one model call costing `cents`."""
    q.fake.enqueue(costing(cents))
    assert end_of(await turn(rt, "Hello.", chat_id, who)).status == "completed"


async def refused_budget(rt: Runtime, who: Identity, chat_id: str = "refused") -> str:
    """Start a run that a budget refuses; its message, once it is shown that nothing was created for it
    (on a new chat, no chat; on one that exists, nothing of it changed)."""
    before = await counts(rt.store), await rt.store.get_chat(who, chat_id)
    with pytest.raises(BudgetExceeded) as refused:
        await runs_of(rt).start(hello(who, chat_id))
    assert (await counts(rt.store), await rt.store.get_chat(who, chat_id)) == before
    return str(refused.value)


async def refused_rate(rt: Runtime, who: Identity, chat_id: str = "refused") -> RateLimited:
    """Start a run that a rate limit refuses; the refusal, once it is shown that nothing was recorded
    for it (not even a rate event: a refused run does not count against the limit)."""
    before = await counts(rt.store), await rt.store.get_chat(who, chat_id)
    with pytest.raises(RateLimited) as refused:
        await runs_of(rt).start(hello(who, chat_id))
    assert (await counts(rt.store), await rt.store.get_chat(who, chat_id)) == before
    return refused.value


# -- budgets ---------------------------------------------------------------------------------------


async def test_a_run_that_reaches_the_team_budget_stops_before_its_next_call_and_the_next_run_waits_a_day(
    quota: Quota, clock: Clock
) -> None:
    rt = quota.runtime(budgets="{team: {per_day: 100}}")
    await runs_now(quota, rt, BOB, "morning", cents=9000)  # $90.00 of the day's $100.00
    clock.set("2026-12-15T14:30:00")
    # Carol's run reaches it with its first call ($10.00), whose reply the output limit cut: its continuation
    # is not made (a budget binds before every model call), and what was said stands, as cut.
    quota.fake.enqueue(costing(1000, "The first half", finish_reason="length"), costing(2, " and the rest."))
    end = end_of(await turn(rt, "Tell me everything.", "crossing", CAROL))
    assert (end.status, end.reason, end.usage["calls"], end.usage["cost_usd"]) == (
        "failed", "budget_exceeded", 1, pytest.approx(10.0))  # fmt: skip
    said = "team acme spent $100.00 of its $100.00 daily budget; it resets 2026-12-16T00:00:00Z"
    assert end.error == {"message": said.replace("; it", "; the model was not called; it"),
                         "resets_at": "2026-12-16T00:00:00Z"}  # fmt: skip
    assert len(quota.fake.requests) == 2  # Bob's call and Carol's first: the continuation was never sent
    last = (await rt.store.history(CAROL, "crossing"))[-1]
    assert (last.content, last.status) == ("The first half", "incomplete")
    run = await rt.store.latest_run(CAROL, "crossing")
    assert run is not None
    assert (run.status, run.reason) == ("failed", "budget_exceeded")

    clock.advance(60)
    assert await refused_budget(rt, BOB) == said  # the team's spend, whoever of it spent it
    assert await refused_budget(rt, CAROL, "crossing") == said  # also on a chat of hers that exists
    await runs_now(quota, rt, DAVE, "other-team")  # another team's budget is its own
    clock.set("2026-12-15T23:59:59")
    assert await refused_budget(rt, BOB) == said
    clock.set("2026-12-16T00:00:00")  # a new day, a new budget
    await runs_now(quota, rt, BOB, "next-day")


async def test_a_monthly_budget_resets_when_the_month_rolls_over(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(budgets="{team: {per_month: 100}}")
    clock.set("2026-12-02T09:00:00")
    await runs_now(quota, rt, BOB, "early", cents=10002)
    clock.set("2026-12-31T23:59:59")  # spent on another day of the same month: it counts
    message = await refused_budget(rt, CAROL)
    assert message == "team acme spent $100.02 of its $100.00 monthly budget; it resets 2027-01-01T00:00:00Z"
    clock.set("2027-01-01T00:00:00")
    await runs_now(quota, rt, CAROL, "january", cents=9000)
    clock.set("2027-01-31T12:00:00")
    await runs_now(quota, rt, CAROL, "january", cents=1000)  # $100.00: the budget reached
    clock.advance(1)
    said = "team acme spent $100.00 of its $100.00 monthly budget; it resets 2027-02-01T00:00:00Z"
    assert await refused_budget(rt, BOB) == said


async def test_user_budgets_are_each_users_own_and_the_team_budget_sums_them(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(budgets="{team: {per_month: 3}, user: {per_day: 1}}")
    await runs_now(quota, rt, BOB, "bob", cents=150)
    said = "user bob@acme spent $1.50 of its $1.00 daily budget; it resets 2026-12-16T00:00:00Z"
    assert await refused_budget(rt, BOB) == said
    await runs_now(quota, rt, Identity("bob", "beta"), "namesake")  # the same name in another team: another user
    await runs_now(quota, rt, ALICE, "alice", cents=100)  # without a team: her user budget alone
    said = "user alice spent $1.00 of its $1.00 daily budget; it resets 2026-12-16T00:00:00Z"
    assert await refused_budget(rt, ALICE) == said  # at the budget is over it
    await runs_now(quota, rt, CAROL, "carol", cents=90)  # acme's month: $2.40 of $3.00
    clock.set("2026-12-16T08:00:00")  # a new day for the users, not a new month for the team
    await runs_now(quota, rt, BOB, "bob", cents=60)  # acme: $3.00
    said = "team acme spent $3.00 of its $3.00 monthly budget; it resets 2027-01-01T00:00:00Z"
    assert await refused_budget(rt, Identity("erin", "acme")) == said  # a user who spent nothing
    assert await refused_budget(rt, CAROL) == said  # under her own budget, over the team's


async def test_the_operators_ceiling_of_a_scope_wins_over_app_yml_window_by_window(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(budgets="{team: {per_month: 100}, user: {per_day: null}}")
    await runs_now(quota, rt, CAROL, "carol", cents=10002)
    await runs_now(quota, rt, DAVE, "dave", cents=1)
    assert (await refused_budget(rt, BOB)).startswith("team acme spent $100.02 of its $100.00 monthly budget")
    await rt.store.set_ceilings(("team", "acme"), {"per_month": 150})
    await runs_now(quota, rt, BOB, "bob", cents=5000)
    said = "team acme spent $150.02 of its $150.00 monthly budget; it resets 2027-01-01T00:00:00Z"
    assert await refused_budget(rt, BOB) == said
    await rt.store.set_ceilings(("team", "acme"), {"per_month": None})  # lifted: app.yml's $100 does not come back
    await runs_now(quota, rt, BOB, "bob", cents=1000)
    await rt.store.set_ceilings(("team", "acme"), {"per_day": 160})  # a window of its own; the month stays lifted
    said = "team acme spent $160.02 of its $160.00 daily budget; it resets 2026-12-16T00:00:00Z"
    assert await refused_budget(rt, CAROL) == said
    clock.set("2026-12-16T00:00:01")
    await runs_now(quota, rt, CAROL, "carol")
    await runs_now(quota, rt, DAVE, "dave", cents=9000)  # beta's month, on app.yml's budget: $90.02 of $100
    await rt.store.set_ceilings(
        ("user", "beta/dave"), {"per_day": 50}
    )  # a user's own, where app.yml has none (its key)
    said = "user dave@beta spent $90.00 of its $50.00 daily budget; it resets 2026-12-17T00:00:00Z"
    assert await refused_budget(rt, DAVE) == said
    await runs_now(quota, rt, Identity("frank", "beta"), "frank")


# -- rate limits -----------------------------------------------------------------------------------


async def test_requests_per_minute_of_a_team_count_its_users_runs_and_free_up_as_the_minute_passes(
    quota: Quota, clock: Clock
) -> None:
    rt = quota.runtime(limits=LIMITS % ", requests_per_minute: {team: 2}")
    await runs_now(quota, rt, BOB, "one")
    clock.advance(10)
    await runs_now(quota, rt, CAROL, "two")
    clock.advance(10)
    refused = await refused_rate(rt, BOB)
    assert refused.retry_after == pytest.approx(40)  # when Bob's run, the oldest counted, leaves the minute
    assert str(refused) == (
        "too many requests: a rate limit was reached (team acme: 2 requests per minute); try again in 40 s"
    )
    await runs_now(quota, rt, DAVE, "beta")  # another team counts its own
    clock.advance(40)  # as told: one of the two leaves the minute
    await runs_now(quota, rt, BOB, "three")
    refused = await refused_rate(rt, CAROL)  # Carol's at +10 s and this one: the refusal above did not count
    assert refused.retry_after == pytest.approx(10)
    clock.advance(10)
    await runs_now(quota, rt, CAROL, "four")


async def test_requests_per_minute_of_a_user_are_each_users_own(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(limits=LIMITS % ", requests_per_minute: {user: 1}")
    await runs_now(quota, rt, BOB, "bob")
    await runs_now(quota, rt, ALICE, "alice")
    clock.advance(15)
    refused = await refused_rate(rt, BOB)
    assert refused.retry_after == pytest.approx(45)
    assert "user bob@acme: 1 requests per minute" in str(refused)
    assert (await refused_rate(rt, ALICE)).retry_after == pytest.approx(45)
    await runs_now(quota, rt, CAROL, "carol")
    await runs_now(quota, rt, Identity("bob", "beta"), "namesake")
    clock.advance(45)
    await runs_now(quota, rt, BOB, "bob")


async def test_a_rate_limit_refusal_names_the_one_limit_reached(quota: Quota, clock: Clock) -> None:
    limits = ", requests_per_minute: {team: 5, user: 1}, tokens_per_minute: {team: 1000, user: 1000}"
    rt = quota.runtime(limits=LIMITS % limits)
    await runs_now(quota, rt, BOB, "one")
    clock.advance(20)
    refused = await refused_rate(rt, BOB)  # his own 1 a minute, not the team's 5 nor either 1000 tokens
    assert str(refused) == "too many requests: a rate limit was reached (user bob@acme: 1 requests per minute); " \
                           "try again in 40 s"  # fmt: skip
    for n in range(4):
        await runs_now(quota, rt, Identity(f"member{n}", "acme"), f"m{n}")
    refused = await refused_rate(rt, CAROL)  # the team's five: the one reached, though hers is not
    assert "(team acme: 5 requests per minute)" in str(refused) and "user" not in str(refused)


async def test_tokens_per_minute_count_the_model_tokens_of_the_last_minute(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(limits=LIMITS % ", tokens_per_minute: {team: 100, user: 150}")
    await runs_now(quota, rt, BOB, "one", cents=60)
    clock.advance(15)
    await runs_now(quota, rt, CAROL, "two", cents=60)  # 60 tokens were under 100: admitted, and now 120
    clock.advance(15)
    refused = await refused_rate(rt, BOB)
    assert refused.retry_after == pytest.approx(30)  # until the oldest call's tokens leave the minute
    assert "team acme: 100 tokens per minute" in str(refused)
    await runs_now(quota, rt, DAVE, "beta", cents=200)  # another team; Dave's tokens: 200 of his 150
    assert (await refused_rate(rt, DAVE)).retry_after == pytest.approx(60)  # his own limit now
    clock.advance(30)  # as told: Bob's 60 tokens have left the minute, Carol's 60 are under 100
    await runs_now(quota, rt, BOB, "three", cents=60)
    clock.advance(60)
    await runs_now(quota, rt, DAVE, "beta")


async def test_a_budget_refusal_comes_first_and_is_not_counted_by_the_rate_limit(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(budgets="{team: {per_day: 1}}", limits=LIMITS % ", requests_per_minute: {team: 2}")
    await runs_now(quota, rt, BOB, "one", cents=100)
    for _ in range(3):  # each refused by the budget, none counted as a request
        assert (await refused_budget(rt, CAROL)).startswith("team acme spent $1.00 of its $1.00 daily budget")
    await rt.store.set_ceilings(("team", "acme"), {"per_day": None})
    await runs_now(quota, rt, CAROL, "two")  # the second request of the minute
    await refused_rate(rt, CAROL)


@pytest.mark.parametrize("limit", ["requests_per_minute: {team: 5}", "requests_per_minute: {user: 5}"])
async def test_concurrent_starts_from_two_runtimes_on_one_database_admit_no_more_than_the_limit(
    quota: Quota, clock: Clock, store_raw_url: str, tmp_path: Path, limit: str
) -> None:
    """Two runtimes, each with its own connections to the database, as two processes would have: 24 runs
    started at once by the same user, half on each."""
    other = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)), clock=clock)
    try:
        # Random run ids, as processes have: counted ones would be the same in both.
        here = quota.runtime(limits=LIMITS % f", {limit}", ids=RandomIds())
        there = quota.runtime(limits=LIMITS % f", {limit}", store=other, ids=RandomIds())
        services = (Runs(here), Runs(there))
        starts = [services[n % 2].start(hello(BOB, f"c{n}")) for n in range(24)]
        outcomes = await asyncio.gather(*starts, return_exceptions=True)
        admitted = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        for handle in admitted:  # each to its end first, so that a failure leaves nothing running
            async for _ in handle.events():
                pass
        assert len(admitted) == 5 and all(isinstance(o, RateLimited) for o in refused), refused
        assert {handle.result().status for handle in admitted} == {"completed"}
        assert (await rows(other, rate_events), await rows(other, runs)) == (5, 5)
    finally:
        await other.aclose()


# -- round trips -----------------------------------------------------------------------------------


async def test_a_run_start_on_postgresql_checks_every_budget_and_limit_in_two_statements(
    quota: Quota, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage 1 on PostgreSQL is one transaction of two statements whatever the app sets (the scopes'
    locks, then the statement that reads and counts: store/admission.py), and one with nothing to lock."""
    if quota.store.db.dialect != "postgresql":
        pytest.skip("SQLite's transactions are local: they cost no round trip")
    import psycopg

    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    every = LIMITS % ", requests_per_minute: {team: 9, user: 9}, tokens_per_minute: {team: 900, user: 900}"
    limited = quota.runtime(budgets="{team: {per_month: 9}, user: {per_day: 9}}", limits=every)
    plain = quota.runtime()
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    for rt, expected in ((limited, 2), (plain, 1)):
        statements.clear()
        assert (await stage1.check(rt, BOB, f"run-{expected}")).budgeted is (expected == 2)
        assert len([s for s in statements if s.strip() != ";"]) == expected, statements  # (";": the pool's ping)
