"""The same OpenAI-compatible load through the LiteLLM proxy and through `yao-agent serve`, side by side.

    .venv/bin/python bench/proxy.py [--quick] [--workers N ...]

Both servers forward to one fake provider (its own process), whose model `chunks:20` answers 20
deltas of "tok ", streamed or not; this process sends both the same body with aiohttp. The proxy is
LiteLLM's (`litellm --config`, pinned in bench/proxy-requirements.txt and installed into .venv-proxy
on first use: never a dependency of the project), run as its quick start runs it, without a database.
Ours stores every request as a chat and a run in PostgreSQL (a fresh database for each server), with
the usage ledger, JSON logs and Prometheus metrics on, as a deployment runs it. With 1 and 2 worker
processes each (`litellm --num_workers`, `yao-agent serve --workers`):

- CPU per request: utime + stime of the server's processes and their children, read from /proc
  before and after batches of requests sent 8 at a time, the two servers' batches alternating;
  medians. What PostgreSQL's backends spend for ours is said beside it, not counted in it.
- Added latency: the time to the last byte through a server less the same request's straight to the
  fake provider, one request at a time, the three alternating (p50, p99); streamed, also the time to
  the first content chunk.
- The highest rate each sustains: streamed requests sent open-loop at a fixed rate for a few seconds,
  each timed from when it was due; a rate is sustained when none fails and the p99 added latency is
  at most 100 ms (a rate that fails is tried once more). From half the rate its CPU per request
  allows, the rate doubles (or halves) until that changes, then the gap is bisected.

Every answer outside the rate search must be whole (20 deltas; `[DONE]` when streamed): a row counts
those that were not. The client, both servers, the fake provider and PostgreSQL share the machine's
cores: the rate row's note says how much of them each used, and how much went to other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
import aiohttp

from bench.common import MODEL, PLAIN, REPO, Row, fake_provider, percentile, print_table, write_app
from bench.flush import PG, drop, pg_database
from bench.server import cli, free_port

CPU_LIMIT = 0.25  # our CPU per request at most a quarter of the proxy's
RATE_LIMIT = 0.25  # the proxy's sustained rate at most a quarter of ours: 1/ours ≤ 0.25 × 1/proxy's
ADDED_P99_S = 0.100  # what "sustains a rate" allows a server to add at p99
CONCURRENCY = 8  # requests in flight during a CPU batch
SETTLE_S = 0.3  # litellm logs each call after its response, on the loop and on threads: count that too
MAX_RATE = 4096.0  # requests a second: where the doubling stops
TICK_S = 1 / os.sysconf("SC_CLK_TCK")

PROXY_VENV = REPO / ".venv-proxy"
PROXY_REQUIREMENTS = REPO / "bench" / "proxy-requirements.txt"
PROXY_CONFIG = """model_list:
  - model_name: fake
    litellm_params:
      model: openai/{model}
      api_base: {url}
      api_key: x
      input_cost_per_token: 1.5e-07
      output_cost_per_token: 6.0e-07
