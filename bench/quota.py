"""What the stage-1 checks (budgets and rate limits, CONTRACT §8.2) add to a run start, on SQLite and on
PostgreSQL.

    .venv/bin/python bench/quota.py [--checks 2000] [--calls 10000] [--pg postgresql://…]

Each sample is one `quota.check`, what `Runs.start` calls after the permission check: the team's and
the user's budgets (their own settings read, their spend in each window summed from the usage ledger)
and the rate limits (in one write transaction, under an advisory lock per scope on PostgreSQL: the
runs and the model tokens of the last minute counted, the run recorded). The app sets every budget and
limit of CONTRACT §3.1 (team per month, user per day, requests and tokens per minute of both), none
ever reached; the baseline is the same call on an app that sets none, which still reads the scopes'
own budget settings (an admin may have set one where app.yml has none).

Before every model call of a run a budget holds, the call holds what it may cost and, as it ends, gives
the hold back and writes its ledger row (`per model call`: `take_hold` then `give_back`, the two write
transactions `quota.before_call` and `quota.after_call` make; the ledger row is one the step journal
would otherwise write, so this is an upper bound of what a budget adds to a call). A run no budget
holds makes neither.

Measured with an empty ledger, and with `calls` model calls of the team this month so far (a tenth of
them the user's) spread evenly over the month; the clock moves 0.1 s per start: 600 runs a minute, so
the minute holds 600 rate events once it is full. Medians of this process's CPU time on SQLite (the
database works in this process) and of wall time on PostgreSQL (its server works in its own), the two
ways alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, print_table, write_app
from bench.flush import PG, drop, pg_database
from yao_agent.dsl import load_app
from yao_agent.identity import Identity
from yao_agent.pipeline import Runtime, quota
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store import ledger as usage
from yao_agent.store.holds import Hold
from yao_agent.store.records import RunRecord, StepRecord

WHO = Identity("bench", "acme")
START = datetime(2026, 12, 20, 12, tzinfo=UTC).timestamp()  # the month's 20th day, at noon
PACE_S = 0.1  # between two run starts of the team
CALLS = 10_000  # a team of 20 making 25 model calls a day each, 20 days into the month
BASE = {
    "connectors/bench/model.yml": "type: openai\nmodel: gpt-4o-mini\nbase_url: http://127.0.0.1:9/v1\napi_key: x\n",
    "assistants/chat/assistant.yml": "name: Chat\n",
}
CONFIGURED = """\
roles:
  default: bench.model
limits:
  requests_per_minute: {{team: 100000, user: 100000}}
  tokens_per_minute: {{team: 1000000000, user: 1000000000}}
budgets:
  team: {{per_month: 1000000}}
  user: {{per_day: 1000000}}
"""  # write_app formats it: {{ }} are braces
PLAIN = "roles:\n  default: bench.model\n"


class Clock:
    """The runtimes' and the store's time: it moves when the benchmark says (a start every PACE_S)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


async def seed(store: SqlStore, calls: int) -> None:
    """`calls` ledger rows of the team from the start of the month until START, a tenth of them WHO's, and
    the scopes' spend per day that goes with them."""
    month = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    rows: list[dict[str, Any]] = []
    for n in range(calls):
        at = month + (START - month) * n / max(calls, 1)
        user = WHO.user_id if n % 10 == 0 else f"user{n % 10}"
        rows.append({"step_id": f"s{n}", "run_id": f"r{n // 2}", "chat_id": f"c{n // 20}", "user_id": user,
                     "team_id": "acme", "assistant_id": "chat", "connector": "bench.model", "model": "gpt-4o-mini",
                     "input_tokens": 900, "output_tokens": 300, "cost_usd": 0.0003, "day": usage.day_of(at),
                     "at": at})  # fmt: skip
    for first in range(0, len(rows), 1000):
        await store.db.write_tx(lambda tx, some=rows[first : first + 1000]: tx.executemany(usage.INSERT, some))
    # And the scopes' totals per day, as `ledger.record` keeps them with every row: what budgets read.
    days: dict[tuple[str, str, str], float] = {}
    for row in rows:
        who = Identity(row["user_id"], "acme")
        for kind in ("team", "user"):
            key = (*usage.scope_of(who, kind), row["day"])
            days[key] = days.get(key, 0.0) + row["cost_usd"]
    spends = [{"scope_kind": k, "scope_id": o, "day": d, "cost_usd": c} for (k, o, d), c in days.items()]
    if spends:
        await store.db.write_tx(lambda tx: tx.executemany(usage.ADD_SPEND, spends))


