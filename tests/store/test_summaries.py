"""Summaries in the store: every message stays stored and listed; a run loads the latest summary and the
messages after the last one it covers (CONTRACT §4 item 5, §6)."""
# pyright: reportTypedDictNotRequiredAccess=false
# (an answer's optional keys are read as present: a missing one is a KeyError, which fails the test)

from __future__ import annotations

import pytest

from tests.support.stores import ALICE, a_run, finished
from yao_agent.messages import SUMMARY_HEADING, ChatMessage
from yao_agent.store import SqlStore

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


def user(n: int, run_id: str) -> ChatMessage:
    return ChatMessage(f"u{n}", "user", f"question {n}", run_id=run_id)


def answer(n: int, run_id: str) -> ChatMessage:
    return ChatMessage(f"a{n}", "assistant", f"answer {n}", run_id=run_id)


async def a_chat(store: SqlStore) -> None:
    """Turns 1-3; then, in turn 4's run, a summary of turns 1-2 (turn 3 kept whole); then turns 5-6."""
    for n in (1, 2, 3):
        run = a_run(n)
        await store.start_run(ALICE, run, [user(n, run.id)])
        await store.finish_run(ALICE, finished(run), [answer(n, run.id)], [])
    run = a_run(4)
    await store.start_run(ALICE, run, [user(4, run.id)])
    summary = ChatMessage("s1", "summary", "turns 1 and 2", run_id=run.id, summarises=("u1", "a2"))
    await store.finish_run(ALICE, finished(run), [summary, answer(4, run.id)], [])
    for n in (5, 6):
        run = a_run(n)
        await store.start_run(ALICE, run, [user(n, run.id)])
        await store.finish_run(ALICE, finished(run), [answer(n, run.id)], [])


async def test_history_lists_every_message_and_the_summary_where_it_was_made(store: SqlStore) -> None:
    await a_chat(store)
    listed = await store.history(ALICE, "c1")
    assert [m.id for m in listed] == ["u1", "a1", "u2", "a2", "u3", "a3", "u4", "s1", "a4", "u5", "a5", "u6", "a6"]
    summary = listed[7]
    assert summary.summarises == ("u1", "a2")
    shown = summary.to_api()
    assert (shown["role"], shown["content"], shown.get("summarises")) == ("summary", "turns 1 and 2", ["u1", "a2"])
    assert "summarises" not in listed[0].to_api()


async def test_a_run_loads_the_latest_summary_and_what_follows_what_it_covers(store: SqlStore) -> None:
    await a_chat(store)
    run = a_run(7)
    loaded = await store.load_and_start(ALICE, run, 20, [user(7, run.id)])
    assert [m.id for m in loaded.history] == ["s1", "u3", "a3", "u4", "a4", "u5", "a5", "u6", "a6"]
    assert loaded.sent[0] == {
        "role": "system",
        "content": SUMMARY_HEADING + "turns 1 and 2",
    }  # providers know no `summary`
    assert [m["content"] for m in loaded.sent[1:3]] == ["question 3", "answer 3"]


async def test_history_size_counts_the_messages_after_the_summary(store: SqlStore) -> None:
    await a_chat(store)
    run = a_run(7)
    loaded = await store.load_and_start(ALICE, run, 3, [user(7, run.id)])
    assert [m.id for m in loaded.history] == ["s1", "a5", "u6", "a6"]


async def test_the_latest_of_several_summaries_is_loaded(store: SqlStore) -> None:
    await a_chat(store)
    run = a_run(7)
    await store.start_run(ALICE, run, [user(7, run.id)])
    later = ChatMessage("s2", "summary", "turns 1 to 5", run_id=run.id, summarises=("u1", "a5"))
    await store.finish_run(ALICE, finished(run), [later, answer(7, run.id)], [])
    loaded = await store.load_and_start(ALICE, a_run(8), 20, [])
    assert [m.id for m in loaded.history] == ["s2", "u6", "a6", "u7", "a7"]
