"""Budgets before every model call (CONTRACT §8.2 "Budgets are enforced, not just checked at the door"): on
a real store (SQLite, and PostgreSQL when available), with in-process model doubles whose replies say what
each call costs, and the runtime's and store's clock fixed by the test.

Every connector here costs $0.01 a token, in and out; a call of `CALL` costs $0.30, and its `max_tokens`
(29) holds at least that much while it runs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.support.clock import Clock
from tests.support.context import Model, agent_runtime, ask
from tests.support.quota import BOB, CAROL, DAVE, Quota, hello
from tests.support.runtimes import app_files, end_of, runs_of, turn
from yao_agent.ids import RandomIds
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, Store, open_engine, store_url
from yao_agent.store.schema import budget_holds, spend_days, usage_ledger
from yao_agent.testing import FunctionModel, Reply, ScriptedModel
from yao_agent.testing.fake_scenarios import RecordedRequest

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

CALL = {"prompt_tokens": 1, "completion_tokens": 29, "total_tokens": 30}  # $0.30
HELD = "options: {max_tokens: 29}\n"  # what a call may write: its hold covers its cost


async def spent(store: Store) -> float:
    """What the ledger says was spent, in USD (each call once)."""
    return float(await store.db.read_tx(lambda tx: tx.scalar(select(func.coalesce(func.sum(usage_ledger.c.cost_usd),
                                                                                     0.0)))))  # fmt: skip


async def count(store: Store, table: Any) -> int:
    return int(await store.db.read_tx(lambda tx: tx.scalar(select(func.count()).select_from(table))))


def slow_model() -> FunctionModel:
    """Each call takes a moment, so that calls of concurrent runs are in flight together."""

    async def answer(_request: RecordedRequest) -> Reply:
        await asyncio.sleep(0.02)
        return Reply(text="Done.", usage=CALL)

    return FunctionModel(answer)


@pytest.mark.parametrize("processes", [1, 2], ids=["one-runtime", "two-runtimes"])
async def test_concurrent_runs_of_a_team_spend_past_its_budget_by_at_most_one_call(
    tmp_path: Path, timed_store: SqlStore, clock: Clock, store_raw_url: str, processes: int
) -> None:
    """20 runs of acme at once against its $1.00 a day, half on each of two runtimes with their own connections
    when there are two (as two processes): each passes the door (nothing is spent yet), and each call holds
    $0.30+ while it runs, so only the calls the budget has room for are made."""
    model = slow_model()
    quota = Quota(tmp_path, timed_store, ScriptedModel(), clock, model=model)
    other = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)), clock=clock) if processes == 2 else None
    try:
        stores = [timed_store] if other is None else [timed_store, other]
        services = [Runs(quota.runtime(budgets="{team: {per_day: 1}}", connector=HELD, store=s, ids=RandomIds()))
                    for s in stores]  # fmt: skip
        who = (BOB, CAROL)
        handles = await asyncio.gather(*(services[n % processes].start(hello(who[n % 2], f"c{n}")) for n in range(20)))
        for handle in handles:
            async for _ in handle.events():
                pass
        ends = [(h.result().status, h.result().reason) for h in handles]
        made = sum(1 for end in ends if end == ("completed", "completed"))
        assert ends.count(("failed", "budget_exceeded")) == 20 - made, ends
        assert 1 <= made <= 4 and len(model.requests) == made  # a call refused is never sent
        assert await spent(timed_store) <= 1.00 + 0.30 + 1e-9  # the budget, and at most the last call past it
        assert await count(timed_store, budget_holds) == 0  # every call that ended gave its hold back
    finally:
        for rt in quota.made:
            await rt.engines.aclose()
        if other is not None:
            await other.aclose()


async def test_a_hook_whose_ctx_calls_spend_is_stopped_at_the_budget(
    quota: Quota, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A Create hook asks another assistant 20 times and catches every failure: the budget is not its to
    catch. The run ends `budget_exceeded` once the calls reach it, stored so, without its own model call."""
    hook = ("async function Create(ctx, messages) {\n"
            "  for (let i = 0; i < 20; i++) {\n"
            "    try { await ctx.call('expert', [{role: 'user', content: 'help ' + i}]); }\n"
            "    catch (e) { ctx.log('info', 'caught: ' + e); }\n"
            "  }\n"
            "  return null;\n}\n")  # fmt: skip
    more = {"hooks/front.js": hook, "assistants/front/assistant.yml": "name: Front\nhook: hooks/front.js\n",
            "assistants/expert/assistant.yml": "name: Expert\n"}  # fmt: skip
    rt = quota.runtime(budgets="{user: {per_day: 1}}", connector=HELD, more=more)
    quota.fake.enqueue(*(Reply(text=f"Expert {n}.", usage=CALL) for n in range(20)))
    with caplog.at_level(logging.INFO, logger="yao_agent.hook"):
        end = end_of(await turn(rt, "question", "c1", DAVE, assistant="front"))
    assert (end.status, end.reason) == ("failed", "budget_exceeded")
    assert "caught" not in caplog.text  # the hook never saw the refusal: its run ended there
    assert end.error is not None and end.error["message"].startswith("user dave@beta spent $1.20 of its $1.00 daily")
    assert len(quota.fake.requests) == 4  # $0.30 each: the fifth would start at $1.20 spent
    assert end.usage["calls"] == 4 and end.usage["cost_usd"] == pytest.approx(1.20)
    run = await rt.store.latest_run(DAVE, "c1")
    assert run is not None and (run.status, run.reason) == ("failed", "budget_exceeded")
    assert await spent(rt.store) == pytest.approx(1.20)


