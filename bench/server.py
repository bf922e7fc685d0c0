"""1,000 concurrent streaming chats through one `yao-agent serve`, beside the same streams straight
from the fake provider; and the memory the server keeps per idle chat.

    .venv/bin/python bench/server.py [--chats 1000] [--chunks 40] [--every-ms 500] [--ramp-s 20]

The fake provider (its own process) streams `--chunks` deltas per reply, one every `--every-ms` (by
default a 20 s answer whose tokens arrive in groups, as a model's do), each delta carrying the
moment it was sent (`clock:N:MS`). A client process (this one) opens the chats over `--ramp-s`
seconds, so that at the peak all of them stream at once: first straight from the fake provider,
then through the server's OpenAI-compatible route (the stored, full pipeline). For every chunk the client notes
how long it took from the provider to the client: what the server adds is the difference between
the two runs' 99th percentiles. Before that, the server's resident memory is read before and after
a few thousand short chats: its growth per chat is what an idle chat costs it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.common import REPO, Row, fake_provider, percentile, print_table, write_app

CONNECTOR = "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\nengine: openai\n"
APP = {
    "app.yml": "roles:\n  default: bench.clock\n",
    "connectors/bench/clock.yml": CONNECTOR.replace("{model}", "{clock}"),
    "connectors/bench/short.yml": CONNECTOR.replace("{model}", "chunks:3"),
    "assistants/stream/assistant.yml": "name: Stream\nconnector: bench.clock\n",
    "assistants/short/assistant.yml": "name: Short\nconnector: bench.short\n",
}


@dataclass
class Load:
    """What the client saw of one batch of concurrent streams."""

    latencies: list[float] = field(default_factory=list[float])  # provider → client, per chunk
    first: list[float] = field(default_factory=list[float])  # request → first content chunk
    errors: list[str] = field(default_factory=list[str])


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict[str, object], load: Load) -> None:
    started, seen_first, done = time.monotonic(), False, False
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                load.errors.append(f"HTTP {response.status}: {(await response.text())[:200]}")
                return
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content") or ""
                    now = time.monotonic()
                    for stamp in text.split():
                        load.latencies.append(now - float(stamp))
                        if not seen_first:
                            load.first.append(now - started)
                            seen_first = True
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        load.errors.append(f"{type(exc).__name__}: {exc}")
        return
    if not done:
        load.errors.append("the stream ended without [DONE]")


async def batch(url: str, body: dict[str, object], chats: int, ramp_s: float, headers: dict[str, str]) -> Load:
    load = Load()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        tasks: list[asyncio.Task[None]] = []
        for _ in range(chats):
            tasks.append(asyncio.create_task(one_stream(session, url, body, load)))
            await asyncio.sleep(ramp_s / chats)
        await asyncio.gather(*tasks)
    return load


async def short_chats(url: str, headers: dict[str, str], count: int, concurrency: int = 20) -> list[str]:
    errors: list[str] = []
    gate = asyncio.Semaphore(concurrency)
    body = {"model": "short", "messages": [{"role": "user", "content": "hello"}]}
    async with aiohttp.ClientSession(headers=headers) as session:

        async def one() -> None:
            async with gate, session.post(url, json=body) as response:
                if response.status != 200:
                    errors.append(f"HTTP {response.status}")
                await response.read()

        await asyncio.gather(*(one() for _ in range(count)))
    return errors


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("cannot read the server's memory")


def cli(app: Path, db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "yao_agent.cli", *args, "--app", str(app), "--db", db]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(
    app: Path, db: str, *, quiet: bool = False, tree: Path = REPO
) -> tuple[subprocess.Popen[bytes], str, str]:
    """A `yao-agent serve` of the app, its URL and a token; `quiet`: its log (an access line per
    request) goes nowhere, as it would go to a file rather than to this terminal; `tree`: the checkout
    whose code it runs."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    made = subprocess.run(cli(app, db, "tokens", "create", "--user", "bench"), capture_output=True, text=True,
                          cwd=tree, env=env)  # fmt: skip
    token = next((word for word in made.stdout.split() if word.startswith("ya_")), None)
    if token is None:
        raise SystemExit(f"no token: {made.stdout}{made.stderr}")
    port = free_port()
    log = subprocess.DEVNULL if quiet else None
    process = subprocess.Popen(cli(app, db, "serve", "--port", str(port)), cwd=tree, env=env,
                               stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            return process, base, token
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the server did not start")


async def measure(fake_url: str, chats: int, chunks: int, every_ms: int, ramp_s: float, idle: int) -> list[Row]:
    clock = f"clock:{chunks}:{every_ms}"
    gc.collect()
    gc.freeze()  # the client's own collector pausing over what this process imported would count as latency
    with tempfile.TemporaryDirectory() as tmp:
        app = write_app(Path(tmp), APP, url=fake_url, clock=clock)
        db = f"sqlite:///{tmp}/agent.db"
        server, base, token = start_server(app, db)
        try:
            auth = {"Authorization": f"Bearer {token}"}
            completions = base + "/v1/chat/completions"
            errors = await short_chats(completions, auth, 200)  # warm up: imports, pools, caches
            before = rss_kb(server.pid)
            errors += await short_chats(completions, auth, idle)
            await asyncio.sleep(1)
            per_chat_kb = (rss_kb(server.pid) - before) / idle
            ask = {"messages": [{"role": "user", "content": "stream"}], "stream": True}
            direct = await batch(fake_url + "/chat/completions", {"model": clock, **ask}, chats, ramp_s, {})
            ours = await batch(completions, {"model": "stream", **ask}, chats, ramp_s, auth)
        finally:
            server.terminate()
            server.wait(30)
    return rows(chats, direct, ours, per_chat_kb, idle, errors)


def rows(chats: int, direct: Load, ours: Load, per_chat_kb: float, idle: int, idle_errors: list[str]) -> list[Row]:
    def p99(values: list[float]) -> float:
        return percentile(values, 0.99) * 1000 if values else float("inf")

    failed = len(direct.errors) + len(ours.errors) + len(idle_errors)
    first = f"first chunk p99 {p99(ours.first):.0f} ms vs {p99(direct.first):.0f} ms direct"
    seen = f"{len(ours.latencies)} chunks through the server, {len(direct.latencies)} direct"
    problems = "; ".join([*ours.errors[:2], *direct.errors[:2], *idle_errors[:2]])
    return [
        Row(f"{chats:,} concurrent streaming chats, p99 chunk latency", p99(ours.latencies), "ms", "added", 50,
            p99(direct.latencies), note=f"{first}; {seen}"),
        Row(f"{chats:,} concurrent streaming chats, failed streams", failed, "", "max", 0,
            note=problems or "every stream ended with [DONE]"),
        Row("memory per idle chat held by the server", per_chat_kb, "KB", "max", 50,
            note=f"resident memory growth over {idle:,} chats, each run to its end"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--every-ms", type=int, default=500)
    parser.add_argument("--ramp-s", type=float, default=20.0)
    parser.add_argument("--idle", type=int, default=2000, help="chats for the memory figure")
    args = parser.parse_args()
    with fake_provider() as url:
        print_table(asyncio.run(measure(url, args.chats, args.chunks, args.every_ms, args.ramp_s, args.idle)))


if __name__ == "__main__":
    main()
