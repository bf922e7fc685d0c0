"""Hooks run in real V8: values, ctx, errors with their lines, limits, sandbox, reloads and concurrency."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError, UsageError
from yao_agent.hooks import HookCall, HookContext, HookRunner

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = {"chat_id": "chat_1", "assistant_id": "concierge", "user_id": "u1", "team_id": "t1", "locale": "en",
            "metadata": {"channel": "web", "tags": ["a"]}}  # fmt: skip
FAST = HookPolicy(timeout_ms=300, memory_mb=32)


@dataclass
class Host:
    """The host side of ctx: records what the hook asked for and answers like the pipeline would."""

    calls: list[tuple[Any, ...]] = field(default_factory=list[tuple[Any, ...]])
    memory: dict[str, Any] = field(default_factory=dict[str, Any])
    fail_with: Exception | None = None

    def context(self, snapshot: dict[str, Any] | None = None) -> HookContext:
        async def log(level: str, message: str) -> None:
            self.calls.append(("log", level, message))

        async def send(message: Any) -> str:
            self.calls.append(("send", message))
            return f"msg_{len(self.calls)}"

        async def memory_get(key: str) -> Any:
            self.calls.append(("memory_get", key))
            return self.memory.get(key)

        async def memory_set(key: str, value: Any) -> None:
            self.calls.append(("memory_set", key, value))
            self.memory[key] = value

        async def call(assistant_id: str, messages: Any) -> Any:
            self.calls.append(("call", assistant_id, messages))
            if self.fail_with is not None:
                raise self.fail_with
            await asyncio.sleep(0)
            return {"assistant_id": assistant_id, "content": f"child saw {len(messages)} messages"}

        return HookContext(dict(snapshot or SNAPSHOT), log, send, memory_get, memory_set, call)


@pytest.fixture
async def runner() -> AsyncIterator[HookRunner]:
    hooks = HookRunner()
    yield hooks
    await hooks.aclose()


@pytest.fixture
def host() -> Host:
    return Host()


def write(folder: Path, source: str, name: str = "hook.js") -> Path:
    path = folder / name
    path.write_text(source, encoding="utf-8")
    return path


async def create(
    runner: HookRunner, path: Path, host: Host, *args: Any, policy: HookPolicy = FAST, function: str = "Create"
) -> HookCall:
    return await runner.call(path, "hooks/hook.js", function, list(args), host.context(), policy)


async def failure(runner: HookRunner, path: Path, host: Host, *args: Any, policy: HookPolicy = FAST) -> HookError:
    with pytest.raises(HookError) as caught:
        await create(runner, path, host, *args, policy=policy)
    assert caught.value.file == "hooks/hook.js"
    assert caught.value.function == "Create"
    return caught.value


# --- values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (
            "({a: 1, b: [1, 'x', null, true], c: {d: {e: 2.5}}})",
            {"a": 1, "b": [1, "x", None, True], "c": {"d": {"e": 2.5}}},
        ),
        ("[1, [2, [3]], {}]", [1, [2, [3]], dict[str, Any]()]),
        ("null", None),
        ("undefined", None),
        ("42", 42),
        ("-0.125", -0.125),
        ("'héllo ☃'", "héllo ☃"),
        ("false", False),
        ("({kept: 1, dropped: undefined})", {"kept": 1}),
        ("new Date(0)", "1970-01-01T00:00:00.000Z"),
    ],
)
async def test_every_return_shape_comes_back_as_json(
    runner: HookRunner, host: Host, tmp_path: Path, expression: str, expected: Any
) -> None:
    path = write(tmp_path, f"function Create(ctx, messages, options) {{\n  return {expression};\n}}\n")
    assert await create(runner, path, host, [], {}) == HookCall(defined=True, value=expected)


async def test_a_function_without_return_gives_none(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) { const x = 1; }\n")
    assert (await create(runner, path, host)).value is None


async def test_arguments_arrive_intact(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx, messages, options) { return {messages, options}; }\n")
    messages = [{"role": "user", "content": 'quote " backslash \\ newline \n and \u2028 ☃'}]
    options = {"__proto__": {"polluted": True}, "nested": {"list": [1, 2.5, None]}, "big": 2**53}
    assert (await create(runner, path, host, messages, options)).value == {"messages": messages, "options": options}


async def test_async_hooks_are_awaited(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path, "async function Create(ctx, messages) {\n  await null;\n  return {count: messages.length};\n}\n"
    )
    assert (await create(runner, path, host, [{"role": "user"}] * 3)).value == {"count": 3}


async def test_the_shipped_concierge_hook_routes_long_questions(runner: HookRunner, host: Host) -> None:
    path = REPO / "hooks" / "concierge.js"
    long = [{"role": "user", "content": "x" * 81}]
    short = [{"role": "user", "content": "hi"}]
    assert (await create(runner, path, host, long, {})).value == {
        "connector": "use::heavy", "prompt_preset": "thorough", "metadata": {"routed": "heavy"}}  # fmt: skip
    assert (await create(runner, path, host, short, {})).value == {"metadata": {"routed": "light"}}
    payload = {"completion": {"content": "two words"}, "tools": [{"tool": "x"}]}
    snapshot = {**SNAPSHOT, "metadata": {"routed": "heavy"}}
    nxt = await runner.call(path, "hooks/concierge.js", "Next", [payload, {}], host.context(snapshot), FAST)
    assert nxt.value == {"data": {"route": "heavy", "words": 2, "tools_used": 1}}


# --- ctx ------------------------------------------------------------------------------------------------


async def test_ctx_snapshot_is_readable_and_frozen(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, """
function Create(ctx) {
  ctx.chat_id = "hijacked";
  ctx.metadata.channel = "changed";
  ctx.metadata.tags.push = undefined;
  ctx.extra = 1;
  return {chat: ctx.chat_id, user: ctx.user_id, team: ctx.team_id, locale: ctx.locale, assistant: ctx.assistant_id,
          channel: ctx.metadata.channel, extra: ctx.extra ?? null, frozen: Object.isFrozen(ctx.metadata.tags)};
}
""")  # fmt: skip
    assert (await create(runner, path, host)).value == {
        "chat": "chat_1", "user": "u1", "team": "t1", "locale": "en", "assistant": "concierge", "channel": "web",
        "extra": None, "frozen": True}  # fmt: skip


async def test_assigning_to_ctx_throws_in_strict_mode(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, '"use strict";\nfunction Create(ctx) {\n  ctx.chat_id = "x";\n}\n')
    error = await failure(runner, path, host)
    assert error.message.startswith("TypeError: Cannot assign to read only property 'chat_id'")
    assert error.line == 3


async def test_each_call_sees_its_own_snapshot(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "function Create(ctx) { return ctx.chat_id; }\n")
    for chat in ("a", "b", "a"):
        result = await runner.call(path, "h.js", "Create", [], host.context({**SNAPSHOT, "chat_id": chat}), FAST)
        assert result.value == chat


async def test_ctx_methods_reach_the_host_and_return_its_results(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        """
async function Create(ctx, messages) {
  await ctx.log("warn", "careful");
  const id = await ctx.send({type: "text", text: "hold on"});
  await ctx.memory.set("count", {n: 2});
  const remembered = await ctx.memory.get("count");
  const reply = await ctx.call("other", [{role: "user", content: "q"}]);
  return {id, remembered, reply};
}
""",
    )
    result = await create(runner, path, host, [])
    assert host.calls == [
        ("log", "warn", "careful"),
        ("send", {"type": "text", "text": "hold on"}),
        ("memory_set", "count", {"n": 2}),
        ("memory_get", "count"),
        ("call", "other", [{"role": "user", "content": "q"}]),
    ]
    assert result.value == {"id": "msg_2", "remembered": {"n": 2},
                            "reply": {"assistant_id": "other", "content": "child saw 1 messages"}}  # fmt: skip


async def test_ctx_calls_made_together_run_together(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
async function Create(ctx) {
  const [a, b] = await Promise.all([ctx.call("a", [1]), ctx.call("b", [1, 2])]);
  return [a.content, b.content];
}
""",
    )
    assert (await create(runner, path, host)).value == ["child saw 1 messages", "child saw 2 messages"]