async def test_a_calls_cost_is_written_as_it_ends_and_it_holds_its_price_while_it_runs(
    quota: Quota, clock: Clock
) -> None:
    """The first call's cost is in the store while the run's second call is still running (a run killed
    then would still have spent it), and the second holds what it may cost until it ends."""
    gate = asyncio.Event()
    asked: list[int] = []

    async def answer(_request: RecordedRequest) -> Reply:
        asked.append(1)
        if len(asked) == 2:
            await gate.wait()
            return Reply(text="Second.", usage=CALL)
        return Reply(text="First", usage=CALL, finish_reason="length")  # continued: a second call of the run

    model = FunctionModel(answer)
    rt = Quota(quota.tmp_path, quota.store, quota.fake, clock, model=model).runtime(
        budgets="{team: {per_month: 100}}", connector=HELD
    )
    quota.made.append(rt)
    task = asyncio.create_task(turn(rt, "Tell me.", "c1", BOB))
    await model.wait_for_requests(2)
    assert await spent(rt.store) == pytest.approx(0.30)  # written as the first call ended, not at the run's end
    days = await rt.store.db.read_tx(lambda tx: tx.all(select(spend_days.c.scope_kind, spend_days.c.cost_usd)))
    assert sorted((r.scope_kind, round(r.cost_usd, 6)) for r in days) == [("team", 0.3), ("user", 0.3)]
    holds = await rt.store.db.read_tx(lambda tx: tx.all(select(budget_holds)))
    assert [(h.scope_kind, h.scope_id) for h in holds] == [("team", "acme")]  # the team has the budget
    assert holds[0].cost_usd >= 0.29  # its max_tokens at the price (and its input, estimated)
    gate.set()
    end = end_of(await task)
    assert end.status == "completed"
    assert await count(rt.store, budget_holds) == 0
    assert await count(rt.store, usage_ledger) == 2 and await spent(rt.store) == pytest.approx(0.60)  # once each


async def test_a_run_stopped_by_a_budget_is_resumed_once_the_operator_allows_it(quota: Quota, clock: Clock) -> None:
    rt = quota.runtime(budgets="{user: {per_day: 0.3}}", connector=HELD)
    quota.fake.enqueue(Reply(text="One", usage=CALL, finish_reason="length"), Reply(text="One more", usage=CALL),
                       Reply(text=" and the rest.", usage=CALL))  # fmt: skip
    end = end_of(await turn(rt, "Tell me.", "c1", CAROL))  # $0.30: the continuation is not made
    assert (end.status, end.reason) == ("failed", "budget_exceeded")
    assert end.error is not None and "calls in flight" not in end.error["message"]
    await quota.store.set_ceilings(("user", "acme/carol"), {"per_day": 5})
    handle = await runs_of(rt).resume(CAROL, "c1")
    async for _ in handle.events():
        pass
    assert (handle.result().status, handle.result().reason) == ("completed", "completed")
    assert len(quota.fake.requests) == 2


async def test_a_run_no_budget_holds_takes_no_hold(quota: Quota, clock: Clock) -> None:
    """Without a budget nothing is held and the cost is written with the step, as before (no round trip)."""
    rt = quota.runtime(budgets="{user: {per_day: null}}", connector=HELD)
    quota.fake.enqueue(Reply(text="Done.", usage=CALL))
    handle = await runs_of(rt).start(hello(DAVE, "c1"))
    assert handle.state.budgeted is False
    async for _ in handle.events():
        pass
    assert handle.result().status == "completed" and await spent(rt.store) == pytest.approx(0.30)


async def test_a_summary_call_is_held_to_the_budget_too(tmp_path: Path, store: SqlStore) -> None:
    """test_context's agent summarises its earlier turns in its fifth run, after that run's first call (the
    ninth): with each call costing $1 and $9 a day, the summary is the call refused."""
    model = Model()

    def priced(request: RecordedRequest) -> Reply:
        return replace(model(request), usage={"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1})

    double = FunctionModel(priced)
    files = app_files(double.base_url)
    dollar = "pricing: {input_per_mtok: 0, output_per_mtok: 1000000}\n"  # $1 an output token
    more = {"app.yml": files["app.yml"] + "budgets: {user: {per_day: 9}}\n",
            "connectors/fake/model.yml": files["connectors/fake/model.yml"] + dollar}  # fmt: skip
    rt = agent_runtime(tmp_path, store, double, **more)
    try:
        ends = [end_of(await ask(rt, number)) for number in range(1, 6)]
    finally:
        await rt.engines.aclose()
        await rt.tools.aclose()
    assert [(e.status, e.reason) for e in ends] == [("completed", "completed")] * 4 + [("failed", "budget_exceeded")]
    assert len(model.requests) == 9 and not model.summarised  # the summariser was never called
