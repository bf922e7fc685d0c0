"""What a hook may do to a run, the store and the server log, bounded: an attack fails its own run only,
messages and memory values have sizes, runs have totals, the log stays one line, memory keys fit."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import String

from tests.support.hooks import Make
from tests.support.processes import running_workers
from tests.support.runtimes import ALICE, close, end_of, runs_of, stored, turn
from tests.support.waits import wait_until
from yao_agent.events import Event
from yao_agent.hooks.host import MAX_CALLS_PER_RUN, MAX_SEND_BYTES, MAX_SENT_PER_RUN
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store.chats import MEMORY_KEY_MAX
from yao_agent.store.schema import memory
from yao_agent.testing import Reply, ScriptedModel

ATTACKED = "name: Hooked\nhook: hooks/h.js\nhook_policy: {timeout_ms: 1000, memory_mb: 32}\n"
BESIDE = {
    "hooks/beside.js": """
        async function Create(ctx) {
          await ctx.memory.set("seen", (await ctx.memory.get("seen") || 0) + 1);
          const end = Date.now() + 300;
          while (Date.now() < end) {}
          return null;
        }
    """,
    "assistants/beside/assistant.yml": "name: Beside\nhook: hooks/beside.js\nconnector: demo.echo\n",
}


async def with_metadata(rt: Runtime, text: str, chat_id: str, metadata: dict[str, str]) -> list[Event]:
    request = RunRequest("hooked", ALICE, [{"role": "user", "content": text}], chat_id=chat_id, metadata=metadata)
    return [event async for event in runs_of(rt).stream(request)]


async def test_the_reported_attack_fails_its_own_run_and_nothing_else(make: Make, fake: ScriptedModel) -> None:
    """`new Array(width).fill(0)` with a width the client chose used to end the whole server."""
    rt = make("""
        function Create(ctx) {
          return {metadata: {filled: new Array(Number(ctx.metadata.width)).fill(0).length}};
        }
    """, ATTACKED, BESIDE)  # fmt: skip
    attacked, beside = await asyncio.gather(
        with_metadata(rt, "fill", "c1", {"width": "268435456"}), turn(rt, "hi", chat_id="c2", assistant="beside")
    )
    end = end_of(attacked)
    assert (end.status, end.reason, end.error and end.error["file"]) == ("failed", "hook_error", "hooks/h.js")
    message = end.error["message"]
    assert message == "hook timed out after 1000 ms" or message.startswith("the hook ran out of memory or was stopped")
    assert end_of(beside).status == "completed"
    assert await rt.store.memory_get(ALICE, "c2", "seen") == 1
    await wait_until(lambda: not running_workers())  # nothing of the hook still runs, here or in a worker
    fake.enqueue(Reply(text="a small width is fine"))
    assert end_of(await with_metadata(rt, "fill", "c3", {"width": "1000"})).status == "completed"
    await close(rt)


async def test_a_message_or_memory_value_too_large_is_an_error_the_hook_can_catch(
    make: Make, fake: ScriptedModel
) -> None:
    rt = make("""
        async function Create(ctx) {
          const caught = [];
          const attempts = [() => ctx.send("x".repeat(300 * 1024)), () => ctx.memory.set("k", "y".repeat(70000))];
          for (const attempt of attempts) {
            try { await attempt(); caught.push("accepted"); } catch (e) { caught.push(e.message); }
          }
          await ctx.send("a short one");
          await ctx.memory.set("k", "small");
          return {metadata: {caught}};
        }
        function Next(ctx) { return {data: ctx.metadata.caught}; }
    """)  # fmt: skip
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.next == [
        f"ctx.send: a message may be at most 256 KB as JSON; this one is {(300 * 1024 + 2) / 1024:.0f} KB",
        "ctx.memory.set: a value may be at most 64 KB as JSON; this one is 68 KB",
    ]
    assert [row[1] for row in await stored(rt)] == ["hi", "a short one", "ok"]
    assert await rt.store.memory_get(ALICE, "c1", "k") == "small"
    await close(rt)


async def test_what_a_run_may_send_in_all_is_bounded(make: Make, fake: ScriptedModel) -> None:
    """100 sends of 5 MB made a 525 MB response and 525 MB in the database; a run now stops at 2 MB."""
    rt = make("""
        async function Create(ctx) {
          for (let i = 0; i < 100; i++) await ctx.send("z".repeat(250 * 1024));
        }
    """)  # fmt: skip
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.reason, end.error and end.error["message"]) == (
        "hook_error",
        f"the hooks of this run sent more than {MAX_SENT_PER_RUN // 1024 // 1024} MB with ctx.send "
        f"(the limit per run is {MAX_SENT_PER_RUN // 1024 // 1024} MB)",
    )
    sent = [row[1] for row in await stored(rt) if row[0] == "assistant"]
    assert len(sent) == MAX_SENT_PER_RUN // (250 * 1024 + 2) and sum(map(len, sent)) <= MAX_SENT_PER_RUN
    assert MAX_SEND_BYTES == 256 * 1024
    await close(rt)


CALLER = {
    "assistants/middle/assistant.yml": "name: Middle\nhook: hooks/middle.js\nconnector: demo.echo\n",
    "hooks/middle.js": "async function Create(ctx, messages) { await ctx.call('echo', messages); return null; }\n",
    "assistants/echo/assistant.yml": "name: Echo\nconnector: demo.echo\n",
}


async def test_ctx_calls_are_bounded_per_run_children_included(make: Make, fake: ScriptedModel) -> None:
    """Each hook call stays under its own limit; the run's hooks together do not."""
    rt = make("""
        async function Create(ctx, messages) {
          for (let i = 0; i < 30; i++) await ctx.call("middle", messages);
          return null;
        }
    """, more=CALLER)  # fmt: skip
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.reason == "hook_error"
    assert f"made more than {MAX_CALLS_PER_RUN} ctx.call calls (the limit per run is {MAX_CALLS_PER_RUN})" in (
        end.error["message"] if end.error else ""
    )
    await close(rt)


