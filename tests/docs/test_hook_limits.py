"""The hooks page (tutorial/first-hook.md) says the limits the code has."""

from __future__ import annotations

from tests.support.docs import text
from yao_agent.hooks import host, procs, worker
from yao_agent.store.chats import MEMORY_KEY_MAX


def test_the_hooks_page_says_the_hook_limits_as_they_are() -> None:
    section = " ".join(text("tutorial/first-hook.md").split())
    expected = [
        f"| `ctx` calls in one hook call | {host.MAX_CALLS:,}, of which {host.MAX_EFFECTS} `ctx.send`/`ctx.call` |",
        f"| one `ctx.send` message | {host.MAX_SEND_BYTES // 1024} KB as JSON |",
        f"| one `ctx.memory` value | {host.MAX_MEMORY_VALUE_BYTES // 1024} KB as JSON |",
        f"| one `ctx.memory` key | {MEMORY_KEY_MAX} characters,",
        f"included | {host.MAX_SENT_PER_RUN // 1024 // 1024} MB in all |",
        f"included | {host.MAX_CALLS_PER_RUN} | `hook_error` |",
        f"| {host.MAX_DEPTH} levels |",
        f"| {worker.MAX_ANSWER_BYTES // 1024 // 1024} MB |",
        f"| {host.MAX_LOG_CHARS:,} characters (the rest cut);",
        f"outlasts its budget by {procs.GRACE_S:g} s",
        f"plus twice the call's `memory_mb` plus {worker.DATA_SLACK_MB} MB",
        f"keeps at most {procs.CONTEXTS_PER_WORKER} warm contexts",
    ]
    assert worker.DATA_FACTOR == 2
    assert [line for line in expected if line not in section] == []
