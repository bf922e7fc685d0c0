"""The store on its own: what a run writes comes back as it was, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.support.stores import ALICE, a_run, finished
from yao_agent.errors import NotFound, PermissionDenied
from yao_agent.identity import OPERATOR, Identity
from yao_agent.messages import ChatMessage, Role, ToolCall
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.records import RunRecord, StepRecord
from yao_agent.store.step_inputs import ModelCall

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


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
    step = StepRecord("s1", run.id, 1, "llm", "failed", 101.0, input=ModelCall([], {}, ()), error={"message": "x"})
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


def said(role: Role, text: str, n: int, run_id: str) -> ChatMessage:
    return ChatMessage(f"{run_id}-m{n}", role, text, run_id=run_id)


async def test_the_write_ahead_stores_only_what_does_not_repeat_the_history(store: SqlStore) -> None:
    """History and write-ahead are one transaction; the store itself drops the input's overlap with the
    history it read there, so no other run's messages can land in between."""
    first = a_run()
    await store.start_run(ALICE, first, [said("user", "hi", 1, "r1")])
    await store.finish_run(ALICE, finished(first), [said("assistant", "hello", 2, "r1")], [])

    resent = [said("user", "hi", 1, "r2"), said("assistant", "hello", 2, "r2"), said("user", "how are you?", 3, "r2")]
    loaded = await store.load_and_start(ALICE, a_run(2), 10, resent)
    assert [m.id for m in loaded.history] == ["r1-m1", "r1-m2"]
    assert loaded.sent == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert [m.id for m in loaded.written] == ["r2-m3"]  # the two resent ones were not stored again
    assert [(m.id, m.seq) for m in await store.history(ALICE, "c1")] == [("r1-m1", 1), ("r1-m2", 2), ("r2-m3", 3)]
    chat = await store.check_chat(ALICE, "c1")
    assert chat is not None and (chat.message_count, chat.last_run_id, chat.last_status) == (3, "r2", "running")

    fresh = await store.load_and_start(ALICE, a_run(3, chat_id="c2"), 10, [said("user", "hi", 1, "r3")])
    assert (fresh.history, fresh.sent, [m.id for m in fresh.written]) == ([], [], ["r3-m1"])  # a new chat


async def test_a_resumed_tool_result_takes_its_predecessors_place(store: SqlStore) -> None:
    run = a_run()
    await store.start_run(ALICE, run, [said("user", "weather?", 1, "r1")])
    cut = ChatMessage("t1", "tool", "cancelled", run_id="r1", tool_call_id="call_1")
    await store.finish_run(ALICE, finished(run), [*produced(run)[:1], cut], [])
    resumed = a_run(2)
    await store.start_run(ALICE, resumed, [])
    again = ChatMessage("t1", "tool", "Lima: 25°C", run_id="r2", tool_call_id="call_1", replaces=True, hidden=True)
    await store.finish_run(ALICE, finished(resumed), [again, said("assistant", "sunny", 9, "r2")], [])
    history = await store.history(ALICE, "c1")
    assert [(m.id, m.seq, m.run_id, m.content) for m in history] == [
        ("r1-m1", 1, "r1", "weather?"), ("m2", 2, "r1", None), ("t1", 3, "r2", "Lima: 25°C"),
        ("r2-m9", 4, "r2", "sunny"),
    ]  # fmt: skip
    chat = await store.check_chat(ALICE, "c1")
    assert history[2].hidden and chat is not None and chat.message_count == 4


@pytest.mark.parametrize("value", [{"n": 1, "list": [1, "two", None]}, [1, 2], "text", 3.5, True, None])
async def test_json_values_come_back_as_they_went_in(store: SqlStore, value: object) -> None:
    run = a_run()
    await store.start_run(ALICE, run, [said("user", "hi", 1, "r1")])
    await store.memory_set(ALICE, "c1", "k", value)
    assert await store.memory_get(ALICE, "c1", "k") == value
    await store.set_role(("team", "acme"), "light", ["a.one", "b.two"])
    await store.set_role(("team", "acme"), "light", ["c.three"])  # replaced, not added
    assert await store.get_role(("team", "acme"), "light") == ("c.three",)
    assert [s.connectors for s in await store.list_roles(("team", "acme"))] == [("c.three",)]


async def test_a_run_left_running_by_a_dead_process_becomes_resumable(store: SqlStore) -> None:
    from yao_agent.identity import OPERATOR

    store.clock = lambda: 200.0  # the run started at 101
    run = a_run()
    await store.start_run(ALICE, run, [said("user", "hi", 1, "r1")])
    assert await store.recover_interrupted(OPERATOR, lambda owner, _beat: owner != "test") == []
    assert await store.recover_interrupted(OPERATOR, lambda owner, _beat: owner == "test") == ["r1"]
    point = await store.resume_point(ALICE, "c1")
    assert point is not None and (point.run.status, point.run.reason) == ("interrupted", "internal_error")
    assert (point.run.ended_at, point.run.duration_ms) == (200.0, 99_000)
    why = "the process running this run stopped before it finished (killed or crashed)"
    assert [(s.type, s.status, s.error) for s in point.steps] == [("llm", "interrupted", {"message": why})]
    chat = await store.check_chat(ALICE, "c1")
    assert chat is not None and chat.last_status == "interrupted"


async def test_a_replay_reads_completed_turns_with_the_chat_before_them_and_the_servers_last_listing(
    store: SqlStore,
) -> None:
    first, second, third = a_run(1), a_run(2), a_run(3, chat_id="c2")
    await store.start_run(ALICE, first, [ChatMessage("m1", "user", "weather in Lima?", run_id=first.id)])
    await store.finish_run(ALICE, finished(first), produced(first), [])
    await store.start_run(ALICE, second, [ChatMessage("m5", "user", "and Oslo?", run_id=second.id)])
    await store.finish_run(ALICE, finished(second), [ChatMessage("m6", "assistant", "cold", run_id=second.id)], [])
    await store.start_run(ALICE, third, [ChatMessage("m7", "user", "hi", run_id=third.id)])  # still running

    with pytest.raises(PermissionDenied):
        await store.stored_turns(ALICE)  # type: ignore[arg-type]  # a tenant's identity reaches no one's turns
    turns = await store.stored_turns(OPERATOR, team="acme")
    assert [t.run.id for t in turns] == ["r2", "r1"]  # completed ones only, the newest first
    assert [m.id for m in turns[0].before] == ["m1", "m2", "m3", "m4"] and [m.id for m in turns[0].turn] == ["m5", "m6"]
    assert turns[1].before == [] and [m.id for m in turns[1].turn] == ["m1", "m2", "m3", "m4"]
    assert await store.stored_turns(OPERATOR, team="other") == []
    assert [t.run.id for t in await store.stored_turns(OPERATOR, since=101.5, limit=5)] == ["r2"]
    assert [t.run.id for t in await store.stored_turns(OPERATOR, assistant="a", limit=1)] == ["r2"]

    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    await store.save_tool_catalog("weather", [{"tool": "forecast", "description": "old", "parameters": {}}])
    await store.save_tool_catalog(
        "weather", [{"tool": "forecast", "description": "The forecast", "parameters": schema}]
    )
    assert await store.tool_catalogs() == {
        "weather": [{"tool": "forecast", "description": "The forecast", "parameters": schema}]
    }  # the last listing wins
