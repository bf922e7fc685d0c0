"""Hooks that fail: errors with their lines, limits, the sandbox."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.hooks import FAST, Host, create, failure, write
from tests.support.waits import wait_until
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import DelegateError, HookError, RunError, UsageError
from yao_agent.hooks import HookCall, HookRunner
from yao_agent.hooks.host import MAX_CALLS, MAX_EFFECTS

# --- errors ---------------------------------------------------------------------------------------------


async def test_a_throw_reports_its_message_and_line(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """// routing hook
function check(messages) {
  if (!Array.isArray(messages)) {
    throw new TypeError("bad input");
  }
}

function Create(ctx, messages) {
  check(messages);
  return null;
}
""",
    )
    error = await failure(runner, path, host, "not a list")
    assert (error.message, error.line) == ("TypeError: bad input", 4)
    assert error.detail() == {"file": "hooks/hook.js", "line": 4, "message": "TypeError: bad input"}


async def test_a_syntax_error_reports_its_line(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) {\n  return 1;\n}\n\nfunction Next(ctx) {\n  let x = ;\n}\n")
    error = await failure(runner, path, host)
    assert error.line == 6
    assert error.message.startswith("SyntaxError: Unexpected token ';'")


async def test_a_syntax_error_at_the_end_points_into_the_file(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) {\n  return 1;\n")
    error = await failure(runner, path, host)
    assert error.message == "SyntaxError: Unexpected end of input"
    assert error.line == 2


async def test_a_throw_at_top_level_reports_its_line(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "const table = {};\nconfigure(table);\nfunction Create() { return 1; }\n")
    error = await failure(runner, path, host)
    assert (error.message, error.line) == ("ReferenceError: configure is not defined", 2)


async def test_a_reference_error_inside_create_is_an_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) {\n  return helper(ctx);\n}\n")
    error = await failure(runner, path, host)
    assert (error.message, error.line) == ("ReferenceError: helper is not defined", 2)


async def test_a_rejected_promise_is_an_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path, 'async function Create(ctx) {\n  await ctx.log("info", "x");\n  throw new Error("later");\n}\n'
    )
    error = await failure(runner, path, host)
    assert (error.message, error.line) == ("Error: later", 3)


async def test_calls_made_before_a_throw_still_happen(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path, 'function Create(ctx) {\n  console.log("state", 3);\n  throw new RangeError("too far");\n}\n'
    )
    error = await failure(runner, path, host)
    assert (error.message, error.line) == ("RangeError: too far", 3)
    assert host.calls == [("log", "info", "state 3")]


async def test_throwing_a_non_error_value_still_fails(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, 'function Create(ctx) {\n  throw {code: "E_BAD"};\n}\n')
    assert (await failure(runner, path, host)).message == '{"code":"E_BAD"}'


CYCLE = "(() => { const a = {}; a.self = a; return a; })()"


@pytest.mark.parametrize(("expression", "reason"), [("10n", "BigInt"), (CYCLE, "circular"), ("() => 1", "function")])
async def test_a_value_without_json_form_is_an_error(
    runner: HookRunner, host: Host, tmp_path: Path, expression: str, reason: str
) -> None:
    path = write(tmp_path, f"function Create(ctx) {{ return {expression}; }}\n")
    error = await failure(runner, path, host)
    assert error.message.startswith("Create returned a value that is not JSON-serialisable")
    assert reason in error.message


async def test_a_promise_that_can_never_settle_fails_at_once(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "async function Create(ctx) { await new Promise(() => {}); }\n")
    # At once, not at the timeout: that would say "hook timed out after 60000 ms".
    assert "can never settle" in (await failure(runner, path, host, policy=HookPolicy(timeout_ms=60_000))).message


async def test_a_missing_function_is_not_an_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Next(ctx, payload) { return {data: 1}; }\n")
    assert await create(runner, path, host) == HookCall(defined=False, value=None)
    assert await create(runner, path, host) == HookCall(defined=False, value=None)
    assert await create(runner, path, host, {}, {}, function="Next") == HookCall(defined=True, value={"data": 1})


async def test_a_create_that_is_not_a_function_is_an_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "var Create = 5;\n")
    assert (await failure(runner, path, host)).message == "Create is defined but is not a function (it is a number)"


async def test_a_hook_that_breaks_the_builtins_we_rely_on_fails_clearly(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    path = write(tmp_path, 'Array.prototype.join = () => "garbage";\nfunction Create(ctx) { ctx.log("info", "x"); }\n')
    assert "could not be read" in (await failure(runner, path, host)).message


async def test_only_create_and_next_can_be_called(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Delete() {}\n")
    with pytest.raises(UsageError, match="Create, Next"):
        await create(runner, path, host, function="Delete")


async def test_a_missing_file_is_an_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    assert "cannot be read" in (await failure(runner, tmp_path / "absent.js", host)).message


# --- limits ---------------------------------------------------------------------------------------------

SPIN = """
function Create(ctx, mode) {
  if (mode === "spin") { while (true) {} }
  if (mode === "log-then-spin") { ctx.log("info", "about to spin"); while (true) {} }
  if (mode === "bomb") { const keep = []; while (true) keep.push(new Array(100000).fill(1.5)); }
  return "fine";
}
async function Next(ctx, mode) {
  await ctx.log("info", "then");
  if (mode === "spin") { while (true) {} }
  const keep = []; while (true) keep.push(new Array(100000).fill(1.5));
}
"""


@pytest.mark.parametrize("mode", ["spin", "log-then-spin"])
async def test_an_infinite_loop_stops_at_the_timeout_and_the_next_call_works(
    runner: HookRunner, host: Host, tmp_path: Path, mode: str
) -> None:
    path = write(tmp_path, SPIN)
    policy = HookPolicy(timeout_ms=200, memory_mb=32)
    error = await failure(runner, path, host, mode, policy=policy)  # only the timeout can end it
    assert error.message == "hook timed out after 200 ms"
    assert (await create(runner, path, host, "calm", policy=policy)).value == "fine"


async def test_a_loop_after_an_await_also_times_out(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, SPIN)
    policy = HookPolicy(timeout_ms=200, memory_mb=32)
    with pytest.raises(HookError, match=r"^hook timed out after 200 ms$"):
        await create(runner, path, host, "spin", policy=policy, function="Next")
    assert (await create(runner, path, host, "calm", policy=policy)).value == "fine"


async def test_a_slow_hook_does_not_hold_up_the_event_loop(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "function Create(ctx, ms) {\n  const end = Date.now() + ms;\n  while (Date.now() < end) {}\n  return ms;\n}",
    )
    await create(runner, path, host, 0)  # warm
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        assert (await create(runner, path, host, 200, policy=HookPolicy(timeout_ms=2000))).value == 200
    finally:
        ticking.cancel()
    assert ticks >= 5  # the loop ran other work while V8 was busy (a blocked loop gives 0 or 1)


async def test_a_busy_default_executor_does_not_eat_a_slow_hooks_time(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    path = write(tmp_path, """
async function Create(ctx) {
  const end = Date.now() + 30;
  while (Date.now() < end) {}
  await ctx.log("info", "half way");
  return "finished";
}
""")  # fmt: skip
    # Blocking work holds every thread of the default executor, and more waits for one, until the hook
    # has answered: a hook that needed one of those threads would time out.
    threads = min(32, (os.cpu_count() or 1) + 4)  # the default executor's size
    holding: list[None] = []
    free = threading.Event()

    def hold() -> None:
        holding.append(None)
        free.wait(60)

    blockers = [asyncio.create_task(asyncio.to_thread(hold)) for _ in range(threads + 4)]
    try:
        await wait_until(lambda: len(holding) >= threads)  # every thread is taken, and more wait
        result = await create(runner, path, host, policy=HookPolicy(timeout_ms=400))
    finally:
        free.set()
        await asyncio.gather(*blockers)
    assert result.value == "finished"  # only its ~30 ms of JavaScript counted, not the queue for a thread


async def test_a_memory_bomb_fails_clearly_and_the_next_call_works(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    path = write(tmp_path, SPIN)
    policy = HookPolicy(timeout_ms=5000, memory_mb=32)
    error = await failure(runner, path, host, "bomb", policy=policy)
    assert error.message == "hook exceeded its memory limit of 32 MB"
    assert (await create(runner, path, host, "calm", policy=policy)).value == "fine"
    with pytest.raises(HookError, match=r"^hook exceeded its memory limit of 32 MB$"):
        await create(runner, path, host, "bomb", policy=policy, function="Next")
    assert (await create(runner, path, host, "calm", policy=policy)).value == "fine"


async def test_a_loop_at_top_level_times_out_and_a_fixed_file_loads(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    path = write(tmp_path, "while (true) {}\nfunction Create() { return 1; }\n")
    assert (await failure(runner, path, host)).message == "hook timed out after 300 ms"
    write(tmp_path, "function Create() { return 2; }\n")
    assert (await create(runner, path, host)).value == 2


async def test_each_call_gets_the_memory_limit_of_its_policy(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx, n) {\n  return new Array(n).fill(1.5).length;\n}\n")
    n = 6_000_000  # about 48 MB of doubles
    assert (await create(runner, path, host, n, policy=HookPolicy(timeout_ms=5000, memory_mb=128))).value == n
    with pytest.raises(HookError, match=r"^hook exceeded its memory limit of 16 MB$"):
        await create(runner, path, host, n, policy=HookPolicy(timeout_ms=5000, memory_mb=16))
    assert (await create(runner, path, host, 10, policy=HookPolicy(timeout_ms=5000, memory_mb=16))).value == 10


# --- sandbox --------------------------------------------------------------------------------------------


async def test_the_sandbox_has_no_way_out(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
function Create(ctx) {
  const probe = (f) => { try { return "reached: " + typeof f(); } catch (e) { return e.name + ": " + e.message; } };
  return {
    require: probe(() => require("fs")),
    process: probe(() => process.env),
    fetch: probe(() => fetch("http://x")),
    xhr: probe(() => new XMLHttpRequest()),
    ctor: probe(() => globalThis.constructor.constructor("return process")()),
    timers: [typeof setTimeout, typeof Atomics, typeof WebAssembly, typeof Uint8Array],
  };
}
""",
    )
    seen = (await create(runner, path, host)).value
    assert seen == {
        "require": "ReferenceError: require is not defined",
        "process": "ReferenceError: process is not defined",
        "fetch": "ReferenceError: fetch is not defined",
        "xhr": "ReferenceError: XMLHttpRequest is not defined",
        "ctor": "ReferenceError: process is not defined",
        "timers": ["undefined", "undefined", "undefined", "undefined"],
    }


