"""Latency of a warm hook call: `Create` of a concierge-like hook with a ~2 KB payload.

    .venv/bin/python bench/hooks.py [--calls 5000]

Four things are measured, alternating call by call so machine noise hits all alike:
- `plain`: the hook shipped in hooks/concierge.ts, its types removed beforehand: as a `.js` file (no `ctx`
  method);
- `ts`: the same hook as the `.ts` file itself (its types removed in the worker, once for the file);
- `log`: the same with one `await ctx.log(...)` first (one more round trip to the worker, and the callback);
- `floor`: an empty `Create` with no arguments, i.e. what a call costs before the hook does anything;
- `v8 1`: mini-racer's own `eval("1")` in this process, the library's floor for one round trip into V8
  (hooks no longer run in this process: the difference with `floor` is the worker process's round trip).
Reported: p50, p99 and mean wall time per call, after a warm-up. Each call's payload differs, as in a
real run. The machine's load shows in every row alike: compare rows with `v8 1`, not with other runs.

Also reported, in the note: the first call of a new tenant (a cold context in a warm worker: a V8
context made, the runtime and the hook file loaded), and the worker processes' memory (RSS) idle and
per warm context.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py_mini_racer import MiniRacer

from bench.common import REPO, Row, print_table
from yao_agent.dsl.specs import HookPolicy
from yao_agent.hooks import HookContext, HookRunner
from yao_agent.hooks.procs import CONTEXTS_PER_WORKER

CONCIERGE_TS = (REPO / "hooks" / "concierge.ts").read_text(encoding="utf-8")


def _stripped(source: str) -> str:
    racer = MiniRacer()
    racer.eval((REPO / "yao_agent" / "hooks" / "vendor" / "sucrase.js").read_text(encoding="utf-8"))
    return str(racer.eval(f"__yao_strip({json.dumps(source)})"))


CONCIERGE = _stripped(CONCIERGE_TS)
LOG_LINE = '\n  await ctx.log("info", "routing " + messages.length + " messages");'
WITH_LOG = CONCIERGE.replace(
    "function Create(ctx, messages, options) {", "async function Create(ctx, messages, options) {" + LOG_LINE
)
FLOOR = "function Create() { return null; }\n"
POLICY = HookPolicy()


def payload(i: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """About 2 KB of JSON: a 20-message history and the run's options."""
    messages: list[dict[str, Any]] = []
    for turn in range(10):
        messages.append({"role": "user", "content": f"Question {turn} of call {i}: what is the weather like in Paris?"})
        messages.append({"role": "assistant", "content": f"Answer {turn}: mild and sunny, around 21 °C, light wind."})
    last = "A long final question, long enough to be routed to the heavy role by the concierge hook."
    messages[-1] = {"role": "user", "content": last}
    options = {"connector": "use::default", "metadata": {"source": "bench", "call": i}, "skip": {"history": False}}
    return messages, options


def context() -> HookContext:
    async def log(level: str, message: str) -> None:
        return None

    async def send(message: Any) -> str:
        return "msg_1"

    async def memory_get(key: str) -> Any:
        return None

    async def memory_set(key: str, value: Any) -> None:
        return None

    async def call(assistant_id: str, messages: Any) -> Any:
        return None

    snapshot = {"chat_id": "chat_1", "assistant_id": "concierge", "user_id": "u1", "team_id": "t1",
                "locale": "en", "metadata": {"channel": "web"}}  # fmt: skip
    return HookContext(snapshot, log, send, memory_get, memory_set, call)


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(source, encoding="utf-8")
    old = time.time() - 3600  # a hook file as found in production: not written this very second
    os.utime(path, (old, old))
    return path


async def latencies(calls: int, warmup: int) -> dict[str, list[float]]:
    runner = HookRunner()
    ctx = context()
    racer = MiniRacer()
    with tempfile.TemporaryDirectory() as tmp:
        hooks = {
            "plain": write(Path(tmp), "concierge.js", CONCIERGE),
            "ts": write(Path(tmp), "concierge.ts", CONCIERGE_TS),
            "log": write(Path(tmp), "with_log.js", WITH_LOG),
            "floor": write(Path(tmp), "floor.js", FLOOR),
        }
        runs: dict[str, Callable[[list[Any]], Awaitable[Any]]] = {
            name: lambda args, path=path: runner.call(path, path.name, "Create", args, ctx, POLICY)
            for name, path in hooks.items()
        }
        runs["v8 1"] = lambda args: asyncio.sleep(0, racer.eval("1"))
        check = await runs["plain"](list(payload(0)))
        assert check.value == {"connector": "use::heavy", "prompt_preset": "thorough", "metadata": {"routed": "heavy"}}
        times: dict[str, list[float]] = {name: [] for name in runs}
        for i in range(warmup + calls):
            args = list(payload(i))  # built before the clock starts: the caller's work, not the hook's
            for name, run in runs.items():
                given = [] if name == "floor" else args
                start = time.perf_counter()
                await run(given)
                if i >= warmup:
                    times[name].append(time.perf_counter() - start)
        await runner.aclose()
    racer.close()
    return times


def worker_rss_kb() -> list[int]:
    """The resident memory of this process's hook workers (found in /proc), in KB."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0")) == os.getpid() and b"yao_agent/hooks/worker.py" in command:
            found.append(int(fields["VmRSS"].split()[0]))
    return found


async def tenants(count: int = 40) -> tuple[float, float, float]:
    """(p50 of a new tenant's first call in ms, a warm worker's RSS in MB, RSS per warm context in MB)."""
    runner = HookRunner(workers=1)
    ctx = context()
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "concierge.js", CONCIERGE)
        await runner.call(path, path.name, "Create", list(payload(0)), ctx, POLICY)
        idle = sum(worker_rss_kb())
        firsts: list[float] = []
        for n in range(count):
            ctx.snapshot["team_id"] = f"team{n}"
            start = time.perf_counter()
            await runner.call(path, path.name, "Create", list(payload(n)), ctx, POLICY)
            firsts.append(time.perf_counter() - start)
        kept = min(count, CONTEXTS_PER_WORKER)
        full = sum(worker_rss_kb())
        await runner.aclose()
    return statistics.median(firsts) * 1e3, idle / 1024, (full - idle) / 1024 / kept


async def measure(calls: int, warmup: int = 500) -> list[Row]:
    times = await latencies(calls, warmup)
    cuts = {name: statistics.quantiles(samples, n=100) for name, samples in times.items()}
    size = len(json.dumps(list(payload(0))))
    note = ", ".join(f"{name} p50 {c[49] * 1e3:.3f} / p99 {c[98] * 1e3:.3f} ms" for name, c in cuts.items())
    first, idle, per_context = await tenants()
    note += (f"; a new tenant's first call p50 {first:.1f} ms; worker RSS {idle:.0f} MB, "
             f"+{per_context:.1f} MB per warm context")  # fmt: skip
    return [
        Row(f"warm Create hook, {size / 1000:.1f} KB payload, p50", cuts["plain"][49] * 1e3, "ms", "max", 0.1,
            note=note),
        Row("warm Create hook from its .ts file beside the .js, p50", cuts["ts"][49] * 1e3, "ms", "ratio", 1.10,
            cuts["plain"][49] * 1e3, note="the types removed once, at the file's first call"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="Latency of a warm hook call.")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    opts = parser.parse_args()
    print_table(asyncio.run(measure(opts.calls, opts.warmup)))


if __name__ == "__main__":
    main()