"""
# The proxy's model and our assistant are both `fake`, so that the two get the very same body; both
# price the model alike, so both work out each call's cost.
APP = {
    "app.yml": "roles:\n  default: bench.fake\n",
    "connectors/bench/fake.yml": "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\n"
    "pricing: {{input_per_mtok: 0.15, output_per_mtok: 0.60}}\n",
    "assistants/fake/assistant.yml": "name: Fake\nconnector: bench.fake\n",
}


@dataclass(frozen=True)
class Knobs:
    rounds: int = 100  # one-at-a-time requests per server and mode, for the latency figures
    batches: int = 3  # CPU batches per server and mode
    batch: int = 96  # requests per CPU batch
    step_s: float = 1.5  # how long each rate is held
    bisections: int = 3  # after the doubling: the gap to within 1/8 of the last sustained rate
    workers: tuple[int, ...] = (1, 2)


QUICK = Knobs(rounds=40, batches=2, batch=64, step_s=1.0, bisections=1)
CLOCK = {"start": time.monotonic()}  # reset when the measure starts: progress lines say the time since


def say(what: str) -> None:
    print(f"… proxy: {what} ({time.monotonic() - CLOCK['start']:.0f} s)", file=sys.stderr, flush=True)


# -- the proxy's own virtualenv -------------------------------------------------------------------------


def proxy_litellm() -> Path:
    """The proxy's `litellm` command, installing .venv-proxy first if it is missing or its pins changed."""
    stamp = PROXY_VENV / f".installed-{hashlib.sha256(PROXY_REQUIREMENTS.read_bytes()).hexdigest()[:16]}"
    if not stamp.exists():
        print(f"… installing the LiteLLM proxy into {PROXY_VENV.name} (one time)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(PROXY_VENV)], check=True)
        python = str(PROXY_VENV / "bin" / "python")
        uv = Path(sys.executable).with_name("uv")  # `./dev setup` puts uv in .venv: seconds instead of minutes
        if uv.exists():
            install = [str(uv), "pip", "install", "-q", "--python", python, "--compile-bytecode"]
        else:
            install = [python, "-m", "pip", "install", "-q"]
        subprocess.run([*install, "-r", str(PROXY_REQUIREMENTS)], check=True)
        stamp.touch()
    return PROXY_VENV / "bin" / "litellm"


# -- processes and their CPU ----------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    # The command name (field 2) may hold spaces and parentheses: the fields after it start past the last ')'.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (workers, their helpers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                continue  # gone meanwhile
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def cpu_s(pids: list[int]) -> float:
    """utime + stime of these processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = _stat(pid)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of the whole line
    return total * TICK_S


def machine_busy_s() -> float:
    """CPU seconds all the machine's cores have worked since it booted."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) * TICK_S


def fake_pids() -> list[int]:
    """The fake provider: the child of this process that runs it."""
    mine = tree(os.getpid())[1:]
    return [pid for pid in mine if b"fake_provider" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def backends(database: str) -> list[int]:
    """PostgreSQL's processes serving `database` (its server's connection pool)."""
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    return [row[0] for row in rows]


# -- the servers ----------------------------------------------------------------------------------------


@dataclass
class Target:
    """Where requests go: a server (its processes are measured), or the fake provider itself."""

    name: str
    url: str
    headers: dict[str, str]
    model: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    database: str = ""  # ours: the PostgreSQL database it stores in
    pids: list[int] = field(default_factory=list[int])
    failures: list[str] = field(default_factory=list[str])  # outside the rate search, where overload may fail

    def body(self, stream: bool) -> bytes:
        return json.dumps({"model": self.model, "messages": PLAIN, "stream": stream}).encode()

    def cpu(self) -> float:
        return cpu_s(self.pids)

    def db_cpu(self) -> float:
        return cpu_s(backends(self.database)) if self.database else 0.0

    def route(self, path: str) -> str:
        return self.url.replace("/v1/chat/completions", path)


def wait_ready(target: Target, path: str, timeout_s: float) -> None:
    assert target.process is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if target.process.poll() is not None:
            raise SystemExit(f"{target.name} exited while starting:\n{tail(target.log)}")
        try:
            urllib.request.urlopen(target.route(path), timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{target.name} did not start in {timeout_s:.0f} s:\n{tail(target.log)}")


def tail(log: Path | None) -> str:
    return log.read_text(errors="replace")[-1500:] if log and log.exists() else ""


@contextmanager
def running(target: Target) -> Iterator[Target]:
    """Stop the server and every process it started (its session), however the measure ends."""
    assert target.process is not None
    try:
        yield target
    finally:
        try:
            os.killpg(target.process.pid, signal.SIGTERM)
            target.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(target.process.pid, signal.SIGKILL)
            target.process.wait(5)
        except ProcessLookupError:
            pass


def spawn(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=out, start_new_session=True)


def start_proxy(tmp: Path, fake_url: str, workers: int) -> Target:
    config = tmp / "proxy.yaml"
    config.write_text(PROXY_CONFIG.format(model=MODEL, url=fake_url))
    key = "sk-" + secrets.token_hex(24)
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    port, log = free_port(), tmp / "proxy.log"
    command = [str(proxy_litellm()), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    if workers > 1:
        command += ["--num_workers", str(workers)]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    return Target("proxy", url, {"Authorization": f"Bearer {key}"}, "fake", spawn(command, env, tmp, log), log)


def serve_has_workers() -> bool:
    """`serve --workers` is new: until it is there, ours is measured with one process only."""
    shown = subprocess.run([sys.executable, "-m", "yao_agent.cli", "serve", "--help"], capture_output=True, text=True)
    return "--workers" in shown.stdout


def start_ours(tmp: Path, fake_url: str, workers: int, db: str) -> Target:
    app = write_app(tmp / "app", APP, url=fake_url, model=MODEL)
    made = subprocess.run(cli(app, db, "tokens", "create", "--user", "bench"), capture_output=True, text=True, cwd=REPO)
    token = next((word for word in made.stdout.split() if word.startswith("ya_")), None)
    if token is None:
        raise SystemExit(f"no token: {made.stdout}{made.stderr}")
    (tmp / "metrics").mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics")}
    port, log = free_port(), tmp / "ours.log"
    command = cli(app, db, "serve", "--port", str(port), "--log-format", "json")
    if workers > 1:
        command += ["--workers", str(workers)]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    ours = Target("ours", url, {"Authorization": f"Bearer {token}"}, "fake", spawn(command, env, REPO, log), log)
    ours.database = db.rsplit("/", 1)[1]
    return ours


# -- the client -----------------------------------------------------------------------------------------

Timing = tuple[float, float]  # seconds to the last byte, to the first content chunk
Timings = dict[str, list[Timing]]  # by target


async def send(session: aiohttp.ClientSession, target: Target, body: bytes, stream: bool, due: float) -> Timing | str:
    """One request, timed from `due`; what went wrong instead, if anything did."""
    first, parts = 0.0, []
    try:
        async with session.post(target.url, data=body, headers=target.headers) as response:
            async for part in response.content.iter_any():
                if not first and b"tok " in part:
                    first = time.perf_counter()
                parts.append(part)
            end = time.perf_counter()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    got = b"".join(parts)
    complete = got.count(b"tok ") == 20 and (not stream or got.rstrip().endswith(b"data: [DONE]"))
    if response.status != 200 or not complete:
        return f"HTTP {response.status}: {got[:300]!r}"
    return end - due, (first or end) - due


def session() -> aiohttp.ClientSession:
    # Idle connections are closed before the servers' own keep-alive timeout (uvicorn's: 5 s) would close
    # them: otherwise a request may go out on a connection the server is closing that very moment.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=3)
    timeout = aiohttp.ClientTimeout(total=30)
    return aiohttp.ClientSession(connector=connector, headers={"Content-Type": "application/json"}, timeout=timeout)


async def one_by_one(http: aiohttp.ClientSession, targets: list[Target], stream: bool, rounds: int) -> Timings:
    """Each target in turn, one request at a time: the latency of an unloaded server."""
    out: Timings = {t.name: [] for t in targets}
    bodies = {t.name: t.body(stream) for t in targets}
    for _ in range(rounds):
        for target in targets:
            got = await send(http, target, bodies[target.name], stream, time.perf_counter())
            if isinstance(got, str):
                target.failures.append(got)
            else:
                out[target.name].append(got)
    return out


async def cpu_batch(http: aiohttp.ClientSession, target: Target, stream: bool, count: int) -> tuple[float, float]:
    """CPU seconds per request of the target's processes, and of its database's, over `count` requests."""
    body, share = target.body(stream), count // CONCURRENCY

    async def worker() -> None:
        for _ in range(share):
            got = await send(http, target, body, stream, time.perf_counter())
            if isinstance(got, str):
                target.failures.append(got)

    before, db_before = target.cpu(), target.db_cpu()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    await asyncio.sleep(SETTLE_S)
    done = share * CONCURRENCY
    return (target.cpu() - before) / done, (target.db_cpu() - db_before) / done


# -- the highest sustained rate -------------------------------------------------------------------------


@dataclass
class Step:
    """What one rate, held for a while, gave."""

    rate: float
    latencies: list[float]
    errors: list[str]
    lag_p99: float  # how late the client sent, at p99: were it large, the client would be the bottleneck
    client_cpu: float  # the share of one core this process used while sending

    def p99(self) -> float:
        return percentile(self.latencies, 0.99) if self.latencies else math.inf


async def at_rate(http: aiohttp.ClientSession, target: Target, rate: float, seconds: float) -> Step:
    """Open loop: request i is due at start + i/rate, whether or not the earlier ones have answered."""
    body, count = target.body(True), max(2, round(rate * seconds))
    cpu, start = time.process_time(), time.perf_counter() + 0.02
    lags, tasks = [], []
    for i in range(count):
        due = start + i / rate
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        lags.append(time.perf_counter() - due)
        tasks.append(asyncio.create_task(send(http, target, body, True, due)))
    sent_cpu, sent_wall = time.process_time() - cpu, time.perf_counter() - start
    results = await asyncio.gather(*tasks)
    errors = [r for r in results if isinstance(r, str)]
    latencies = [r[0] for r in results if not isinstance(r, str)]
    return Step(rate, latencies, errors, percentile(lags, 0.99), sent_cpu / max(sent_wall, 1e-9))


async def quiet(target: Target, limit_s: float = 15.0) -> None:
    """Wait until the server has worked off what an overload left it (under 5 % of a core for 0.3 s)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = target.cpu()
        await asyncio.sleep(0.3)
        if target.cpu() - before < 0.015:
            return


@dataclass
class Search:
    """Rates tried on one server, and the highest it sustained."""

    http: aiohttp.ClientSession
    target: Target
    direct_p99: float
    step_s: float
    sustained: float = 0.0
    steps: list[Step] = field(default_factory=list[Step])

    async def holds(self, rate: float) -> bool:
        """A rate that fails is tried once more: one hiccup of a shared machine should not end the search."""
        for _ in range(2):
            step = await at_rate(self.http, self.target, rate, self.step_s)
            self.steps.append(step)
            await quiet(self.target)
            if not step.errors and step.p99() - self.direct_p99 <= ADDED_P99_S:
                return True
        return False

    async def bracket(self, rate: float) -> float:
        """Double from `rate` while it holds, or halve while it does not; the first rate found past that."""
        if await self.holds(rate):
            self.sustained = rate
            while rate < MAX_RATE and await self.holds(rate * 2):
                self.sustained = rate = rate * 2
            return rate * 2 if rate < MAX_RATE else math.inf
        while rate > 1 and not await self.holds(rate / 2):
            rate /= 2
        self.sustained = rate / 2 if rate > 1 else 0.0
        return rate

    async def run(self, start: float, bisections: int) -> Search:
        failed = await self.bracket(start)
        for _ in range(bisections if self.sustained and failed < math.inf else 0):
            middle = (self.sustained + failed) / 2
            if await self.holds(middle):
                self.sustained = middle
            else:
                failed = middle
        return self

    def top(self) -> Step | None:
        """The step at the highest sustained rate: the client's CPU and lag there say whether it kept up."""
        return next((s for s in reversed(self.steps) if s.rate == self.sustained), None)

    def note(self) -> str:
        top, said = self.top(), f"{self.target.name} {self.sustained:.3g}/s"
        if top:
            said += f" (client {top.client_cpu:.0%} of a core, sends ≤ {top.lag_p99 * 1000:.1f} ms late)"
        failed = [s for s in self.steps if s.rate > self.sustained]
        if failed:
            low = min(failed, key=lambda s: s.rate)
            added = (low.p99() - self.direct_p99) * 1000
            said += f", not {low.rate:.3g}/s (p99 added {added:.0f} ms, {len(low.errors)} failed)"
            said += f" [{low.errors[0][:80]}]" if low.errors else ""
        if not self.sustained:
            said += f": it adds more than {ADDED_P99_S * 1000:.0f} ms at p99 even at 1 request a second"
        return said


def first_rate(cpu_per_request: float, workers: int) -> float:
    """Half the rate its CPU per request would allow the workers, as a power of two: a few steps from the answer."""
    return 2.0 ** max(0, math.floor(math.log2(workers / max(cpu_per_request, 1e-4) / 2)))


# -- one pair of servers --------------------------------------------------------------------------------


@dataclass
class Pair:
    """All measured of the two servers at one number of workers; ours left out when it cannot run."""

    workers: int
    latency: dict[bool, Timings] = field(default_factory=dict[bool, Timings])
    cpu: dict[bool, dict[str, list[float]]] = field(default_factory=dict[bool, dict[str, list[float]]])
    db_cpu: dict[bool, list[float]] = field(default_factory=dict[bool, list[float]])
    rates: dict[str, Search] = field(default_factory=dict[str, Search])
    processes: dict[str, int] = field(default_factory=dict[str, int])
    failures: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    cores: str = ""  # who used the machine's cores meanwhile
    checks: str = ""  # ours: what it was asked to keep on was on
    missing: str = ""  # why ours was not measured


def snapshot(servers: list[Target], fake: list[int]) -> dict[str, float]:
    """Each one's CPU seconds so far, the machine's, and the wall clock."""
    got = {t.name: t.cpu() for t in servers}
    got |= {"postgres": sum(t.db_cpu() for t in servers), "client": time.process_time(), "fake provider": cpu_s(fake)}
    return got | {"machine": machine_busy_s(), "wall": time.perf_counter()}


def cores_used(before: dict[str, float], after: dict[str, float]) -> str:
    wall = after["wall"] - before["wall"]
    used = {name: (after[name] - before[name]) / wall for name in before if name not in ("wall", "machine")}
    used["everything else"] = (after["machine"] - before["machine"]) / wall - sum(used.values())
    return "cores used meanwhile: " + ", ".join(f"{name} {share:.2f}" for name, share in used.items())


async def warm_up(http: aiohttp.ClientSession, direct: Target, servers: list[Target]) -> None:
    """Imports, pools, caches and first connections, before anything counts."""
    for stream in (True, False):
        await one_by_one(http, [direct, *servers], stream, 20)
        for target in servers:
            await cpu_batch(http, target, stream, 8 * CONCURRENCY)
    for target in servers:
        assert target.process is not None
        target.pids = tree(target.process.pid)


async def measure_pair(direct: Target, servers: list[Target], pair: Pair, knobs: Knobs) -> None:
    async with session() as http:
        await warm_up(http, direct, servers)
        pair.processes = {t.name: len(t.pids) for t in servers}
        fake = fake_pids()
        before = snapshot(servers, fake)
        for stream in (True, False):
            say(f"{pair.workers} worker(s), {'streamed' if stream else 'non-streamed'}: latency and CPU")
            pair.latency[stream] = await one_by_one(http, [direct, *servers], stream, knobs.rounds)
            pair.cpu[stream], pair.db_cpu[stream] = {t.name: [] for t in servers}, []
            for _ in range(knobs.batches):
                for target in servers:
                    cpu, db = await cpu_batch(http, target, stream, knobs.batch)
                    pair.cpu[stream][target.name].append(cpu)
                    pair.db_cpu[stream] += [db] if target.database else []
        direct_p99 = percentile([t[0] for t in pair.latency[True][direct.name]], 0.99)
        for target in servers:
            say(f"{pair.workers} worker(s): the highest rate {target.name} sustains")
            await quiet(target)
            search = Search(http, target, direct_p99, knobs.step_s)
            start = first_rate(statistics.median(pair.cpu[True][target.name]), pair.workers)
            pair.rates[target.name] = await search.run(start, knobs.bisections)
        pair.cores = cores_used(before, snapshot(servers, fake))
        pair.failures = {t.name: t.failures for t in servers}


def check_ours(ours: Target, db: str) -> str:
    """That what ours was asked to keep on was on: the metrics scrape, the ledger, the JSON log."""
    import psycopg

    scrape = urllib.request.urlopen(ours.route("/metrics"), timeout=10).read().decode()
    runs = sum(float(n) for n in re.findall(r"^yao_runs_total\{[^}]*\} (\S+)$", scrape, re.M))
    with psycopg.connect(db.replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM usage_ledger").fetchone()
    ledger = row[0] if row else 0
    lines = ours.log.read_text(errors="replace").splitlines() if ours.log else []
    access = sum(1 for line in lines if line.startswith("{") and '"yao_agent.access"' in line)
    return f"ours kept on: /metrics counts {runs:,.0f} runs, {ledger:,} ledger rows, {access:,} JSON access lines"


async def one_pair(fake_url: str, workers: int, knobs: Knobs, ours_workers: bool) -> Pair:
    pair = Pair(workers)
    if workers > 1 and not ours_workers:
        pair.missing = "ours unavailable: `yao-agent serve --help` lists no --workers yet"
    direct = Target("direct", fake_url + "/chat/completions", {}, MODEL)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        say(f"{workers} worker(s): starting the servers")
        servers = [stack.enter_context(running(start_proxy(Path(tmp), fake_url, workers)))]
        db = ""
        if not pair.missing:
            url, name = pg_database(PG)
            stack.callback(drop, PG, name)
            db = url.replace("postgresql://", "postgresql+psycopg://", 1)
            servers.append(stack.enter_context(running(start_ours(Path(tmp), fake_url, workers, db))))
        for target in reversed(servers):  # ours is up in a second, the proxy in tens
            wait_ready(target, "/healthz" if target.name == "ours" else "/health/liveliness", 240)
        await measure_pair(direct, servers, pair, knobs)
        if not pair.missing:
            pair.checks = check_ours(servers[1], db)
    return pair


# -- the table ------------------------------------------------------------------------------------------


def added_ms(pair: Pair, stream: bool, name: str, q: float, first: bool = False) -> float:
    """The q-quantile through `name` less the q-quantile straight to the fake provider."""
    if name not in pair.latency[stream]:
        return math.nan
    index = 1 if first else 0

    def at(who: str) -> float:
        got = [t[index] for t in pair.latency[stream][who]]
        return percentile(got, q) * 1000 if got else math.nan

    return at(name) - at("direct")


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else math.nan


def cpu_rows(pair: Pair, w: str) -> list[Row]:
    rows = []
    for stream, kind in ((True, "streamed"), (False, "non-streamed")):
        ours, proxy = median_ms(pair.cpu[stream].get("ours", [])), median_ms(pair.cpu[stream]["proxy"])
        note = pair.missing or (
            f"PostgreSQL's backends add {median_ms(pair.db_cpu[stream]):.2f} ms for ours (not counted); "
            f"processes measured: ours {pair.processes['ours']}, proxy {pair.processes['proxy']}"
        )
        rows.append(Row(f"CPU per {kind} request, {w}, vs LiteLLM proxy", ours, "ms", "ratio", CPU_LIMIT, proxy, note))
    return rows


def latency_rows(pair: Pair, w: str) -> list[Row]:
    rows = []
    for stream, kind in ((True, "streamed"), (False, "non-streamed")):
        p50 = [added_ms(pair, stream, who, 0.5) for who in ("ours", "proxy")]
        note = "p50 ours {:.2f} ms, proxy {:.2f} ms".format(*p50)
        if stream:
            first = [added_ms(pair, True, who, q, first=True) for who in ("ours", "proxy") for q in (0.5, 0.99)]
            note += "; first chunk p50/p99 ours {:.2f}/{:.2f} ms, proxy {:.2f}/{:.2f} ms".format(*first)
        note = f"{pair.missing}; {note}" if pair.missing else note
        ours, proxy = added_ms(pair, stream, "ours", 0.99), added_ms(pair, stream, "proxy", 0.99)
        rows.append(Row(f"p99 added latency, {kind}, {w}, vs LiteLLM proxy", ours, "ms", "max", 100, proxy, note))
    return rows


def rate_row(pair: Pair, w: str) -> Row:
    """A rate as the time it gives each request (1 / rate), so that ours ≤ 0.25 × the proxy's reads as a ratio."""
    ours, proxy = pair.rates.get("ours"), pair.rates["proxy"]
    held = f"sustained: {proxy.step_s:g} s of open-loop requests at the rate, none failed, p99 added ≤ 100 ms"
    said = [pair.missing, held, *(search.note() for search in (ours, proxy) if search), pair.cores]
    note = "; ".join(part for part in said if part)
    ours_ms = math.nan if ours is None else 1000 / ours.sustained if ours.sustained else math.inf
    proxy_ms = 1000 / proxy.sustained if proxy.sustained else math.inf
    measure = f"1 / sustained rate, streamed, {w}, vs LiteLLM proxy"
    return Row(measure, ours_ms, "ms", "ratio", RATE_LIMIT, proxy_ms, note)


def failure_row(pair: Pair, w: str) -> Row:
    ours, proxy = pair.failures.get("ours"), pair.failures["proxy"]
    said = [f"{name}: {fails[0][:120]}" for name, fails in (("ours", ours), ("proxy", proxy)) if fails]
    note = pair.missing or "; ".join(said) or "every answer complete: 20 chunks, and [DONE] when streamed"
    measure = f"failed requests (rate search aside), {w}, vs LiteLLM proxy"
    return Row(measure, math.nan if ours is None else len(ours), "", "max", 0, len(proxy), note)


def pair_rows(pair: Pair) -> list[Row]:
    w = f"{pair.workers} worker{'s' if pair.workers > 1 else ''}"
    rows = [*cpu_rows(pair, w), *latency_rows(pair, w), rate_row(pair, w), failure_row(pair, w)]
    if pair.checks:
        rows[0] = replace(rows[0], note=f"{rows[0].note}; {pair.checks}")
    return rows


async def measure(fake_url: str, knobs: Knobs = Knobs()) -> list[Row]:
    CLOCK["start"] = time.monotonic()
    proxy_litellm()  # installed before anything is timed
    gc.collect()
    gc.freeze()  # the client's collector pausing over what this process imported would count as latency
    ours_workers = serve_has_workers()
    rows: list[Row] = []
    for workers in knobs.workers:
        rows += pair_rows(await one_pair(fake_url, workers, knobs, ours_workers))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter steps: a first look")
    parser.add_argument("--workers", type=int, action="append", help="worker processes (default: 1, then 2)")
    args = parser.parse_args()
    knobs = QUICK if args.quick else Knobs()
    if args.workers:
        knobs = replace(knobs, workers=tuple(args.workers))
    with fake_provider() as url:
        print_table(asyncio.run(measure(url, knobs)))


if __name__ == "__main__":
    main()