@pytest.mark.parametrize(
    "escape",
    ['require("fs")', 'await import("fs")', 'await fetch("http://x")', "process.env", "new XMLHttpRequest()",
     'globalThis.constructor.constructor("return process")()', "await new Promise((ok) => setTimeout(ok, 1))"],
)  # fmt: skip
async def test_each_escape_fails_as_a_hook_error(runner: HookRunner, host: Host, tmp_path: Path, escape: str) -> None:
    path = write(tmp_path, f"async function Create(ctx) {{\n  return {escape};\n}}\n")
    assert (await failure(runner, path, host)).line == 2


async def test_console_output_goes_to_ctx_log(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, 'function Create(ctx) {\n  console.log("a", 1, [2]);\n  console.error("b");\n}\n')
    await create(runner, path, host)
    assert host.calls == [("log", "info", "a 1 [2]"), ("log", "error", "b")]


# --- ctx calls that fail --------------------------------------------------------------------------------


async def test_a_run_error_on_the_host_is_a_clean_js_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    host.fail_with = RunError("assistant 'other' failed with model_error: overloaded", reason="model_error")
    path = write(
        tmp_path,
        """
async function Create(ctx) {
  try { await ctx.call("other", []); } catch (e) {
    return {isError: e instanceof Error, message: e.message, stack: e.stack, shown: String(e)};
  }
}
""",
    )
    seen = (await create(runner, path, host)).value
    assert seen["isError"] is True
    assert seen["message"] == "assistant 'other' failed with model_error: overloaded"
    assert seen["shown"] == "Error: assistant 'other' failed with model_error: overloaded"
    head, *frames = seen["stack"].split("\n")
    assert head == seen["shown"]  # the message once, its prefix once
    assert frames and frames[0].strip().startswith("at Create (yao-hook-file:3:")
    assert all("yao-hook-runtime" not in f for f in frames)  # no frame of ours, only the hook's


