"""Hooks run in real V8: values, ctx, warm contexts, reloads and concurrency."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.hooks import FAST, SNAPSHOT, Host, create, failure, write
from yao_agent.hooks import HookCall, HookRunner
from yao_agent.hooks.procs import CONTEXTS_PER_WORKER

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
    path = REPO / "hooks" / "concierge.ts"
    long = [{"role": "user", "content": "x" * 81}]
    short = [{"role": "user", "content": "hi"}]
    assert (await create(runner, path, host, long, {})).value == {
        "connector": "use::heavy", "prompt_preset": "thorough", "metadata": {"routed": "heavy"}}  # fmt: skip
    assert (await create(runner, path, host, short, {})).value == {"metadata": {"routed": "light"}}
    payload = {"completion": {"content": "two words"}, "tools": [{"tool": "x"}]}
    snapshot = {**SNAPSHOT, "metadata": {"routed": "heavy"}}
    nxt = await runner.call(path, "hooks/concierge.ts", "Next", [payload, {}], host.context(snapshot), FAST)
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
        "failed": "ctx.memory.get gave a value with no JSON form: Out of range float values are not JSON compliant",
        "other": None,
    }


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


REMEMBERS = "let last = null;\nfunction Create(ctx, message) { const seen = last; last = message; return seen; }\n"


async def test_a_hooks_globals_never_reach_another_tenant(tmp_path: Path, host: Host) -> None:
    """A tenant is the caller's team, or the caller for a user without a team; each has its own context."""
    runner = HookRunner(workers=1)  # one process: every call below lands in it
    path = write(tmp_path, REMEMBERS)

    async def call(team: str | None, user: str, message: str) -> Any:
        context = host.context({**SNAPSHOT, "team_id": team, "user_id": user})
        return (await runner.call(path, "hooks/hook.js", "Create", [message], context, FAST)).value

    try:
        assert await call("acme", "alice", "acme's secret") is None
        assert await call("umbrella", "carol", "umbrella's") is None  # never acme's message
        assert await call("acme", "bob", "bob's") == "acme's secret"  # the same team: warm
        assert await call(None, "dave", "dave's") is None
        assert await call(None, "erin", "erin's") is None  # another user without a team
        assert await call("dave", "frank", "team dave's") is None  # a team named like a user is not that user
        assert await call(None, "dave", "dave again") == "dave's"
        assert await call("umbrella", "carol", "again") == "umbrella's"
    finally:
        await runner.aclose()


async def test_two_hook_files_alike_keep_their_globals_apart(runner: HookRunner, host: Host, tmp_path: Path) -> None:
    """Contexts are made per hook text, yet two files with the same text are two hooks."""
    first, second = write(tmp_path, REMEMBERS, "a.js"), write(tmp_path, REMEMBERS, "b.js")

    async def call(path: Path, shown: str, message: str) -> Any:
        return (await runner.call(path, shown, "Create", [message], host.context(), FAST)).value

    assert await call(first, "hooks/a.js", "for a") is None
    assert await call(second, "hooks/b.js", "for b") is None  # never a's message
    assert await call(first, "hooks/a.js", "again") == "for a"


async def test_warm_contexts_per_worker_are_bounded(tmp_path: Path, host: Host) -> None:
    runner = HookRunner(workers=1)
    path = write(tmp_path, REMEMBERS)

    async def call(team: str, message: str) -> Any:
        context = host.context({**SNAPSHOT, "team_id": team})
        return (await runner.call(path, "hooks/hook.js", "Create", [message], context, FAST)).value

    try:
        for n in range(CONTEXTS_PER_WORKER + 1):
            assert await call(f"team{n}", f"first of {n}") is None
        last = CONTEXTS_PER_WORKER
        assert await call(f"team{last}", "again") == f"first of {last}"  # the most recent are warm
        assert await call("team0", "again") is None  # the least recently used was dropped: it starts cold
    finally:
        await runner.aclose()


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
    runner = HookRunner(workers=1)
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
