"""Random hooks: whatever a hook allocates, sends, logs, stores, throws or loops on, its call succeeds or
fails with a HookError, and the process, another tenant's hook and the next call carry on."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hooks import SNAPSHOT, Host, write
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import HookRunner

# Mostly small, sometimes far beyond any limit.
SIZES = st.sampled_from([0, 1, 3, 100, 5_000, 70_000, 300_000, 2**20, 2**24, 2**25, 2**27, 2**28])
ALLOCATIONS = {
    "array": "keep.push(new Array(@N));",
    "fill": "keep.push(new Array(@N).fill(1.5));",
    "string": 'keep.push("s".repeat(@N));',
    "doubling": 'keep.push((() => { let s = "d"; while (s.length < @N) s += s; return s; })());',
    "object": "{ const o = {}; for (let i = 0; i < @N; i++) o['k' + i] = i; keep.push(o); }",
    "nested": "{ let d = []; for (let i = 0; i < @N; i++) d = [d]; keep.push(d); }",
    "from": "keep.push(Array.from({length: @N}, (_, i) => i));",
    "parse": "keep.push(JSON.parse('[' + '0,'.repeat(@N) + '0]'));",
}
OUTPUTS = {
    "send": 'await ctx.send("m".repeat(@N));',
    "send-object": 'await ctx.send({content: "c".repeat(@N), kind: "note"});',
    "log": 'ctx.log("info", "l\\n\\u001b".repeat(@N));',
    "set": 'await ctx.memory.set("key" + i, "v".repeat(@N));',
    "set-key": 'await ctx.memory.set("k".repeat(@N), 1);',
    "get": 'await ctx.memory.get("key" + i);',
}
ENDS = {
    "return": 'return {metadata: {n: keep.length}, note: "done"};',
    "return-all": "return keep;",
    "throw": 'throw new Error("failed on purpose");',
    "loop": "for (;;) {}",
    "reject": 'await Promise.reject(new TypeError("rejected"));',
    "never": "await new Promise(() => {});",
}
STEPS = st.one_of(
    st.tuples(st.just("alloc"), st.sampled_from(sorted(ALLOCATIONS)), SIZES, st.just(1), st.booleans()),
    st.tuples(st.just("out"), st.sampled_from(sorted(OUTPUTS)), SIZES, st.integers(1, 120), st.booleans()),
)
PROGRAMS = st.tuples(st.lists(STEPS, max_size=4), st.sampled_from(sorted(ENDS)))
POLICY = HookPolicy(timeout_ms=300, memory_mb=32)
CANARY = "let calls = 0;\nfunction Create() { calls += 1; return calls > 0 ? 'alive' : 'broken'; }\n"


def source(steps: list[tuple[str, str, int, int, bool]], end: str) -> str:
    """A Create hook doing each step in turn, each in a loop of its count, maybe catching what it throws."""
    body: list[str] = []
    for kind, name, size, count, caught in steps:
        code = (ALLOCATIONS if kind == "alloc" else OUTPUTS)[name].replace("@N", str(size))
        step = f"for (let i = 0; i < {count}; i++) {{ {code} }}"
        body.append(f"try {{ {step} }} catch (e) {{ caughtErrors.push(String(e.message)); }}" if caught else step)
    lines = "\n  ".join([*body, ENDS[end]])
    return f"async function Create(ctx) {{\n  const keep = [], caughtErrors = [];\n  {lines}\n}}\n"


def test_random_hooks_never_break_the_server(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    runner = HookRunner(workers=2)
    host = Host()
    canary = write(tmp_path, CANARY, "canary.js")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes: list[str] = []

    async def one(steps: list[tuple[str, str, int, int, bool]], end: str) -> None:
        path = write(tmp_path, source(steps, end), "fuzz.js")
        context = host.context({**SNAPSHOT, "team_id": "fuzzer"})
        try:
            await runner.call(path, "hooks/fuzz.js", "Create", [], context, POLICY)
            outcomes.append("ok")
        except HookError as exc:
            assert (exc.file, exc.function) == ("hooks/fuzz.js", "Create")
            outcomes.append(exc.message.split(":")[0][:40])
        calm = host.context({**SNAPSHOT, "team_id": "bystander"})
        assert (await runner.call(canary, "hooks/canary.js", "Create", [], calm, POLICY)).value == "alive"
        host.calls.clear()
        host.memory.clear()

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(PROGRAMS)
    def check(program: tuple[list[tuple[str, str, int, int, bool]], str]) -> None:
        loop.run_until_complete(one(*program))

    try:
        check()
    finally:
        loop.run_until_complete(runner.aclose())
        loop.close()
    assert outcomes and all(outcomes)
    # What hooks allocated stayed in their workers: the server grew by what it received (an answer is
    # at most 8 MB, held a few times over while it is read), not by what the hooks built.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100_000  # KB
