"""Heavy load: 1,000 streaming chats opened over 10 s, 5 chunks a second each, through nginx to
`yao-agent serve --workers 2` on PostgreSQL, with the usage ledger, budgets, metrics and JSON logs on;
then twice that.

    .venv/bin/python bench/heavy.py [--quick] [--chats 1000] [--ramp-s 10] [--chunks 10] [--scale 1 --scale 2]

The fake provider (its own process) answers each chat with `--chunks` deltas, one every 200 ms (5 a
second: 10 chunks is a 2 s answer), each delta carrying the moment it was sent (`clock:N:200`). A
throw-away app on a fresh PostgreSQL database (created here, dropped at the end) prices its connector
(every call writes the usage ledger) and sets a team and a user budget (every model call is held
against them); `yao-agent serve --workers 2 --log-format json` serves it, and nginx runs in front with
docs/deploy/nginx.conf, only its `listen` and its two upstream `server` addresses changed (both at the
one port of `serve --workers 2`), inside a main configuration of this bench's own.

The load generator is a process of its own (this file with `--client`): it opens the chats at even
intervals over `--ramp-s` seconds, whether or not the earlier ones have answered, through nginx's
OpenAI-compatible route, and for every chunk notes its arrival less the provider's stamp. The same
chats are first read straight from the fake provider: what the server and nginx add is the difference
of the two p99s, as in bench/server.py. A stream fails when it is refused, cut, or ends without all its
chunks and `[DONE]`. Meanwhile the server's CPU (its processes: the supervisor and the workers), nginx's,
PostgreSQL's backends', the provider's and the client's are read from /proc, and each server process's
apart; every half second the server's share of the cores, its busiest process's, the machine's and
the database's connections are sampled, to say what gave out first. All of them share the machine's
cores: the rows' notes say how much each used, and how much went to other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (litellm offline)

# isort: split
import aiohttp

from bench.common import REPO, Row, fake_provider, percentile, print_table, write_app
from bench.flush import PG, drop, pg_database
from bench.proxy import backends, cpu_s, machine_busy_s, tree
from bench.server import cli, free_port

EVERY_MS = 200  # 5 chunks a second
ADDED_P99_MS = 100.0
WORKERS = 2
NGINX = os.environ.get("YAO_AGENT_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
DOCUMENTED = REPO / "docs" / "deploy" / "nginx.conf"
CONNECTOR = (
    "type: openai\nmodel: {clock}\nbase_url: {url}\napi_key: x\nengine: openai\n"
    "pricing: {{input_per_mtok: 0.15, output_per_mtok: 0.60}}\n"
)
APP = {
    "app.yml": "roles:\n  default: bench.clock\n"
    "budgets:\n  team: {{per_month: 1000000}}\n  user: {{per_day: 1000000}}\n",
    "connectors/bench/clock.yml": CONNECTOR,
    "assistants/stream/assistant.yml": "name: Stream\nconnector: bench.clock\n",
}
# nginx's main configuration around the documented file. Debian's own says `worker_processes auto;` and
# `worker_connections 768;`: a stream through nginx holds two connections (the client's, the upstream's),
# so 768 would refuse the 385th concurrent stream. The bench raises it, as such a deployment must.
MAIN = """\
{user}
worker_processes auto;
worker_rlimit_nofile 16384;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/yao-agent.conf;
}}
"""
LISTEN = re.compile(r"^(\s*listen\s+)([^\s;]+)([^;]*;)", re.MULTILINE)
SERVER = re.compile(r"^(\s*server\s+)([^\s;{]+)([^;{]*;)", re.MULTILINE)


# -- the load generator (its own process) ---------------------------------------------------------------


@dataclass
class Load:
    """What the client saw of one batch of chats."""

    latencies: list[float] = field(default_factory=list[float])  # provider's stamp → client, per chunk
    first: list[float] = field(default_factory=list[float])  # chat opened → its first chunk
    lags: list[float] = field(default_factory=list[float])  # how late each chat was opened
    errors: list[str] = field(default_factory=list[str])
    cpu_s: float = 0.0
    wall_s: float = 0.0


async def one_chat(http: aiohttp.ClientSession, spec: dict[str, Any], load: Load) -> None:
    started, stamps, done = time.monotonic(), 0, False
    try:
        async with http.post(spec["url"], json=spec["body"], headers=spec["headers"]) as response:
            if response.status != 200:
                load.errors.append(f"HTTP {response.status}: {(await response.text())[:200]}")
                return
            async for raw in response.content:
                line = raw.strip()
                if line == b"data: [DONE]":
                    done = True
                    break
                if not line.startswith(b"data: "):
                    continue
                for choice in json.loads(line[6:]).get("choices") or ():
                    now = time.monotonic()
                    for stamp in ((choice.get("delta") or {}).get("content") or "").split():
                        load.latencies.append(now - float(stamp))
                        load.first += [now - started] if not stamps else []
                        stamps += 1
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        load.errors.append(f"{type(exc).__name__}: {exc}"[:200])
        return
    if not done or stamps != spec["chunks"]:
        load.errors.append(f"cut: {stamps} of {spec['chunks']} chunks, {'with' if done else 'no'} [DONE]")


async def open_chats(spec: dict[str, Any]) -> Load:
    """Chat i is opened at start + i × ramp / chats, whether or not the earlier ones have answered."""
    load, chats, ramp = Load(), int(spec["chats"]), float(spec["ramp_s"])
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=3)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
    cpu, wall = time.process_time(), time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        start, tasks = time.perf_counter() + 0.05, []
        for i in range(chats):
            due = start + i * ramp / chats
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            load.lags.append(time.perf_counter() - due)
            tasks.append(asyncio.create_task(one_chat(http, spec, load)))
        await asyncio.gather(*tasks)
    load.cpu_s, load.wall_s = time.process_time() - cpu, time.perf_counter() - wall
    return load


def client_main() -> None:
    """`--client`: the spec as JSON on stdin, what was seen as JSON on stdout."""
    import gc

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    gc.collect()
    gc.freeze()  # a collector pause over the imports would count as latency
    load = asyncio.run(open_chats(json.loads(sys.stdin.read())))
    json.dump(load.__dict__, sys.stdout)


def run_client(url: str, body: dict[str, Any], headers: dict[str, str], chats: int, ramp_s: float, chunks: int) -> Load:
    spec = {"url": url, "body": body, "headers": headers, "chats": chats, "ramp_s": ramp_s, "chunks": chunks}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, __file__, "--client"], input=json.dumps(spec), capture_output=True,
                          text=True, env=env, cwd=REPO, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the load generator failed:\n{done.stderr[-2000:]}")
    return Load(**json.loads(done.stdout))


# -- the server and nginx -------------------------------------------------------------------------------


@dataclass
class Serving:
    process: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path
    database: str

    def pids(self) -> list[int]:
        return tree(self.process.pid)


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited:\n{log.read_text(errors='replace')[-1500:]}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing answered {url} in {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-1500:]}")


@contextmanager
def stopping(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stop the process and what it started (its own session), however the bench ends."""
    try:
        yield
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        except ProcessLookupError:
            pass