async def check_ms(url: str, root: Path, checks: int, calls: int, index: int) -> tuple[float, float]:
    """Medians (ms) of one check with every budget and limit set, and with none; `index` 0 is CPU, 1 wall."""
    clock = Clock()
    store = SqlStore(await open_engine(store_url(url, root)), clock=clock)
    try:
        await seed(store, calls)
        apps = {"configured": CONFIGURED, "plain": PLAIN}
        ways = {name: Runtime(app=load_app(write_app(root / name, {**BASE, "app.yml": text})), store=store, clock=clock)
                for name, text in apps.items()}  # fmt: skip
        samples: dict[str, list[float]] = {name: [] for name in ways}
        warmup = max(10, checks // 10)
        for n in range(warmup + checks):
            clock.now += PACE_S
            for name, rt in ways.items():
                taken = await measured(lambda rt=rt, run=f"run{n}": quota.check(rt, WHO, run), index)
                if n >= warmup:
                    samples[name].append(taken)
        return statistics.median(samples["configured"]) * 1000, statistics.median(samples["plain"]) * 1000
    finally:
        await store.aclose()


async def call_ms(url: str, root: Path, samples: int, index: int) -> float:
    """Median (ms) of what a budget adds to one model call: its hold taken, then given back with its cost.
    It reads the scopes' totals per day (at most a month of rows each), never the ledger: its size is moot."""
    clock = Clock()
    store = SqlStore(await open_engine(store_url(url, root)), clock=clock)
    try:
        rt = Runtime(app=load_app(write_app(root / "held", {**BASE, "app.yml": CONFIGURED})), store=store, clock=clock)
        defaults = quota.defaults_of(rt, WHO)
        run = RunRecord("bench-run", "bench-chat", WHO.user_id, WHO.team_id, "chat", "trace", "bench", START)
        taken: list[float] = []
        warmup = max(10, samples // 10)
        for n in range(warmup + samples):
            clock.now += PACE_S
            made = {"connector": "bench.model", "model": "gpt-4o-mini", "assistant": "chat",
                    "usage": {"input_tokens": 900, "output_tokens": 300, "cost_usd": 0.0003}}  # fmt: skip
            step = StepRecord(f"bench-step-{n}", run.id, n + 1, "llm", "completed", clock.now, ended_at=clock.now,
                              output=made)  # fmt: skip
            days = {w: usage.day_of(quota.window_start(w, datetime.fromtimestamp(clock.now, UTC)).timestamp())
                    for w in quota.WINDOWS}  # fmt: skip
            hold = Hold(step.id, run.id, 0.01, clock.now + 300)

            async def one(step: StepRecord = step, days: dict[str, str] = days, hold: Hold = hold) -> None:
                held = await store.take_hold(WHO, defaults, days, hold, clock.now)
                await store.give_back(held.scopes, hold.id, run, [step], clock.now)

            spent = await measured(one, index)
            if n >= warmup:
                taken.append(spent)
        return statistics.median(taken) * 1000
    finally:
        await store.aclose()


async def measured(call: Callable[[], Awaitable[object]], index: int) -> float:
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    return (time.process_time() - cpu, time.perf_counter() - wall)[index]


async def measure(checks: int, calls: int, pg: str | None) -> list[Row]:
    """Rows for an empty ledger and for one of `calls` calls this month: a budget sums the month's."""
    rows: list[Row] = []
    for ledger in sorted({0, calls}):
        held = f"{ledger:,} calls this month" if ledger else "empty ledger"
        with tempfile.TemporaryDirectory() as tmp:
            ours, plain = await check_ms(f"sqlite:///{Path(tmp) / 'quota.db'}", Path(tmp), checks, ledger, 0)
            rows.append(Row(f"stage-1 quota checks, SQLite (CPU), {held}", ours, "ms", "max", 0.3,
                            note=f"none set: {plain:.3g} ms"))  # fmt: skip
            if not ledger:
                added = await call_ms(f"sqlite:///{Path(tmp) / 'calls.db'}", Path(tmp), checks, 0)
                rows.append(Row("budget held and given back per model call, SQLite (CPU)", added, "ms", "max", 0.3,
                                note="no budget: no round trip"))  # fmt: skip
            if pg:
                url, name = pg_database(pg)
                try:
                    ours, plain = await check_ms(url, Path(tmp), checks, ledger, 1)
                    rows.append(Row(f"stage-1 quota checks, PostgreSQL (wall), {held}", ours, "ms", "max", 2.0,
                                    note=f"none set: {plain:.3g} ms"))  # fmt: skip
                    if not ledger:
                        added = await call_ms(url, Path(tmp) / "pg", checks, 1)
                        rows.append(Row("budget held and given back per model call, PostgreSQL (wall)", added, "ms",
                                        "max", 3.0, note="no budget: no round trip"))  # fmt: skip
                finally:
                    drop(pg, name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=CALLS, help="the team's model calls in the ledger this month")
    parser.add_argument("--pg", default=os.environ.get("YAO_AGENT_BENCH_PG", PG), help="'' to skip PostgreSQL")
    args = parser.parse_args()
    print_table(asyncio.run(measure(args.checks, args.calls, args.pg or None)))


if __name__ == "__main__":
    main()