async def test_calls_a_hook_does_not_await_still_happen(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path, 'function Create(ctx) {\n  ctx.send("note");\n  console.warn("seen", {n: 1});\n  return 7;\n}\n'
    )
    assert (await create(runner, path, host)).value == 7
    assert host.calls == [("send", "note"), ("log", "warn", 'seen {"n":1}')]


async def test_a_host_failure_is_a_short_js_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    host.fail_with = LookupError("unknown assistant 'nobody'")
    path = write(
        tmp_path,
        """
async function Create(ctx) {
  try { await ctx.call("nobody", []); } catch (e) {
    return {isError: e instanceof Error, message: e.message, stack: e.stack};
  }
}
""",
    )
    seen = (await create(runner, path, host)).value
    assert seen["isError"] is True
    assert seen["message"] == "unknown assistant 'nobody'"
    assert "Traceback" not in seen["stack"] and ".py" not in seen["stack"]


async def test_an_uncaught_host_failure_becomes_the_hook_error(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    host.fail_with = RuntimeError("child run failed: model_error\nTraceback (most recent call last): ...")
    path = write(tmp_path, 'async function Create(ctx) {\n  const r = await ctx.call("other", []);\n  return r;\n}\n')
    error = await failure(runner, path, host)
    assert error.message == "child run failed: model_error"
    assert error.line == 2
    assert "Traceback" not in str(error)


async def test_a_host_result_without_json_form_fails_only_that_call(
    runner: HookRunner, host: Host, tmp_path: Path
) -> None:
    host.memory["odd"] = float("nan")
    path = write(
        tmp_path,
        """
async function Create(ctx) {
  let failed = null;
  try { await ctx.memory.get("odd"); } catch (e) { failed = e.message; }
  return {failed, other: await ctx.memory.get("missing")};
}
""",
    )
    assert (await create(runner, path, host)).value == {
        "failed": "Out of range float values are not JSON compliant",
        "other": None,
    }


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
    started = time.perf_counter()
    assert "can never settle" in (await failure(runner, path, host, policy=HookPolicy(timeout_ms=5000))).message
    assert time.perf_counter() - started < 1


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
    started = time.perf_counter()
    error = await failure(runner, path, host, mode, policy=policy)
    assert error.message == "hook timed out after 200 ms"
    assert time.perf_counter() - started < 1.5
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


# --- warm contexts, reloads, loops, concurrency ---------------------------------------------------------


async def test_an_edit_on_disk_is_picked_up_on_the_next_call(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, 'function Create() { return "aaa"; }\n')
    assert (await create(runner, path, host)).value == "aaa"
    first = os.stat(path).st_mtime_ns
    write(tmp_path, 'function Create() { return "bbb"; }\n')
    os.utime(path, ns=(first, first))  # same size, same inode, and the same mtime a coarse clock would give
    assert (await create(runner, path, host)).value == "bbb"
    write(tmp_path, '\n\nfunction Create() {\n  throw new Error("v3");\n}\n')
    assert (await failure(runner, path, host)).line == 4
    write(tmp_path, "function Next() {}\n")
    assert (await create(runner, path, host)).defined is False


async def test_an_older_file_edited_is_picked_up(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, 'function Create() { return "old"; }\n')
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    assert (await create(runner, path, host)).value == "old"
    assert (await create(runner, path, host)).value == "old"
    write(tmp_path, 'function Create() { return "new"; }\n')
    assert (await create(runner, path, host)).value == "new"


async def test_state_stays_warm_between_calls(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "let calls = 0;\nfunction Create() { calls += 1; return calls; }\n")
    assert [(await create(runner, path, host)).value for _ in range(3)] == [1, 2, 3]


async def test_concurrent_calls_each_get_their_own_answer(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
async function Create(ctx, messages, options) {
  await ctx.log("info", "start " + options.n);
  const reply = await ctx.call("echo-" + options.n, messages);
  return {n: options.n, chat: ctx.chat_id, reply: reply.assistant_id, count: messages.length};
}
function Next(ctx, payload, options) { return {n: options.n, chat: ctx.chat_id}; }
""",
    )

    async def one(n: int, function: str) -> Any:
        context = host.context({**SNAPSHOT, "chat_id": f"chat_{n}"})
        args = [[{"role": "user"}] * n, {"n": n}] if function == "Create" else [{}, {"n": n}]
        return (await runner.call(path, "hooks/hook.js", function, args, context, FAST)).value

    results = await asyncio.gather(*(one(n, "Create" if n % 2 else "Next") for n in range(20)))
    for n, value in enumerate(results):
        expected = {"n": n, "chat": f"chat_{n}"}
        if n % 2:
            expected |= {"reply": f"echo-{n}", "count": n}
        assert value == expected


async def test_a_hook_calling_an_assistant_with_the_same_hook_does_not_wait_for_itself(
    tmp_path: Path, host: Host
) -> None:
    runner = HookRunner(contexts_per_file=1)
    path = write(
        tmp_path,
        """
async function Create(ctx, depth) {
  if (depth === 0) return "bottom";
  return "up from " + (await ctx.call("self", depth - 1));
}
""",
    )

    async def call(assistant_id: str, depth: Any) -> Any:
        return (await runner.call(path, "h.js", "Create", [depth], context, FAST)).value

    context = host.context()
    context.call = call
    try:
        assert (await runner.call(path, "h.js", "Create", [2], context, FAST)).value == "up from up from bottom"
    finally:
        await runner.aclose()


async def test_calls_from_another_event_loop_get_fresh_contexts(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    path = write(tmp_path, "let calls = 0;\nfunction Create(ctx, n) { calls += 1; return [n, calls]; }\n")
    assert (await create(runner, path, host, 1)).value == [1, 1]
    elsewhere = await asyncio.to_thread(lambda: asyncio.run(create(runner, path, host, 2)))
    assert elsewhere.value == [2, 1]
    assert (await create(runner, path, host, 3)).value == [3, 1]
