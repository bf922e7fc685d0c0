"""Tenants share the hook workers: a hook waiting for the host holds none, and a worker given back goes to
the tenant holding the fewest, so one team's hooks never starve another's."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.hooks import SNAPSHOT, Host, write
from tests.support.processes import worker_pids, zombies
from tests.support.waits import wait_until
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import HookRunner, leases

ASKS = 'async function Create(ctx) { return "got " + (await ctx.call("slow", [])); }\n'
TRIVIAL = "function Create(ctx) { return ctx.team_id; }\n"
SPINS = "function Create(ctx) { for (;;) {} }\n"
POLICY = HookPolicy(timeout_ms=300, memory_mb=32)


async def test_hooks_waiting_on_a_slow_ctx_call_hold_no_worker(host: Host, tmp_path: Path) -> None:
    """Six of team A's hooks wait on a slow `ctx.call` (more than the two workers); team B's trivial hook
    still runs, and finishes before any of A's. (Had A's held the workers, B would wait for the first of
    them to finish: `fallback_s` later.)"""
    runner = HookRunner(workers=2)
    asks, trivial = write(tmp_path, ASKS, "asks.js"), write(tmp_path, TRIVIAL, "trivial.js")
    b_done = asyncio.Event()
    finished: list[str] = []
    waiting = 0
    fallback_s = 20.0

    async def slow(assistant_id: str, messages: Any) -> str:
        nonlocal waiting
        waiting += 1
        await asyncio.wait([asyncio.ensure_future(b_done.wait())], timeout=fallback_s)
        return "slow reply"

    async def a_call(n: int) -> None:
        context = host.context({**SNAPSHOT, "team_id": "a"})
        context.call = slow
        assert (await runner.call(asks, "hooks/asks.js", "Create", [], context, POLICY)).value == "got slow reply"
        finished.append(f"a{n}")

    try:
        a_calls = [asyncio.create_task(a_call(n)) for n in range(6)]
        await wait_until(lambda: waiting == 6)  # every one of A's hooks is inside its ctx.call
        context = host.context({**SNAPSHOT, "team_id": "b"})
        assert (await runner.call(trivial, "hooks/trivial.js", "Create", [], context, POLICY)).value == "b"
        finished.append("b")
        b_done.set()
        await asyncio.gather(*a_calls)
        assert finished[0] == "b" and sorted(finished[1:]) == [f"a{n}" for n in range(6)]
        assert len(worker_pids()) == 2
    finally:
        await runner.aclose()


async def test_a_worker_given_back_goes_to_the_team_holding_fewest(host: Host, tmp_path: Path) -> None:
    """Team A's four hooks loop forever (each stopped by its timeout) on two workers; team B's hook comes
    after them, yet runs on the first worker A gives back, before A's third and fourth loops."""
    runner = HookRunner(workers=2)
    spins, trivial = write(tmp_path, SPINS, "spins.js"), write(tmp_path, TRIVIAL, "trivial.js")
    finished: list[str] = []

    async def a_call(n: int) -> None:
        context = host.context({**SNAPSHOT, "team_id": "a"})
        try:
            await runner.call(spins, "hooks/spins.js", "Create", [], context, POLICY)
        except HookError as exc:
            assert exc.message == "hook timed out after 300 ms"
            finished.append(f"a{n}")

    async def b_call() -> None:
        context = host.context({**SNAPSHOT, "team_id": "b"})
        assert (await runner.call(trivial, "hooks/trivial.js", "Create", [], context, POLICY)).value == "b"
        finished.append("b")

    try:
        a_calls = [asyncio.create_task(a_call(n)) for n in range(4)]
        await asyncio.sleep(0)  # A's calls have taken the two workers, and the two others queue
        await asyncio.gather(b_call(), *a_calls)
        assert finished.index("b") < min(finished.index("a2"), finished.index("a3"))
        assert sorted(finished) == ["a0", "a1", "a2", "a3", "b"]
    finally:
        await runner.aclose()


async def test_a_worker_lost_while_a_hook_waits_fails_that_call_clearly(host: Host, tmp_path: Path) -> None:
    """The context of a hook waiting for the host stays in its worker: if that process dies meanwhile, the
    call fails with a hook error that says so, and the next call gets a new process."""
    runner = HookRunner(workers=1)
    asks = write(tmp_path, ASKS, "asks.js")
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def slow(assistant_id: str, messages: Any) -> str:
        inside.set()
        await go_on.wait()
        return "slow reply"

    context = host.context()
    context.call = slow
    try:
        call = asyncio.create_task(runner.call(asks, "hooks/asks.js", "Create", [], context, POLICY))
        await inside.wait()
        (pid,) = worker_pids()
        os.kill(pid, signal.SIGKILL)
        # gone and reaped: the runner has seen its end (a zombie is gone from the list before that)
        await wait_until(lambda: worker_pids() != [pid] and pid not in zombies())
        go_on.set()
        with pytest.raises(HookError) as caught:
            await call
        assert caught.value.message == (
            "the hook's V8 process ended while the hook waited for a ctx call (signal SIGKILL); run it again"
        )
        assert (caught.value.file, caught.value.function) == ("hooks/asks.js", "Create")
        assert (await runner.call(asks, "hooks/asks.js", "Create", [], context, POLICY)).value == "got slow reply"
    finally:
        await runner.aclose()


async def test_a_worker_hosts_a_bounded_number_of_waiting_hooks(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting contexts take memory in their process: past `MAX_IN_FLIGHT` a new call waits for room. A
    hook called from inside the waiting hooks' ctx calls (a child run's) does not: they wait for it."""
    monkeypatch.setattr(leases, "MAX_IN_FLIGHT", 2)
    runner = HookRunner(workers=1)
    asks, trivial = write(tmp_path, ASKS, "asks.js"), write(tmp_path, TRIVIAL, "trivial.js")
    go_on = asyncio.Event()
    finished: list[str] = []
    children = 0

    async def slow(assistant_id: str, messages: Any) -> str:
        nonlocal children
        context = host.context({**SNAPSHOT, "team_id": "child"})
        assert (await runner.call(trivial, "hooks/trivial.js", "Create", [], context, POLICY)).value == "child"
        children += 1
        await go_on.wait()
        return "slow reply"

    async def a_call(n: int) -> None:
        context = host.context({**SNAPSHOT, "team_id": "a"})
        context.call = slow
        assert (await runner.call(asks, "hooks/asks.js", "Create", [], context, POLICY)).value == "got slow reply"
        finished.append(f"a{n}")

    async def b_call() -> None:
        context = host.context({**SNAPSHOT, "team_id": "b"})
        assert (await runner.call(trivial, "hooks/trivial.js", "Create", [], context, POLICY)).value == "b"
        finished.append("b")

    try:
        a_calls = [asyncio.create_task(a_call(n)) for n in range(2)]
        await wait_until(lambda: children == 2)  # both wait, and each one's child hook ran beside them
        b = asyncio.create_task(b_call())
        await asyncio.sleep(0.2)
        assert not b.done()  # no room for it while two calls wait in the one worker
        go_on.set()
        await asyncio.gather(b, *a_calls)
        assert finished.index("b") > min(finished.index("a0"), finished.index("a1"))
        assert len(worker_pids()) == 1
    finally:
        await runner.aclose()
