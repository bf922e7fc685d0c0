"""Every `llm` step is stored with why it was made (CONTRACT §4 "Transitions")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.support.runtimes import ALICE, close, end_of, runs_of, turn
from tests.support.tools import call, in_process, tooled
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.schema import steps
from yao_agent.testing import Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


async def transitions(tooled_rt: Runtime, run_id: str) -> list[str | None]:
    store = tooled_rt.store
    assert isinstance(store, SqlStore)
    query = select(steps.c.transition).where(steps.c.run_id == run_id, steps.c.type == "llm").order_by(steps.c.seq)
    return [row[0] for row in await store.db.read_tx(lambda tx: tx.all(query))]


async def test_first_tool_retry_tool_results_and_last_word(tooled_rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(
        Reply(tool_calls=(call("testing__add", {"a": "x", "b": 1}, "c1"),)),  # wrong: corrected next
        Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "c2"),)),
        *[Reply(tool_calls=(call("testing__echo", {"text": f"{n}"}, f"e{n}"),)) for n in range(3)],
        Reply(text="Done."),
    )
    end = end_of(await turn(tooled_rt, "go", assistant="tooled"))
    assert end.status == "completed"
    assert await transitions(tooled_rt, end.run_id) == [
        "first", "tool_retry", "tool_results", "tool_results", "tool_results", "last_word"]  # fmt: skip


async def test_a_next_hooks_continue_and_an_appended_message(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    hook = """\
        function Next(ctx, payload) {
          if (payload.completion.content === "first") return {continue: {messages: [{role: "user", content: "more"}]}};
          return null;
        }
    """
    assistant = "name: Tooled\nhook: hooks/next.js\nmcp: {servers: [testing]}\n"
    tooled_rt = in_process(tooled(tmp_path / "app", store, fake, assistant=assistant,
                           more={"hooks/next.js": textwrap.dedent(hook)}))  # fmt: skip
    fake.enqueue(Reply(text="first"), Reply(text="second", delay_s=0.05, chunk_size=1), Reply(text="third"))
    try:
        handle = await runs_of(tooled_rt).start(
            RunRequest("tooled", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1")
        )
        async for event in handle.events():
            if event.type == "message_delta" and getattr(event, "text", "") == "s":
                await runs_of(tooled_rt).append(handle.state.identity, "c1", [{"role": "user", "content": "and also"}])
        assert await transitions(tooled_rt, handle.run_id) == ["first", "hook_continue", "appended"]
    finally:
        await close(tooled_rt)