async def test_ctx_log_writes_one_escaped_line(
    make: Make, fake: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    rt = make("""
        async function Create(ctx) {
          await ctx.log("warn", "line one\\nFAKE ENTRY\\u001b[31m red\\u0000 nul\\r\\t\\u202e");
          await ctx.log("info", "w".repeat(5000));
          return null;
        }
    """)  # fmt: skip
    fake.enqueue(Reply(text="ok"))
    with caplog.at_level(logging.INFO, logger="yao_agent.hook"):
        await turn(rt, "hi", assistant="hooked")
    lines = [record.getMessage() for record in caplog.records if record.name == "yao_agent.hook"]
    assert lines[0] == "hooks/h.js (hooked): line one\\nFAKE ENTRY\\x1b[31m red\\x00 nul\\r\\t\\u202e"
    assert lines[1] == "hooks/h.js (hooked): " + "w" * 2000 + "… (3000 more characters)"
    await close(rt)


async def test_memory_keys_the_store_cannot_hold_are_a_clear_error_on_every_database(
    make: Make, fake: ScriptedModel
) -> None:
    """PostgreSQL failed on these with an internal error and a traceback; SQLite took them."""
    rt = make("""
        async function Create(ctx) {
          const out = {};
          for (const [name, key] of [["long", "k".repeat(257)], ["nul", "a\\u0000b"], ["newline", "a\\nb"],
                                     ["surrogate", "x\\ud800"], ["longest", "k".repeat(256)], ["unicode", "clé ☃"]]) {
            try { await ctx.memory.set(key, name); out[name] = await ctx.memory.get(key); }
            catch (e) { out[name] = e.message; }
          }
          try { await ctx.memory.get("g".repeat(300)); } catch (e) { out.get = e.message; }
          return {metadata: out};
        }
        function Next(ctx) { return {data: ctx.metadata}; }
    """)  # fmt: skip
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.status == "completed"
    key_type = memory.c.key.type
    assert isinstance(key_type, String) and key_type.length == MEMORY_KEY_MAX == 256
    assert end.next == {
        "long": "a memory key may have at most 256 characters; this one has 257",
        "nul": "a memory key may not contain U+0000 (a key is printable text)",
        "newline": "a memory key may not contain U+000A (a key is printable text)",
        "surrogate": "a memory key may not contain U+D800 (a key is printable text)",
        "longest": "longest",
        "unicode": "unicode",
        "get": "a memory key may have at most 256 characters; this one has 300",
    }
    await close(rt)