@contextmanager
def serving(tmp: Path, fake_url: str, db: str, clock: str) -> Iterator[Serving]:
    app = write_app(tmp / "app", APP, url=fake_url, clock=clock)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    made = subprocess.run(cli(app, db, "tokens", "create", "--user", "bench"), capture_output=True, text=True,
                          cwd=REPO, env=env, check=False)  # fmt: skip
    token = next((word for word in made.stdout.split() if word.startswith("ya_")), None)
    if token is None:
        raise SystemExit(f"no token: {made.stdout}{made.stderr}")
    port, log = free_port(), tmp / "serve.log"
    command = cli(app, db, "serve", "--port", str(port), "--log-format", "json", "--workers", str(WORKERS))
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=out, start_new_session=True)
    with stopping(process):
        wait_http(f"http://127.0.0.1:{port}/healthz", process, log)
        yield Serving(process, port, token, log, db.rsplit("/", 1)[1])


def documented(listen: str, upstream: str) -> str:
    """docs/deploy/nginx.conf listening on `listen`, each of its upstream servers at `upstream`."""
    text = DOCUMENTED.read_text()
    if len(LISTEN.findall(text)) != 1 or not SERVER.findall(text):
        raise SystemExit(f"{DOCUMENTED}: expected one `listen` and upstream `server` lines")
    text = LISTEN.sub(lambda m: m.group(1) + listen + m.group(3), text)
    return SERVER.sub(lambda m: m.group(1) + upstream + m.group(3), text)


