"""What Prometheus metrics add to a plain run's CPU: the same run with the metrics on and off, alternated.

    .venv/bin/python bench/metrics.py [--runs 200]

A plain run (one model call streaming 20 chunks, stored; openai engine) through `Runs`, as the server
runs it: with metrics on, each run's end is counted (`metrics.record`: its run, model call, tokens,
histograms) and its start and end set the gauges; off, the same code finds them off. The fake provider
runs in its own process; a SQLite file holds the store. Medians of this process's CPU time.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import Row, median_ms, runs_main
from bench.pipeline import plain_two_ways
from yao_agent.observe import metrics

LIMIT = 1.05  # issue 19: metrics add at most 5 % to a plain run's CPU


def without(call: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        with metrics.off():
            await call()

    return run


async def measure(url: str, runs: int) -> list[Row]:
    metrics.enable()  # as `create_app` does: this process counts from now on
    got = await plain_two_ways(url, runs, lambda plain: {"on": plain, "off": without(plain)})
    on, off = median_ms(got["on"]), median_ms(got["off"])
    wall = f"wall {median_ms(got['on'], 1):.2f} vs {median_ms(got['off'], 1):.2f} ms"
    note = f"metrics on {on:.3f} ms vs off {off:.3f} ms; {wall}"
    return [Row("plain run with Prometheus metrics on (CPU)", on, "ms", "ratio", LIMIT, off, note=note)]


def main() -> None:
    runs_main(__doc__, measure)


if __name__ == "__main__":
    main()
