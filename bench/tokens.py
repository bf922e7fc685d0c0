"""What checking a request's token adds for its expiry and its last use (CONTRACT §9.3), on SQLite and on
PostgreSQL.

    .venv/bin/python bench/tokens.py [--checks 5000] [--pg postgresql://…]

Each sample is one token check as the server makes it before anything else of a request (`Tokens.
identity_for`: the token looked up by its hash, its expiry compared, its last use noted when a minute
old — a write in a task of its own, which the request does not wait for). The baseline is the lookup
alone, what the check was before tokens expired. The clock moves 0.1 s per check: 600 requests a
minute on one token, so one check in 600 starts the write. Medians of this process's CPU time on SQLite
(the database works in this process) and of wall time on PostgreSQL, the two ways alternating.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, print_table, write_app
from bench.flush import PG, drop, pg_database
from yao_agent.dsl import load_app
from yao_agent.identity import OPERATOR, Identity
from yao_agent.pipeline import Runtime
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url

FILES = {
    "connectors/bench/model.yml": "type: openai\nmodel: gpt-4o-mini\nbase_url: http://127.0.0.1:9/v1\napi_key: x\n",
    "assistants/chat/assistant.yml": "name: Chat\n",
}
PACE_S = 0.1


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def measured(call: Callable[[], Awaitable[object]], index: int) -> float:
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    return (time.process_time() - cpu, time.perf_counter() - wall)[index]


async def check_ms(url: str, root: Path, checks: int, index: int) -> tuple[float, float]:
    """Medians (ms) of the whole check and of the lookup alone; `index` 0 is CPU, 1 wall."""
    clock = Clock()
    store = SqlStore(await open_engine(store_url(url, root)), clock=clock)
    try:
        rt = Runtime(app=load_app(write_app(root / "app", FILES)), store=store, clock=clock)
        tokens = Runs(rt).tenancy.tokens
        secret = await store.create_token(OPERATOR, Identity("bench", "acme"), expires_at=clock.now + 86_400)
        ours: list[float] = []
        plain: list[float] = []
        warmup = max(10, checks // 10)
        for n in range(warmup + checks):
            clock.now += PACE_S
            whole = await measured(lambda: tokens.identity_for(secret), index)
            lookup = await measured(lambda: store.token_owner(secret), index)
            if n >= warmup:
                ours.append(whole)
                plain.append(lookup)
        await tokens.aclose()
        return statistics.median(ours) * 1000, statistics.median(plain) * 1000
    finally:
        await store.aclose()


async def measure(checks: int, pg: str | None) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        ours, plain = await check_ms(f"sqlite:///{Path(tmp) / 'tokens.db'}", Path(tmp), checks, 0)
        rows.append(Row("token check: expiry and last use, per request, SQLite (CPU)", ours, "ms", "added", 0.1,
                        baseline=plain, note="baseline: the lookup by hash alone"))  # fmt: skip
        if pg:
            url, name = pg_database(pg)
            try:
                ours, plain = await check_ms(url, Path(tmp) / "pg", checks, 1)
                rows.append(Row("token check: expiry and last use, per request, PostgreSQL (wall)", ours, "ms",
                                "added", 0.1, baseline=plain, note="baseline: the lookup by hash alone"))  # fmt: skip
            finally:
                drop(pg, name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checks", type=int, default=5000)
    parser.add_argument("--pg", default=os.environ.get("YAO_AGENT_BENCH_PG", PG), help="'' to skip PostgreSQL")
    args = parser.parse_args()
    print_table(asyncio.run(measure(args.checks, args.pg or None)))


if __name__ == "__main__":
    main()
