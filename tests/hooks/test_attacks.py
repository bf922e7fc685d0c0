"""Hooks that try to end or stall the server: each fails only its own call with a clear hook error, while
the process, a hook running beside it and the hook's next call carry on.

V8 cannot bound these in the process that runs it: `fill` on a huge array ignores termination and then
aborts the whole process, and V8's heap limit lets a single large allocation through. Hooks run in
worker processes that can be killed and replaced.
"""

from __future__ import annotations

import asyncio
import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.hooks import SNAPSHOT, Host, write
from tests.support.processes import running_workers, zombies
from tests.support.waits import wait_until
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import HookCall, HookRunner

ATTACKS = """
function Create(ctx, mode) {
  const width = Number(ctx.metadata.width);
  if (mode === "fill") return new Array(width).fill(0).length;
  if (mode === "repeat") return 'x'.repeat(width).length;
  if (mode === "repeat-returned") return 'x'.repeat(width);
  if (mode === "doubling") { let s = "x"; for (;;) s = s + s; }
  if (mode === "from") return Array.from({length: width}, (_, i) => i).length;
  if (mode === "from-holes") return Array.from({length: width}).length;
  if (mode === "parse") return JSON.parse("[" + "0,".repeat(width) + "0]").length;
  if (mode === "loop") { for (;;) {} }
  if (mode === "recursion") { const down = (n) => down(n + 1) + 1; return down(0); }
  if (mode === "nested" || mode === "nested-send") {
    let deep = [];
    for (let i = 0; i < width; i++) deep = [deep];
    if (mode === "nested-send") ctx.send({content: "x", deep});
    return deep;
  }
  if (mode === "huge-answer") return "y".repeat(width);
  return "calm";
}
"""
BESIDE = """
async function Create(ctx) {
  await ctx.log("info", "started");
  const end = Date.now() + 300;
  while (Date.now() < end) {}
  globalThis.seen = (globalThis.seen || 0) + 1;
  return "beside " + (await ctx.memory.get("k"));
}
"""
ISSUE = HookPolicy(timeout_ms=1000, memory_mb=32)  # the policy of the reported attack
CRASHED = r"^the hook ran out of memory or was stopped: .* under a memory limit of 32 MB$"
TIMED_OUT = r"^hook timed out after 1000 ms$"
OVER = r"^hook exceeded its memory limit of 32 MB$"
DEEP = r"^the hook gave a value nested more than 64 levels deep \(the limit\)$"


async def attack(runner: HookRunner, path: Path, host: Host, mode: str, width: int) -> Any:
    context = host.context({**SNAPSHOT, "metadata": {"width": str(width)}, "team_id": "mallory"})
    return (await runner.call(path, "hooks/attack.js", "Create", [mode], context, ISSUE)).value


@pytest.mark.parametrize(
    ("mode", "width", "expected"),
    [
        pytest.param("fill", 2**28, f"{TIMED_OUT}|{CRASHED}", id="new Array(2**28).fill(0)"),
        pytest.param("fill", 2**25, f"{CRASHED}|{OVER}", id="new Array(2**25).fill(0) under 32 MB"),
        pytest.param("repeat", 2**29, r"^RangeError: Invalid string length$", id="'x'.repeat(2**29)"),
        pytest.param("repeat-returned", 2**28, f"{CRASHED}|{OVER}", id="'x'.repeat(2**28) returned"),
        pytest.param("doubling", 0, r"^RangeError: Invalid string length$", id="string doubling"),
        pytest.param("from", 2**27, f"{TIMED_OUT}|{OVER}|{CRASHED}", id="Array.from({length: 2**27}, f)"),
        pytest.param("from-holes", 2**27, f"{TIMED_OUT}|{OVER}|{CRASHED}", id="Array.from({length: 2**27})"),
        pytest.param("parse", 2**26, f"{CRASHED}|{OVER}", id="JSON.parse of a huge string"),
        pytest.param("loop", 0, TIMED_OUT, id="infinite loop"),
        pytest.param("recursion", 0, r"^RangeError: Maximum call stack size exceeded$", id="deep recursion"),
        pytest.param("nested", 100_000, DEEP, id="a deeply nested value returned"),
        pytest.param("nested-send", 100_000, DEEP, id="a deeply nested value sent"),
    ],
)
async def test_an_attack_fails_only_its_own_call(
    runner: HookRunner, host: Host, tmp_path: Path, mode: str, width: int, expected: str
) -> None:
    path = write(tmp_path, ATTACKS, "attack.js")
    beside = write(tmp_path, BESIDE, "beside.js")
    host.memory["k"] = "kept"
    policy = HookPolicy(timeout_ms=3000, memory_mb=64)
    beside_call = runner.call(beside, "hooks/beside.js", "Create", [], host.context(), policy)
    assert (await beside_call).value == "beside kept"  # both warm: the attack runs in the other worker
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started, cpu, peak = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome, alongside = await asyncio.gather(
        attack(runner, path, host, mode, width),
        runner.call(beside, "hooks/beside.js", "Create", [], host.context(), policy),
        return_exceptions=True,
    )
    took = time.perf_counter() - started
    ticking.cancel()
    # The hook's JavaScript ran, and stopped, outside the server: the server's own CPU and memory never
    # paid for it, and once its call has failed nothing of it still runs, here or in a worker.
    assert time.process_time() - cpu < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100_000  # KB
    await wait_until(lambda: not running_workers())
    assert isinstance(outcome, HookError), outcome
    assert (outcome.file, outcome.function) == ("hooks/attack.js", "Create")
    assert re.match(expected, outcome.message), outcome.message
    assert ticks >= took / 0.05  # the event loop was never held (it ticked at a fifth of its pace or more)
    assert isinstance(alongside, HookCall) and alongside.value == "beside kept", alongside
    assert (await attack(runner, path, host, "calm", 0)) == "calm"
    assert (await runner.call(beside, "hooks/beside.js", "Create", [], host.context(), policy)).value == "beside kept"
    assert zombies() == []


async def test_an_answer_too_large_for_the_server_is_refused(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, ATTACKS, "attack.js")
    context = host.context({**SNAPSHOT, "metadata": {"width": "10000000"}})
    with pytest.raises(HookError, match=r"^the hook's answer is 10 MB, more than the 8 MB it may be$"):
        await runner.call(path, "hooks/attack.js", "Create", ["huge-answer"], context, HookPolicy(memory_mb=256))
    assert (await attack(runner, path, host, "calm", 0)) == "calm"
