"""The worker processes hooks run in: what they inherit, how they end, and what a lost one costs."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.support.hooks import FAST, Host, create, write
from tests.support.processes import worker_pids, zombies
from tests.support.waits import wait_until
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import HookRunner
from yao_agent.hooks.procs import GRACE_S

BUSY = """
async function Create(ctx, ms) {
  await ctx.log("info", "busy for " + ms);
  const end = Date.now() + ms;
  while (Date.now() < end) {}
  globalThis.calls = (globalThis.calls || 0) + 1;
  return [ms, globalThis.calls];
}
"""


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


async def settled(expected: int) -> list[int]:
    """The worker processes once those being stopped are gone (a kill takes a moment to land)."""
    await wait_until(lambda: len(worker_pids()) == expected and not zombies())
    return worker_pids()


async def running_js(host: Host, ms: int) -> None:
    """Until a BUSY call for `ms` has begun its JavaScript loop (it logged just before it)."""
    await wait_until(lambda: ("log", "info", f"busy for {ms}") in host.calls)


async def test_a_worker_inherits_none_of_the_servers_environment(
    runner: HookRunner, host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-servers-own")
    path = write(tmp_path, BUSY)
    await create(runner, path, host, 0)
    (pid,) = worker_pids()
    environ = proc_file(pid, "environ").split(b"\0")
    names = sorted(item.split(b"=", 1)[0].decode() for item in environ if item)
    assert names == ["LC_ALL", "PATH", "PYTHONPATH"]
    assert b"sk-the-servers-own" not in b"".join(environ)
    limits = proc_file(pid, "limits").decode()
    assert [line.split()[-3:-1] for line in limits.splitlines() if line.startswith("Max core file size")] == [
        ["0", "0"]
    ]


async def test_closing_the_runner_stops_and_reaps_every_worker(host: Host, tmp_path: Path) -> None:
    runner = HookRunner(workers=2)
    path = write(tmp_path, BUSY)
    await asyncio.gather(create(runner, path, host, 100), create(runner, path, host, 100))
    assert len(worker_pids()) == 2
    await runner.aclose()
    assert worker_pids() == [] and zombies() == []
    assert (await create(runner, path, host, 0)).value == [0, 1]  # usable again, cold
    await runner.aclose()
    assert worker_pids() == []


async def test_a_worker_killed_mid_call_fails_that_call_and_is_replaced(host: Host, tmp_path: Path) -> None:
    runner = HookRunner(workers=1)
    path = write(tmp_path, BUSY)
    try:
        await create(runner, path, host, 0)
        (pid,) = worker_pids()
        call = asyncio.create_task(create(runner, path, host, 2000, policy=HookPolicy(timeout_ms=5000)))
        await running_js(host, 2000)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(HookError) as caught:
            await call
        assert caught.value.message == (
            "the hook ran out of memory or was stopped: its V8 process ended (signal SIGKILL) under a memory "
            "limit of 64 MB"
        )
        assert (caught.value.file, caught.value.function) == ("hooks/hook.js", "Create")
        assert (await create(runner, path, host, 0)).value == [0, 1]  # a new process, a cold context
        assert zombies() == []
    finally:
        await runner.aclose()


async def test_a_call_cancelled_while_its_javascript_runs_leaves_the_worker_usable(host: Host, tmp_path: Path) -> None:
    runner = HookRunner(workers=1)
    path = write(tmp_path, BUSY)
    try:
        await create(runner, path, host, 0)
        (pid,) = worker_pids()
        call = asyncio.create_task(create(runner, path, host, 300, policy=HookPolicy(timeout_ms=400)))
        await running_js(host, 300)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The next call waits for the abandoned one to finish, then gets a fresh context in the same process.
        assert (await create(runner, path, host, 0)).value == [0, 1]
        # The abandoned request was sent before now, with at most 0.4 s of budget: its hard deadline is before
        # `after`. Its timer is due before this sleep's, so it has run when the sleep ends (and killed nothing).
        loop = asyncio.get_running_loop()
        after = loop.time() + 0.4 + GRACE_S
        await asyncio.sleep(after - loop.time())
        assert (await create(runner, path, host, 0)).value == [0, 2]
        assert worker_pids() == [pid]
    finally:
        await runner.aclose()


async def test_calls_beyond_the_workers_share_them(host: Host, tmp_path: Path) -> None:
    runner = HookRunner(workers=1)
    path = write(tmp_path, BUSY)
    try:
        results = await asyncio.gather(*(create(runner, path, host, 20) for _ in range(5)))
        # Each call has a context of its own (they were in flight together), all in the one process.
        assert [result.value for result in results] == [[20, 1]] * 5
        assert len(worker_pids()) == 1
        assert (await create(runner, path, host, 0)).value == [0, 2]  # and the contexts stay warm
    finally:
        await runner.aclose()


async def test_a_nested_call_uses_the_worker_its_caller_let_go(host: Host, tmp_path: Path) -> None:
    """While a hook waits for its `ctx.call`, it holds no worker: the child's hook runs in the same one."""
    runner = HookRunner(workers=1)
    path = write(tmp_path, """
async function Create(ctx, depth) {
  if (depth === 0) return "bottom";
  return "up from " + (await ctx.call("self", depth - 1));
}
""")  # fmt: skip
    context = host.context()

    async def call(assistant_id: str, depth: int) -> object:
        return (await runner.call(path, "h.js", "Create", [depth], context, FAST)).value

    context.call = call
    try:
        assert (await runner.call(path, "h.js", "Create", [2], context, FAST)).value == "up from up from bottom"
        assert len(worker_pids()) == 1 and len(await settled(1)) == 1
    finally:
        await runner.aclose()


async def test_the_budget_counts_javascript_time_across_round_trips(host: Host, tmp_path: Path) -> None:
    """Each round trip's JavaScript time is charged: three 150 ms slices overrun a 400 ms budget."""
    runner = HookRunner(workers=1)
    path = write(tmp_path, """
async function Create(ctx) {
  for (let i = 0; i < 3; i++) {
    const end = Date.now() + 150;
    while (Date.now() < end) {}
    await ctx.log("info", "slice " + i);
  }
  return "done";
}
""")  # fmt: skip
    try:
        with pytest.raises(HookError, match=r"^hook timed out after 400 ms$"):
            await create(runner, path, host, policy=HookPolicy(timeout_ms=400))
        assert [call for call in host.calls if call[0] == "log"] == [("log", "info", "slice 0"),
                                                                    ("log", "info", "slice 1")]  # fmt: skip
    finally:
        await runner.aclose()