async def test_a_hooks_own_throw_shows_only_its_own_frames(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) {\n  try { null.x; } catch (e) { return e.stack; }\n}\n")
    stack = (await create(runner, path, host)).value
    assert stack.split("\n") == ["TypeError: Cannot read properties of null (reading 'x')",
                                 "    at Create (yao-hook-file:2:14)"]  # fmt: skip


async def test_an_uncaught_host_failure_becomes_the_hook_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    host.fail_with = RunError("child run failed: model_error\nmore detail on another line")
    path = write(tmp_path, 'async function Create(ctx) {\n  const r = await ctx.call("other", []);\n  return r;\n}\n')
    error = await failure(runner, path, host)
    assert (error.message, error.line) == ("child run failed: model_error", 2)


async def test_an_internal_error_is_logged_and_the_hook_sees_no_python(
    runner: HookRunner, host: Host, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    context = host.context()

    async def memory_get(key: str) -> Any:
        return {"n": 1}[key]  # a bug in a callback: KeyError

    context.memory_get = memory_get
    path = write(
        tmp_path,
        'async function Create(ctx) {\n  try { await ctx.memory.get("k"); } catch (e) { return e.message; }\n}\n',
    )
    seen = await runner.call(path, "hooks/hook.js", "Create", [], context, FAST)
    assert seen.value == "internal error in ctx.memory.get (logged on the server)"
    [record] = [r for r in caplog.records if r.name == "yao_agent.hook"]
    assert record.levelname == "ERROR"
    assert record.getMessage() == "hooks/hook.js (concierge): ctx.memory.get failed on an internal error"
    assert record.exc_info is not None and record.exc_info[0] is KeyError


async def test_a_delegate_error_is_not_the_hooks_to_catch(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    host.fail_with = DelegateError("delegation deeper than 3 (limits.max_delegate_depth): a → b → a → b → a")
    path = write(
        tmp_path, 'async function Create(ctx) {\n  try { await ctx.call("b", []); } catch (e) { return "caught"; }\n}\n'
    )
    with pytest.raises(DelegateError, match="deeper than 3"):
        await create(runner, path, host)


@pytest.mark.parametrize(("loop", "sent"), [("await ctx.send('x' + i)", MAX_EFFECTS), ("ctx.send('x' + i)", 0)])
async def test_a_hook_cannot_flood_the_chat(
    runner: HookRunner, host: Host, tmp_path: Path, loop: str, sent: int
) -> None:
    path = write(tmp_path, f"async function Create(ctx) {{\n  for (let i = 0; i < 5000; i++) {loop};\n}}\n")
    error = await failure(runner, path, host, policy=HookPolicy(timeout_ms=10_000))
    assert (
        error.message
        == f"the hook made more than {MAX_EFFECTS} ctx.send/ctx.call/ctx.search calls in one call (the limit is 100)"
    )
    assert len(host.calls) == sent  # awaited one by one: the first 100 happened; all at once: none did


async def test_any_ctx_method_is_bounded(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path, "async function Create(ctx) {\n  for (let i = 0; i < 5000; i++) await ctx.log('info', 'x');\n}\n"
    )
    patient = HookPolicy(timeout_ms=10_000)  # a thousand round trips: the limit, not the clock, must stop it
    assert (await failure(runner, path, host, policy=patient)).message == (
        f"the hook made more than {MAX_CALLS} ctx calls in one call (the limit is {MAX_CALLS})"
    )
    assert len(host.calls) == MAX_CALLS
