"""The CPU a non-streamed OpenAI-route request costs `yao-agent serve` on PostgreSQL, and PostgreSQL's backends.

    .venv/bin/python bench/pg_request.py [--requests 200] [--rounds 5] [--baseline-tree DIR]

One server (one process; the app of bench/proxy.py: a priced connector, so the usage ledger is on) stores
in a fresh PostgreSQL database and answers batches of `--requests` non-streamed requests, `CONCURRENT` at
a time, whose reply is the fake provider's 20 chunks. Per request: the server's CPU (utime + stime from
/proc) and its database backends' CPU (the processes `pg_stat_activity` lists for that database), each
the median over `--rounds` batches. With `--baseline-tree` (a checkout of the commit before a change) a
server of that code runs beside this one, on a database of its own, the batches alternating, so a busy
machine slows both alike. How many transactions and statements each kind of request costs the store is
counted, not timed, by tests/server/test_transactions.py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.common import MODEL, PLAIN, REPO, Row, fake_provider, print_table, write_app
from bench.flush import PG, drop, pg_database
from bench.proxy import APP, backends, cpu_s, tree
from bench.server import start_server

CONCURRENT = 8  # as bench/proxy.py sends them
WARM_UP = 50  # requests before the first batch: imports, pools, caches


@dataclass
class Server:
    name: str
    pid: int
    url: str
    token: str
    database: str
    own: list[float] = field(default_factory=list[float])  # ms of server CPU per request, per batch
    db: list[float] = field(default_factory=list[float])  # ms of the backends' CPU per request, per batch


async def batch(http: aiohttp.ClientSession, server: Server, requests: int) -> None:
    """`requests` requests, `CONCURRENT` at a time; the CPU each side spent on them, per request."""
    gate = asyncio.Semaphore(CONCURRENT)
    body = {"model": "fake", "messages": PLAIN}
    headers = {"Authorization": f"Bearer {server.token}"}

    async def one() -> None:
        async with gate, http.post(server.url + "/v1/chat/completions", json=body, headers=headers) as response:
            data = await response.read()
        if response.status != 200 or data.count(b"tok ") != 20:
            raise SystemExit(f"{server.name}: HTTP {response.status}, {data[:300]!r}")

    pids, pg = tree(server.pid), backends(server.database)
    before = cpu_s(pids), cpu_s(pg)
    await asyncio.gather(*(one() for _ in range(requests)))
    await asyncio.sleep(0.05)  # what a response leaves running (its access line, the run's end) is counted
    pg = sorted(set(pg) | set(backends(server.database)))  # (a backend the pool opened meanwhile: from 0)
    server.own.append((cpu_s(pids) - before[0]) * 1000 / requests)
    server.db.append((cpu_s(pg) - before[1]) * 1000 / requests)


async def measure(requests: int, rounds: int, baseline_tree: Path | None) -> list[Row]:
    trees = {"ours": REPO, **({"baseline": baseline_tree} if baseline_tree else {})}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = stack.enter_context(fake_provider())
        app = write_app(Path(tmp) / "app", APP, url=url, model=MODEL)
        servers: list[Server] = []
        for name, checkout in trees.items():
            db, database = pg_database(PG)
            stack.callback(drop, PG, database)
            process, base, token = start_server(app, db.replace("postgresql://", "postgresql+psycopg://"),
                                                quiet=True, tree=checkout)  # fmt: skip
            stack.callback(process.wait, 20)
            stack.callback(process.terminate)
            servers.append(Server(name, process.pid, base, token, database))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            for server in servers:
                await batch(http, server, WARM_UP)
                server.own.clear(), server.db.clear()
            for _ in range(rounds):
                for server in servers:
                    await batch(http, server, requests)
    return rows(servers)


def rows(servers: list[Server]) -> list[Row]:
    ours = servers[0]
    base = servers[1] if len(servers) > 1 else None
    how = f"median of {len(ours.own)} batches" + (", beside the baseline tree's server" if base else "")
    found: list[Row] = []
    for what, figures in (("server", "own"), ("PostgreSQL backends", "db")):
        mine = statistics.median(getattr(ours, figures))
        theirs = statistics.median(getattr(base, figures)) if base else None
        found.append(Row(f"CPU per non-streamed request on PostgreSQL, {what}", mine, "ms",
                         "ratio" if base else "max", 1.0 if base else 100.0, theirs, how))  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="requests per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-tree", type=Path, help="a checkout of the commit before a change, beside ours")
    args = parser.parse_args()
    print_table(asyncio.run(measure(args.requests, args.rounds, args.baseline_tree)))


if __name__ == "__main__":
    main()
