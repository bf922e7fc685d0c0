"""The CPU one `yao-agent serve` process spends per run it starts and per chunk it streams, per route.

    .venv/bin/python bench/serve_cpu.py [--requests 100] [--rounds 5] [--every-ms 10] [--baseline-tree DIR]

A real server (a subprocess, a SQLite file store, an `openai` connector to the loopback fake
provider in a process of its own) answers streamed requests, `CONCURRENT` at a time, from this
process, on the OpenAI-compatible route (`POST /v1/chat/completions`), on the native one (`POST
/api/assistants/{id}/runs`), on Anthropic's (`POST /v1/messages`) and on the Responses API's (`POST
/v1/responses`), those two doors held to 1.2× the OpenAI route's figures: batches of replies of 1
chunk and of `LONG` chunks, alternating. The provider sends a chunk every `--every-ms`, as a model
does, so each one comes to the server on its own (a reply sent whole would be read, run and written in
a few large pieces). The server's CPU
(user + system, from /proc/<pid>/stat) over each batch of N requests gives

    per run start = CPU(1-chunk batch) / N
    per chunk     = (CPU(LONG-chunk batch) − CPU(1-chunk batch)) / (N · (LONG − 1))

— each the median over `--rounds` rounds. The baseline is `BASELINE`, or, with `--baseline-tree` (say a
git worktree of the commit before a change), a server of that checkout's code measured round by round
beside this one's, so that a busy machine slows both alike. A run start is all a request costs the server besides its
chunks: HTTP in and out, the token check, the run's stages and its stored records, the model call
with its one chunk. A chunk is what one more delta costs end to end: the provider's event read and
decoded, the pipeline's event, the HTTP frame written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.common import REPO, Row, fake_provider, print_table, write_app
from bench.server import start_server

LONG = 200  # chunks of the long reply
CONCURRENT = 20  # requests in flight at once
CONNECTOR = "type: openai\nmodel: clock:{n}:{{every_ms}}\nbase_url: {{url}}\napi_key: x\nengine: openai\n"
APP = {
    "app.yml": "roles:\n  default: bench.one\n",
    "connectors/bench/one.yml": CONNECTOR.format(n=1),
    "connectors/bench/long.yml": CONNECTOR.format(n=LONG),
    "assistants/one/assistant.yml": "name: One\nconnector: bench.one\n",
    "assistants/long/assistant.yml": "name: Long\nconnector: bench.long\n",
}
ASK = [{"role": "user", "content": "Say something."}]
# Measured at the commit before the first cut (bb978ff), on this 2-core machine with the defaults, the
# mean of three runs (two alone, one beside the cuts' tree): ms of server CPU per run start, µs per chunk.
BASELINE = {"openai": (5.6, 190.0), "native": (5.4, 178.0)}
RUN_START_MS = 2.0  # the target for a run start; a chunk's is half its baseline
SETTLE_S = 0.05  # what a response leaves running (its access line, the task's end) is counted in its batch
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
Call = Callable[[str], Awaitable[None]]


def cpu_s(pid: int) -> float:
    """User + system CPU of the process so far (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) * TICK_S


class Client:
    """Streamed requests to one server, each read to its end and checked."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.base = session, base

    async def openai(self, assistant: str) -> None:
        body: dict[str, object] = {"model": assistant, "messages": ASK, "stream": True}
        await self._post("/v1/chat/completions", body, b"data: [DONE]")

    async def anthropic(self, assistant: str) -> None:
        body: dict[str, object] = {"model": assistant, "messages": ASK, "max_tokens": 1000, "stream": True}
        await self._post("/v1/messages", body, b"event: message_stop")

    async def responses(self, assistant: str) -> None:
        body: dict[str, object] = {"model": assistant, "input": "Say something.", "stream": True}
        # (its last event holds the whole response, the long reply's text too: looked for anywhere)
        await self._post("/v1/responses", body, b'"type": "response.completed"', window=None)

    async def native(self, assistant: str) -> None:
        await self._post(f"/api/assistants/{assistant}/runs", {"messages": ASK}, b'"status":"completed"')

    async def _post(self, path: str, body: dict[str, object], ending: bytes, window: int | None = 400) -> None:
        async with self.session.post(self.base + path, json=body) as response:
            data = await response.read()
        if response.status != 200 or ending not in data[-window if window else 0 :]:
            raise SystemExit(f"{path}: HTTP {response.status}, {data[-400:]!r}")


async def batch(pid: int, call: Call, assistant: str, requests: int) -> float:
    """Server CPU seconds over `requests` requests, `CONCURRENT` at a time."""
    gate = asyncio.Semaphore(CONCURRENT)

    async def one() -> None:
        async with gate:
            await call(assistant)

    before = cpu_s(pid)
    await asyncio.gather(*(one() for _ in range(requests)))
    await asyncio.sleep(SETTLE_S)
    return cpu_s(pid) - before


Figures = dict[str, tuple[float, float]]  # per route: (ms per run start, µs per chunk)


@dataclass
class Server:
    """One server under measure: its process and, per route, each round's figures."""

    process: subprocess.Popen[bytes]
    ways: dict[str, Call]
    starts: dict[str, list[float]] = field(default_factory=dict[str, list[float]])
    chunks: dict[str, list[float]] = field(default_factory=dict[str, list[float]])

    async def round(self, way: str, requests: int) -> None:
        """A 1-chunk batch and a long batch: this round's ms per run start and µs per chunk."""
        one = await batch(self.process.pid, self.ways[way], "one", requests)
        long = await batch(self.process.pid, self.ways[way], "long", requests)
        self.starts.setdefault(way, []).append(one / requests * 1e3)
        self.chunks.setdefault(way, []).append((long - one) / (requests * (LONG - 1)) * 1e6)

    def figures(self) -> Figures:
        return {way: (statistics.median(self.starts[way]), statistics.median(self.chunks[way])) for way in self.starts}


