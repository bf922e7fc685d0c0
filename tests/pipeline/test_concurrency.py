"""One chat, many requests: admission, cancel with its watermark, append, and a reader that stops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.pipeline.conftest import make_runtime
from tests.pipeline.helpers import ALICE, stored
from yao_agent.events import Event, MessageDelta, StreamEnd
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunHandle, RunRequest, Runtime, start
from yao_agent.pipeline.admission import ChatBusy, NoActiveRun
from yao_agent.store import SqlStore
from yao_agent.store.records import RunRecord, StepRecord
from yao_agent.testing import FakeProvider, Reply

SLOW = Reply(text="s" * 200, chunk_size=2, delay_s=0.02)


async def begin(rt: Runtime, text: str, chat_id: str = "c1", on_busy: str | None = None) -> RunHandle:
    request = RunRequest("chat", ALICE, [{"role": "user", "content": text}], chat_id=chat_id, on_busy=on_busy)  # type: ignore[arg-type]
    return await start(rt, request)


class Reader:
    """One reader of a run's events (leaving a run's event stream early would cancel the run)."""

    def __init__(self, handle: RunHandle) -> None:
        self.stream = handle.events()
        self.events: list[Event] = []

    async def until_text(self) -> Reader:
        """Read until the run streams its first piece of text (the model is mid-reply)."""
        async for event in self.stream:
            self.events.append(event)
            if isinstance(event, MessageDelta):
                break
        return self

    async def rest(self) -> list[Event]:
        self.events += [e async for e in self.stream]
        return self.events


async def drain(handle: RunHandle) -> list[Event]:
    return await Reader(handle).rest()


def ends(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(e.status, e.reason) for e in events if isinstance(e, StreamEnd)]


async def test_many_requests_on_one_chat_each_end_once_in_one_order(rt: Runtime, fake: FakeProvider) -> None:
    for _ in range(8):
        fake.enqueue("echo")
    handles = [await begin(rt, f"question {n}") for n in range(8)]
    results = await asyncio.gather(*(drain(h) for h in handles))
    assert [ends(events) for events in results] == [[("completed", "completed")]] * 8
    rows = await stored(rt)
    pairs = [
        [("user", f"question {n}", "completed"), ("assistant", f"echo: question {n}", "completed")] for n in range(8)
    ]
    assert rows == [row for pair in pairs for row in pair]


async def test_cancel_reaches_the_active_run_and_everything_queued_but_not_what_comes_after(
    rt: Runtime, fake: FakeProvider
) -> None:
    fake.enqueue(SLOW, Reply(text="after the cancel"))
    active, queued = await begin(rt, "first"), await begin(rt, "second")
    reading = await Reader(active).until_text()
    assert await rt.cancel(ALICE, "c1") == 2
    later = await begin(rt, "third")
    first, second, third = await asyncio.gather(reading.rest(), drain(queued), drain(later))
    assert ends(first) == [("cancelled", "cancelled")]
    assert ends(second) == [("cancelled", "cancelled")]
    assert ends(third) == [("completed", "completed")]
    rows = await stored(rt)
    assert [r[0] for r in rows] == ["user", "assistant", "user", "user", "assistant"]
    assert rows[1][2] == "incomplete" and rows[2][1] == "second" and rows[4][1] == "after the cancel"
    assert len(fake.requests) == 2  # the queued request never reached the model


async def test_cancel_before_any_request_poisons_nothing(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(text="one"), Reply(text="two"))
    assert ends(await drain(await begin(rt, "hello"))) == [("completed", "completed")]
    assert await rt.cancel(ALICE, "c1") == 0  # nothing running: nothing to cancel
    assert ends(await drain(await begin(rt, "again"))) == [("completed", "completed")]


async def test_cancel_then_at_once_a_new_request_the_new_one_survives(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(SLOW, Reply(text="fresh"))
    reading = await Reader(await begin(rt, "long")).until_text()
    await rt.cancel(ALICE, "c1")
    fresh = await begin(rt, "new")  # accepted after the cancel: untouched by it
    assert ends(await reading.rest()) == [("cancelled", "cancelled")]
    assert ends(await drain(fresh)) == [("completed", "completed")]


async def test_a_request_cancelled_before_its_task_started_still_ends_and_stores(
    rt: Runtime, fake: FakeProvider
) -> None:
    handle = await begin(rt, "too late")
    handle.cancel()  # before the run's task ever ran
    assert ends(await drain(handle)) == [("cancelled", "cancelled")]
    assert await stored(rt) == [("user", "too late", "completed")]
    assert fake.requests == []


async def test_reject_and_interrupt(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(SLOW, Reply(text="interrupter"))
    reading = await Reader(await begin(rt, "busy")).until_text()
    with pytest.raises(ChatBusy, match="chat 'c1' is busy"):
        await begin(rt, "refused", on_busy="reject")
    interrupter = await begin(rt, "me first", on_busy="interrupt")
    assert ends(await reading.rest()) == [("cancelled", "cancelled")]
    assert ends(await drain(interrupter)) == [("completed", "completed")]
    assert "refused" not in [r[1] for r in await stored(rt)]


async def test_append_during_streaming_reaches_the_next_model_call(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(SLOW, Reply(text="Noted the addition."))
    active = await begin(rt, "write a poem")
    reading = await Reader(active).until_text()
    run_id = rt.append(ALICE, "c1", [{"role": "user", "content": "make it rhyme"}])
    assert run_id == active.run_id
    assert ends(await reading.rest()) == [("completed", "completed")]
    assert fake.requests[1].messages[-2:] == [
        {"role": "assistant", "content": "s" * 200},
        {"role": "user", "content": "make it rhyme"},
    ]
    assert [r[1] for r in await stored(rt)] == ["write a poem", "s" * 200, "make it rhyme", "Noted the addition."]


async def test_append_without_an_active_run_is_refused(rt: Runtime, fake: FakeProvider) -> None:
    with pytest.raises(NoActiveRun):
        rt.append(ALICE, "c1", [{"role": "user", "content": "anyone?"}])
    fake.enqueue(SLOW)
    active = await begin(rt, "busy")
    reading = await Reader(active).until_text()
    with pytest.raises(NoActiveRun):  # another tenant cannot append to it
        rt.append(Identity("mallory"), "c1", [{"role": "user", "content": "hi"}])
    active.cancel()
    await reading.rest()


async def test_a_reader_that_stops_reading_does_not_stop_the_run(rt: Runtime, fake: FakeProvider) -> None:
    fake.enqueue(Reply(text="x" * 3000, chunk_size=1))
    handle = await begin(rt, "go on without me")
    reading = await Reader(handle).until_text()  # ...and then reads nothing for a while
    await asyncio.wait_for(asyncio.shield(handle.task), 30)
    assert (await stored(rt))[1] == ("assistant", "x" * 3000, "completed")
    waiting = await reading.rest()  # what waited meanwhile: bounded (text merged), stream_end kept
    assert len(waiting) < 600 and ends(waiting) == [("completed", "completed")]
    assert "".join(e.text or "" for e in waiting if isinstance(e, MessageDelta)) == "x" * 3000


class SlowFlush(SqlStore):
    """A store whose final write takes a while, so a cancel can arrive in the middle of it."""

    flushing = asyncio.Event()

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord]
    ) -> None:
        type(self).flushing.set()
        await asyncio.sleep(0.3)
        await super().finish_run(identity, run, new, done)


async def test_a_cancel_during_the_flush_changes_nothing(tmp_path: Path, store: SqlStore, fake: FakeProvider) -> None:
    from tests.pipeline.conftest import app_files

    rt = make_runtime(tmp_path / "app", SlowFlush(store.db), app_files(fake.base_url))
    SlowFlush.flushing = asyncio.Event()
    fake.enqueue(Reply(text="done"))
    handle = await begin(rt, "hi")
    reading = asyncio.create_task(drain(handle))
    await asyncio.wait_for(SlowFlush.flushing.wait(), 10)
    handle.cancel()
    assert ends(await reading) == [("completed", "completed")]
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "done", "completed")]
    await rt.engines.aclose()
