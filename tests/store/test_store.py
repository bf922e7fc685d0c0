"""The store on its own: what a run writes comes back as it was, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from yao_agent.errors import NotFound
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.records import RunRecord, StepRecord

ALICE = Identity("alice", "acme")


def a_run(n: int = 1, chat_id: str = "c1") -> RunRecord:
    return RunRecord(id=f"r{n}", chat_id=chat_id, user_id=ALICE.user_id, team_id=ALICE.team_id, assistant_id="a",
                     trace_id="t", owner="test", started_at=100.0 + n)  # fmt: skip


def finished(run: RunRecord) -> RunRecord:
    run.status, run.reason, run.ended_at, run.duration_ms = "completed", "completed", run.started_at + 1, 1000
    run.usage, run.next = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}, {"route": "light", "n": 2}
    return run


def produced(run: RunRecord) -> list[ChatMessage]:
    call = ToolCall("call_1", "weather__forecast", '{"city": "Lima"}')
    return [
        ChatMessage("m2", "assistant", None, run_id=run.id, tool_calls=(call,), reasoning="think\x00ing"),
        ChatMessage("m3", "tool", "Lima: 25°C", run_id=run.id, tool_call_id="call_1"),
        ChatMessage("m4", "assistant", [{"type": "text", "text": "sunny"}], run_id=run.id, thread_id="t1", hidden=True),
    ]


async def test_a_run_comes_back_as_it_was_written(store: SqlStore) -> None:
    run = a_run()
    await store.start_run(ALICE, run, [ChatMessage("m1", "user", "weather in\x00 Lima?", run_id=run.id)])
    step = StepRecord("s1", run.id, 1, "llm", "failed", 101.0, input={"messages": []}, error={"message": "x"})
    await store.finish_run(ALICE, finished(run), produced(run), [step])

    history = await store.history(ALICE, "c1")
    assert [(m.id, m.seq, m.role) for m in history] == [("m1", 1, "user"), ("m2", 2, "assistant"),
                                                       ("m3", 3, "tool"), ("m4", 4, "assistant")]  # fmt: skip
    assert history[0].content == "weather in\x00 Lima?"  # kept whole in the message itself
    assert history[1].tool_calls == (ToolCall("call_1", "weather__forecast", '{"city": "Lima"}'),)
    assert history[1].content is None and history[1].reasoning == "thinking"  # NUL: not storable as plain text
    assert history[2].tool_call_id == "call_1" and history[2].content == "Lima: 25°C"
    assert history[3].content == [{"type": "text", "text": "sunny"}] and history[3].thread_id == "t1"
    assert history[3].hidden and not history[2].hidden
    assert [m.id for m in await store.history(ALICE, "c1", limit=2)] == ["m3", "m4"]

    chat = await store.check_chat(ALICE, "c1")
    assert chat is not None and chat.title == "weather in Lima?" and chat.message_count == 4
    assert chat.last_status == "completed" and chat.team_id == "acme"
    stored = (await store.runs_of(ALICE, "c1"))[0]
    assert (stored.status, stored.usage["total_tokens"], stored.next) == ("completed", 8, {"route": "light", "n": 2})
    point = await store.resume_point(ALICE, "c1")
    assert point is None  # the run completed, so nothing is left to resume


async def test_a_chat_is_only_its_owners(store: SqlStore) -> None:
    run = a_run()
    await store.start_run(ALICE, run, [ChatMessage("m1", "user", "hi", run_id=run.id)])
    for other in (Identity("alice"), Identity("alice", "other"), Identity("bob", "acme")):
        with pytest.raises(NotFound):
            await store.check_chat(other, "c1")
        with pytest.raises(NotFound):
            await store.start_run(other, a_run(2), [ChatMessage("x", "user", "mine now", run_id="r2")])
    assert [m.content for m in await store.history(ALICE, "c1")] == ["hi"]


async def test_a_second_process_writing_delays_a_write_without_stalling_the_loop(tmp_path: Path) -> None:
    """Another process holding SQLite's write lock: our write waits for it, while the process goes on serving."""
    store = SqlStore(await open_engine(store_url("sqlite:///agent.db", tmp_path)))
    try:
        other = sqlite3.connect(tmp_path / "agent.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # what a `yao-agent chat` in another terminal holds while it writes
        run = a_run()
        write = asyncio.create_task(store.start_run(ALICE, run, [ChatMessage("m1", "user", "hi", run_id=run.id)]))
        ticks = 0
        while ticks < 20:  # the event loop keeps running other work while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert not write.done()
        other.execute("COMMIT")
        other.close()
        await asyncio.wait_for(write, 10)
        assert [m.content for m in await store.history(ALICE, "c1")] == ["hi"]
    finally:
        await store.aclose()