async def measure(fake_url: str, requests: int = 100, rounds: int = 5, every_ms: int = 10,
                  baseline_tree: Path | None = None) -> list[Row]:  # fmt: skip
    """The figures of a server of this checkout; with `baseline_tree`, of one of that checkout too, each
    round of each route alternating the two (so the machine's noise falls on both alike)."""
    trees = {"ours": REPO, **({"baseline": baseline_tree} if baseline_tree else {})}
    with tempfile.TemporaryDirectory() as tmp:
        app = write_app(Path(tmp), APP, url=fake_url, every_ms=str(every_ms))
        async with contextlib.AsyncExitStack() as stack:
            servers = {
                name: await serving(stack, app, f"sqlite:///{tmp}/{name}.db", tree) for name, tree in trees.items()
            }
            started = time.perf_counter()
            for way in ("openai", "native"):
                await alternate(list(servers.values()), way, requests, rounds)
            for door in ("anthropic", "responses"):  # (doors the baseline may lack)
                await alternate([servers["ours"]], door, requests, rounds)
            took = time.perf_counter() - started
    how = f"{rounds} rounds of {requests} requests, {CONCURRENT} at a time ({took:.0f} s)"
    if baseline_tree:
        return rows(servers["ours"].figures(), servers["baseline"].figures(), how + ", beside the baseline tree's")
    return rows(servers["ours"].figures(), BASELINE, how)


async def serving(stack: contextlib.AsyncExitStack, app: Path, db: str, tree: Path) -> Server:
    """A server of `tree`'s code, stopped with the stack, and a client of it."""
    process, base, token = start_server(app, db, quiet=True, tree=tree)
    stack.callback(stop, process)
    session = await stack.enter_async_context(aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}))
    client = Client(session, base)
    ways = {"openai": client.openai, "native": client.native, "anthropic": client.anthropic,
            "responses": client.responses}  # fmt: skip
    return Server(process, ways)


async def alternate(servers: list[Server], way: str, requests: int, rounds: int) -> None:
    for server in servers:  # warm up: imports, pools, caches, the first chats
        await batch(server.process.pid, server.ways[way], "one", 2 * CONCURRENT)
        await batch(server.process.pid, server.ways[way], "long", CONCURRENT)
    for _ in range(rounds):
        for server in servers:
            await server.round(way, requests)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def rows(figures: Figures, baseline: Figures, how: str) -> list[Row]:
    names = {"openai": "OpenAI route", "native": "native SSE route", "anthropic": "Anthropic route",
             "responses": "Responses route"}  # fmt: skip
    out: list[Row] = []
    for way, (start_ms, chunk_us) in figures.items():
        if way not in BASELINE:  # another door: held to the OpenAI route's figures, measured beside it
            out += door_rows(names[way], (start_ms, chunk_us), figures["openai"], how)
            continue
        base_start, base_chunk = baseline[way]
        target_chunk = round(base_chunk / 2, 1)  # half the old path's chunk: BASELINE's, or the tree's measured beside
        out.append(Row(f"serve: a run start, {names[way]} (server CPU)", start_ms, "ms", "max", RUN_START_MS,
                       base_start, note=f"median of {how}"))  # fmt: skip
        out.append(Row(f"serve: a streamed chunk, {names[way]} (server CPU)", chunk_us, "µs", "max",
                       target_chunk, base_chunk, note=f"{LONG}-chunk replies vs 1-chunk ones"))  # fmt: skip
    return out


DOOR_FACTOR = 1.2  # a front door may cost at most this much more than the OpenAI route (issue 29)


def door_rows(name: str, door: tuple[float, float], openai: tuple[float, float], how: str) -> list[Row]:
    (start_ms, chunk_us), (openai_start, openai_chunk) = door, openai
    most_start, most_chunk = round(openai_start * DOOR_FACTOR, 2), round(openai_chunk * DOOR_FACTOR, 1)
    return [
        Row(f"serve: a run start, {name} (server CPU)", start_ms, "ms", "max", most_start,
            openai_start, note=f"median of {how}; baseline: the OpenAI route's"),
        Row(f"serve: a streamed chunk, {name} (server CPU)", chunk_us, "µs", "max", most_chunk,
            openai_chunk, note="baseline: the OpenAI route's"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="requests per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--every-ms", type=int, default=10, help="the provider's pace: a chunk every so many ms")
    parser.add_argument("--baseline-tree", type=Path, help="a checkout (e.g. a git worktree of an older commit) "
                        "whose server is measured beside this one's, round by round, as the baseline")  # fmt: skip
    args = parser.parse_args()
    with fake_provider() as url:
        print_table(asyncio.run(measure(url, args.requests, args.rounds, args.every_ms, args.baseline_tree)))


if __name__ == "__main__":
    main()
