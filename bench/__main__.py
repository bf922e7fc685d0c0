"""Every benchmark, one table: measure, ours, baseline, ratio, target, verdict.

    .venv/bin/python -m bench [--quick] [--only NAME ...]      (or: ./dev bench)

All model traffic goes to the loopback fake provider, in a process of its own. Each benchmark can
also run alone (`bench/<name>.py --help`) with more knobs. Exits 1 if any target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from bench import (
    cold_chat,
    context,
    engines,
    first_run,
    flush,
    guardrails,
    heavy,
    hooks,
    knowledge,
    load_app,
    logs,
    metrics,
    oidc,
    pipeline,
    proxy,
    quota,
    replay,
    serve_cpu,
    server,
    tokens,
    traces,
)
from bench.common import Row, fake_provider, print_table


def with_fake(measure: Callable[..., Awaitable[list[Row]]], **knobs: Any) -> Callable[[], list[Row]]:
    """A benchmark against its own fake provider process, fresh for it."""

    def run() -> list[Row]:
        with fake_provider() as url:
            return asyncio.run(measure(url, **knobs))

    return run


def with_fake_sync(measure: Callable[..., list[Row]], **knobs: Any) -> Callable[[], list[Row]]:
    """A benchmark of fresh processes against its own fake provider process."""

    def run() -> list[Row]:
        with fake_provider() as url:
            return measure(url, **knobs)

    return run


def jobs(quick: bool) -> dict[str, Callable[[], list[Row]]]:
    scale = 4 if quick else 1
    sizes = (10_000,) if quick else (10_000, 100_000)  # chunks searched, on both databases
    return {
        "pipeline": with_fake(pipeline.measure, runs=100 // scale),
        "engines": with_fake(engines.measure, calls=100 // scale),
        "metrics": with_fake(metrics.measure, runs=200 // scale),
        "traces": with_fake(traces.measure, runs=200 // scale),
        "logs": with_fake(logs.measure, runs=200 // scale),
        "hooks": lambda: asyncio.run(hooks.measure(5000 // scale)),
        "server": with_fake(
            server.measure, chats=1000, chunks=40 // scale, every_ms=500, ramp_s=20 / scale, idle=2000 // scale
        ),
        "serve_cpu": with_fake(serve_cpu.measure, requests=100 // scale, rounds=5 if scale == 1 else 3),
        "flush": lambda: asyncio.run(flush.measure(300 // scale, flush.PG)),
        "validate": lambda: load_app.measure(7 // scale + 1, 1000),
        "cold_chat": with_fake_sync(cold_chat.measure, runs=7 // scale + 1),
        "first_run": with_fake_sync(first_run.measure, runs=9 // scale + 1),
        "context": lambda: context.measure(200 // scale),
        "quota": lambda: asyncio.run(quota.measure(2000 // scale, quota.CALLS, flush.PG)),
        "tokens": lambda: asyncio.run(tokens.measure(5000 // scale, flush.PG)),
        "oidc": lambda: asyncio.run(oidc.measure(2000 // scale)),
        "replay": with_fake(replay.measure, runs=50 // scale),
        "guardrails": with_fake(guardrails.measure, runs=200 // scale),
        "proxy": with_fake(proxy.measure, knobs=proxy.QUICK if quick else proxy.Knobs()),
        "heavy": with_fake_sync(heavy.measure, knobs=heavy.QUICK if quick else heavy.Knobs()),
        "knowledge": lambda: asyncio.run(
            knowledge.measure(500 // scale, sizes, flush.PG, sizes, 300 // scale, 100 // scale)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples: a first look, not a verdict")
    parser.add_argument("--only", action="append", choices=list(jobs(False)), help="run just this one")
    args = parser.parse_args()
    rows: list[Row] = []
    for name, run in jobs(args.quick).items():
        if args.only and name not in args.only:
            continue
        print(f"… {name}", file=sys.stderr, flush=True)
        rows += run()
    print()
    print_table(rows)
    sys.exit(0 if all(row.met for row in rows) else 1)


if __name__ == "__main__":
    main()