@contextmanager
def fronting(tmp: Path, upstream_port: int) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    where = tmp / "nginx"
    where.mkdir()
    port = free_port()
    (where / "yao-agent.conf").write_text(documented(f"127.0.0.1:{port}", f"127.0.0.1:{upstream_port}"))
    user = "user root;" if os.geteuid() == 0 else ""
    (where / "nginx.conf").write_text(MAIN.format(user=user, dir=where))
    command = [NGINX, "-p", str(where), "-e", str(where / "error.log"), "-c", str(where / "nginx.conf"),
               "-g", "daemon off;"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    with stopping(process):
        wait_http(f"http://127.0.0.1:{port}/healthz", process, where / "error.log")
        yield process, port, where / "error.log"


# -- what the machine did meanwhile ---------------------------------------------------------------------


@dataclass
class Watch:
    """Every half second during a batch: the server's share of the cores (all its processes, and its
    busiest process alone), the machine's, and the database's connections."""

    server: Serving
    server_cores: list[float] = field(default_factory=list[float])
    busiest_cores: list[float] = field(default_factory=list[float])  # one process: at most 1.0
    machine_cores: list[float] = field(default_factory=list[float])
    connections: list[int] = field(default_factory=list[int])
    stop: threading.Event = field(default_factory=threading.Event)

    def tick(self) -> tuple[dict[int, float], float, float]:
        return ({pid: cpu_s([pid]) for pid in self.server.pids()}, machine_busy_s(), time.perf_counter())

    def run(self) -> None:
        import psycopg

        sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
        with psycopg.connect(PG, autocommit=True) as conn:
            before = self.tick()
            while not self.stop.wait(0.5):
                now = self.tick()
                wall = now[2] - before[2]
                spent = [cpu - before[0].get(pid, 0.0) for pid, cpu in now[0].items()]
                self.server_cores.append(sum(spent) / wall)
                self.busiest_cores.append(max(spent, default=0.0) / wall)
                self.machine_cores.append((now[1] - before[1]) / wall)
                before = now
                row = conn.execute(sql, (self.server.database,)).fetchone()  # pyright: ignore[reportArgumentType]
                self.connections.append(int(row[0]) if row else 0)

    def peaks(self) -> str:
        def peak(values: list[float]) -> float:
            return max(values, default=0.0)

        return (f"per half second, peak: server {peak(self.server_cores):.2f} cores, its busiest process "
                f"{peak(self.busiest_cores):.2f}, the machine {peak(self.machine_cores):.2f} of 2; "
                f"database connections ≤ {max(self.connections, default=0)}")  # fmt: skip


def cpu_now(server: Serving, others: dict[str, list[int]]) -> dict[str, float]:
    got = {"server": cpu_s(server.pids()), "postgres": cpu_s(backends(server.database))}
    got |= {name: cpu_s(pids) for name, pids in others.items()}
    return got | {"machine": machine_busy_s(), "wall": time.perf_counter()}


@dataclass
class Batch:
    chats: int
    direct: Load
    ours: Load
    cpu: dict[str, float]  # CPU seconds each spent during the batch through the server (the client's its own)
    watch: Watch
    nginx_errors: str
    processes: list[float]  # CPU seconds of each of the server's processes during the batch, most first

    def cores(self) -> dict[str, float]:
        wall = self.cpu["wall"]
        used = {name: spent / wall for name, spent in self.cpu.items() if name not in ("wall", "machine")}
        used["client"] = self.ours.cpu_s / wall
        used["everything else"] = self.cpu["machine"] / wall - sum(used.values())
        return used


def through(server: Serving, others: dict[str, list[int]], url: str, chats: int, knobs: Knobs) -> Batch:
    body = {"model": "stream", "messages": [{"role": "user", "content": "stream"}], "stream": True}
    auth = {"Authorization": f"Bearer {server.token}"}
    watch = Watch(server)
    thread = threading.Thread(target=watch.run, daemon=True)
    before, each = cpu_now(server, others), watch.tick()[0]
    thread.start()
    ours = run_client(url, body, auth, chats, knobs.ramp_s, knobs.chunks)
    watch.stop.set()
    thread.join()
    after = cpu_now(server, others)
    spent = {name: after[name] - before[name] for name in before}
    processes = sorted((cpu - each.get(pid, 0.0) for pid, cpu in watch.tick()[0].items()), reverse=True)
    return Batch(chats, Load(), ours, spent, watch, "", processes)


# -- the bench ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knobs:
    chats: int = 1000  # at scale 1
    ramp_s: float = 10.0
    chunks: int = 10  # per answer, one every 200 ms
    scales: tuple[int, ...] = (1, 2)


QUICK = Knobs(chats=100)


def check(server: Serving) -> str:
    """That what the server was asked to keep on was on: the metrics scrape, the ledger, the JSON log."""
    import psycopg

    scrape = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
    runs = sum(float(n) for n in re.findall(r"^yao_runs_total\{[^}]*\} (\S+)$", scrape, re.MULTILINE))
    with psycopg.connect(PG.rsplit("/", 1)[0] + "/" + server.database, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM usage_ledger").fetchone()
    lines = server.log.read_text(errors="replace").splitlines()
    access = sum(1 for line in lines if line.startswith("{") and '"yao_agent.access"' in line)
    ledger = row[0] if row else 0
    return f"kept on: /metrics counts {runs:,.0f} runs, {ledger:,} ledger rows, {access:,} JSON access lines"


def measure(fake_url: str, knobs: Knobs = Knobs()) -> list[Row]:
    clock = f"clock:{knobs.chunks}:{EVERY_MS}"
    batches: list[Batch] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        url, name = pg_database(PG)
        stack.callback(drop, PG, name)
        db = url.replace("postgresql://", "postgresql+psycopg://", 1)
        server = stack.enter_context(serving(Path(tmp), fake_url, db, clock))
        nginx, port, errors = stack.enter_context(fronting(Path(tmp), server.port))
        front = f"http://127.0.0.1:{port}/v1/chat/completions"
        others = {"nginx": tree(nginx.pid), "fake provider": fake_pids()}
        say("warming up")
        through(server, others, front, 40, Knobs(ramp_s=2.0, chunks=knobs.chunks))
        for scale in knobs.scales:
            chats = knobs.chats * scale
            say(f"{chats:,} chats straight from the fake provider")
            body = {"model": clock, "messages": [{"role": "user", "content": "stream"}], "stream": True}
            direct = run_client(fake_url + "/chat/completions", body, {}, chats, knobs.ramp_s, knobs.chunks)
            say(f"{chats:,} chats through nginx and the server")
            batch = through(server, others, front, chats, knobs)
            batch.direct, batch.nginx_errors = direct, errors.read_text(errors="replace")
            errors.write_text("")
            batches.append(batch)
        kept = check(server)
    return [row for batch in batches for row in rows(batch, knobs, kept)]


def fake_pids() -> list[int]:
    mine = tree(os.getpid())[1:]
    return [pid for pid in mine if b"fake_provider" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def say(what: str) -> None:
    print(f"… heavy: {what}", file=sys.stderr, flush=True)


def p99_ms(values: list[float]) -> float:
    return percentile(values, 0.99) * 1000 if values else float("inf")


def rows(batch: Batch, knobs: Knobs, kept: str) -> list[Row]:
    chats, ours, direct = batch.chats, batch.ours, batch.direct
    what = f"{chats:,} chats opened in {knobs.ramp_s:g} s, {knobs.chunks} chunks at 5/s, nginx, {WORKERS} workers, PG"
    cores = ", ".join(f"{name} {share:.2f}" for name, share in batch.cores().items())
    p50 = percentile(ours.latencies, 0.5) * 1000 if ours.latencies else float("inf")
    first = f"p50 {p50:.1f} ms; first chunk p99 {p99_ms(ours.first):.0f} ms vs {p99_ms(direct.first):.0f} ms direct"
    seen = f"{len(ours.latencies):,} chunks through, {len(direct.latencies):,} direct"
    late = f"client opened chats ≤ {p99_ms(ours.lags):.0f} ms late (p99)"
    budget_ms = WORKERS * knobs.ramp_s / chats * 1000
    problems = "; ".join([*ours.errors[:2], *direct.errors[:1], *batch.nginx_errors.splitlines()[:1]])
    failed = f"{len(ours.errors)} through, {len(direct.errors)} direct" + (f": {problems}" if problems else "")
    return [
        Row(f"{what}: p99 added latency", p99_ms(ours.latencies), "ms", "added", ADDED_P99_MS, p99_ms(direct.latencies),
            note=f"{first}; {seen}; {late}; one machine's 2 cores shared by all: cores used {cores}"),
        Row(f"{what}: failed streams", len(ours.errors), "", "max", 0, note=failed),
        Row(f"{what}: server CPU per chat (target: what {WORKERS} cores allow at this rate)",
            batch.cpu["server"] / chats * 1000, "ms", "max", budget_ms,
            note=f"PostgreSQL's backends {batch.cpu['postgres'] / chats * 1000:.1f} ms a chat besides; "
            f"the server's processes, CPU s each: {' / '.join(f'{cpu:.1f}' for cpu in batch.processes)}; "
            f"{batch.watch.peaks()}; {kept}"),
    ]  # fmt: skip


def main() -> None:
    if sys.argv[1:] == ["--client"]:
        client_main()
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the load: a first look")
    parser.add_argument("--chats", type=int, help="chats at scale 1 (default 1000, --quick 100)")
    parser.add_argument("--ramp-s", type=float, default=10.0)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--scale", type=int, action="append", help="times the chats, same ramp (default: 1, then 2)")
    args = parser.parse_args()
    chats = args.chats or (QUICK.chats if args.quick else Knobs.chats)
    knobs = Knobs(chats, args.ramp_s, args.chunks, tuple(args.scale or (1, 2)))
    with fake_provider() as url:
        print_table(measure(url, knobs))


if __name__ == "__main__":
    main()
