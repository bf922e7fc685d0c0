"""The deferred flush of a run with 10 messages and 4 steps, and one step of the step journal, on SQLite
and on PostgreSQL.

    .venv/bin/python bench/flush.py [--runs 300] [--pg postgresql://postgres@127.0.0.1:5432/postgres]

Each flush sample is one `finish_run` (one transaction: messages, steps, the run's outcome, the chat) for
a run whose write-ahead was done before the clock started. Each step sample is one `commit_steps` (one
transaction: a message and its completed step, the chat's count) of a run going on, as the journal
commits a model reply or a tool result the moment it completes. Median wall time is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, print_table
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.records import RunRecord, StepRecord

WHO = Identity("bench")


def run_of(n: int) -> tuple[RunRecord, list[ChatMessage], list[StepRecord]]:
    run = RunRecord(id=f"run{n}", chat_id=f"chat{n}", user_id="bench", team_id=None, assistant_id="a",
                    trace_id="t", owner="bench", started_at=time.time())  # fmt: skip
    call = ToolCall("c1", "weather__forecast", '{"city": "Paris"}')
    produced = []
    for i in range(10):
        role = ("assistant", "tool")[i % 2]
        produced.append(ChatMessage(f"m{n}-{i}", role, f"message {i} " * 20, run_id=run.id,
                                    tool_calls=(call,) if role == "assistant" else (),
                                    tool_call_id="c1" if role == "tool" else None, created_at=time.time()))  # fmt: skip
    steps = [StepRecord(f"s{n}-{i}", run.id, i + 1, kind, "completed", time.time(), ended_at=time.time())
             for i, kind in enumerate(("hook_create", "llm", "tool", "llm"))]  # fmt: skip
    run.status, run.reason, run.ended_at, run.duration_ms = "completed", "completed", time.time(), 10
    return run, produced, steps


async def flush_ms(url: str, runs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore(await open_engine(store_url(url, Path(tmp))))
        samples: list[float] = []
        try:
            for n in range(runs):
                run, produced, steps = run_of(n)
                await store.start_run(WHO, run, [ChatMessage(f"u{n}", "user", "hello", run_id=run.id)])
                start = time.perf_counter()
                await store.finish_run(WHO, run, produced, steps)
                samples.append(time.perf_counter() - start)
        finally:
            await store.aclose()
    return statistics.median(samples[runs // 10 :]) * 1000


async def step_ms(url: str, runs: int, per_run: int = 5) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore(await open_engine(store_url(url, Path(tmp))))
        samples: list[float] = []
        try:
            for n in range(10**6, 10**6 + runs // per_run):  # ids of their own: the flush's may share the database
                run, produced, steps = run_of(n)
                await store.start_run(WHO, run, [ChatMessage(f"u{n}", "user", "hello", run_id=run.id)])
                for message, step in zip(produced[:per_run], steps * 2, strict=False):
                    step.id, step.seq = f"{message.id}-step", len(samples) + 1
                    start = time.perf_counter()
                    await store.commit_steps(WHO, run, [message], [step])
                    samples.append(time.perf_counter() - start)
        finally:
            await store.aclose()
    return statistics.median(samples[len(samples) // 10 :]) * 1000


def pg_database(base: str) -> tuple[str, str]:
    import psycopg

    name = f"yao_bench_{secrets.token_hex(3)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # pyright: ignore[reportArgumentType]
    return base.rsplit("/", 1)[0] + "/" + name, name


def drop(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # pyright: ignore[reportArgumentType]


PG = "postgresql://postgres@127.0.0.1:5432/postgres"


async def measure(runs: int, pg: str | None) -> list[Row]:
    what = "flush of a run with 10 messages and 4 steps"
    step = "a step committed by the journal (message + step)"
    rows = [Row(f"{what}, SQLite", await flush_ms("sqlite:///flush.db", runs), "ms", "max", 2.0),
            Row(f"{step}, SQLite", await step_ms("sqlite:///steps.db", runs), "ms", "max", 0.5)]  # fmt: skip
    if pg:
        url, name = pg_database(pg)
        try:
            rows.append(Row(f"{what}, PostgreSQL", await flush_ms(url, runs), "ms", "max", 5.0))
            rows.append(Row(f"{step}, PostgreSQL", await step_ms(url, runs), "ms", "max", 2.0))
        finally:
            drop(pg, name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--pg", default=os.environ.get("YAO_AGENT_BENCH_PG", PG), help="'' to skip PostgreSQL")
    args = parser.parse_args()
    print_table(asyncio.run(measure(args.runs, args.pg or None)))


if __name__ == "__main__":
    main()
