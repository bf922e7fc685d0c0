"""What JSON logs add to a plain run's CPU, as the server logs one: the run, and its request's access
line, with the log in JSON and in text, alternated.

    .venv/bin/python bench/logs.py [--runs 200]

A plain run (one model call streaming 20 chunks, stored; openai engine) through `Runs`, plus the one
`yao_agent.access` line the server writes for its request (with the same fields the access middleware
gives it), through the handler `serve --log-format json|text` installs, writing to /dev/null. A
successful run logs nothing else at INFO. Medians of this process's CPU time.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import Row, median_ms, runs_main
from bench.pipeline import plain_two_ways
from yao_agent.observe import logs

LIMIT = 1.05  # issue 19: JSON logs add at most 5 % to a plain run's CPU
access = logging.getLogger("yao_agent.access")
FIELDS = {"method": "POST", "route": "/api/assistants/{assistant_id}/runs", "status": 200, "duration_ms": 4.2,
          "bytes": 2048, "user_id": "alice", "team_id": "acme"}  # fmt: skip


def logged(fmt: logs.Format, call: Callable[[], Awaitable[None]], sink: TextIO) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        with logs.configured(fmt, sink):
            await call()
            access.info("%s %s %d %.1fms %dB", "POST", FIELDS["route"], 200, 4.2, 2048, extra=FIELDS)

    return run


async def measure(url: str, runs: int) -> list[Row]:
    with open(os.devnull, "w") as sink:  # noqa: ASYNC230
        got = await plain_two_ways(url, runs, lambda plain: {fmt: logged(fmt, plain, sink) for fmt in ("json", "text")})
    on, off = median_ms(got["json"]), median_ms(got["text"])
    note = f"JSON {on:.3f} ms vs text {off:.3f} ms, each with its request's access line"
    return [Row("plain run with JSON logs (CPU), vs text logs", on, "ms", "ratio", LIMIT, off, note=note)]


def main() -> None:
    runs_main(__doc__, measure)


if __name__ == "__main__":
    main()
