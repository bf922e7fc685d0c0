"""One chat, many requests: admission, cancel with its watermark, append, and a reader that stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import select

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import ALICE, app_files, make_runtime, runs_of, stored
from yao_agent.connectors import RetryPolicy
from yao_agent.errors import ChatBusy, NoActiveRun, NotFound
from yao_agent.events import Event, FallbackEvent, MessageDelta, MessageEnd, StreamEnd
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunHandle, RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.leases import PgLease
from yao_agent.store.records import Approval, LeaseRelease, RunRecord, StepRecord
from yao_agent.store.schema import chat_leases
from yao_agent.testing import Reply, ScriptedModel, ToolCall
from yao_agent.tools import ToolManager
from yao_agent.vocabulary import OnBusy

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

SLOW = Reply(text="s" * 200, chunk_size=2, delay_s=0.02)
# The store on PostgreSQL only: for the runtime that holds its chats with leases, as servers sharing
# one database do.
ON_POSTGRES = pytest.mark.parametrize(
    "store_raw_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@pytest.fixture
async def leased(rt: Runtime) -> AsyncIterator[Runtime]:
    await runs_of(rt).process.share_chats()
    lease = runs_of(rt).process.admission.lease
    assert isinstance(lease, PgLease)
    try:
        yield rt
    finally:
        await lease.aclose()


async def begin(rt: Runtime, text: str, chat_id: str = "c1", on_busy: OnBusy | None = None) -> RunHandle:
    request = RunRequest("chat", ALICE, [{"role": "user", "content": text}], chat_id=chat_id, on_busy=on_busy)
    return await runs_of(rt).start(request)


async def until(condition: Callable[[], object], timeout_s: float = 10) -> None:
    """Until a condition that no event announces holds (a file a tool wrote, a lease's state)."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout_s)


@asynccontextmanager
async def pg_session(rt: Runtime, *, autocommit: bool = False) -> AsyncGenerator[psycopg.AsyncConnection]:
    """A connection of our own to the runtime's PostgreSQL database (another process, in effect)."""
    dsn = rt.store.db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit) as conn:
        yield conn


async def blocked_on_a_lock(watcher: psycopg.AsyncConnection, statement: str) -> None:
    """Until a statement starting with `statement` waits for a row lock (ours)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE %s"
    )

    async def poll() -> None:
        while True:
            row = await (await watcher.execute(query, (statement + "%",))).fetchone()  # pyright: ignore[reportArgumentType]
            if row is not None and row[0]:
                return
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), 10)


async def leases(rt: Runtime) -> list[tuple[str, str]]:
    query = select(chat_leases.c.chat_id, chat_leases.c.owner)
    return [(r[0], r[1]) for r in await rt.store.db.read_tx(lambda tx: tx.all(query))]


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


async def test_many_requests_on_one_chat_each_end_once_in_one_order(rt: Runtime, fake: ScriptedModel) -> None:
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
    rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(SLOW, Reply(text="after the cancel"))
    active, queued = await begin(rt, "first"), await begin(rt, "second")
    reading = await Reader(active).until_text()
    assert await runs_of(rt).cancel(ALICE, "c1") == 2
    later = await begin(rt, "third")
    first, second, third = await asyncio.gather(reading.rest(), drain(queued), drain(later))
    assert ends(first) == [("cancelled", "cancelled")]
    assert ends(second) == [("cancelled", "cancelled")]
    assert ends(third) == [("completed", "completed")]
    rows = await stored(rt)
    assert [r[0] for r in rows] == ["user", "assistant", "user", "user", "assistant"]
    assert rows[1][2] == "incomplete" and rows[2][1] == "second" and rows[4][1] == "after the cancel"
    assert len(fake.requests) == 2  # the queued request never reached the model


async def test_cancel_before_any_request_poisons_nothing(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="one"), Reply(text="two"))
    assert ends(await drain(await begin(rt, "hello"))) == [("completed", "completed")]
    assert await runs_of(rt).cancel(ALICE, "c1") == 0  # nothing running: nothing to cancel
    assert ends(await drain(await begin(rt, "again"))) == [("completed", "completed")]


async def test_cancel_then_at_once_a_new_request_the_new_one_survives(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW, Reply(text="fresh"))
    reading = await Reader(await begin(rt, "long")).until_text()
    await runs_of(rt).cancel(ALICE, "c1")
    fresh = await begin(rt, "new")  # accepted after the cancel: untouched by it
    assert ends(await reading.rest()) == [("cancelled", "cancelled")]
    assert ends(await drain(fresh)) == [("completed", "completed")]


async def test_a_request_cancelled_before_its_task_started_still_ends_and_stores(
    rt: Runtime, fake: ScriptedModel
) -> None:
    handle = await begin(rt, "too late")
    handle.cancel()  # before the run's task ever ran
    assert ends(await drain(handle)) == [("cancelled", "cancelled")]
    assert await stored(rt) == [("user", "too late", "completed")]
    assert fake.requests == []


async def test_reject_and_interrupt(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW, Reply(text="interrupter"))
    reading = await Reader(await begin(rt, "busy")).until_text()
    with pytest.raises(ChatBusy, match="chat 'c1' is busy"):
        await begin(rt, "refused", on_busy="reject")
    interrupter = await begin(rt, "me first", on_busy="interrupt")
    assert ends(await reading.rest()) == [("cancelled", "cancelled")]
    assert ends(await drain(interrupter)) == [("completed", "completed")]
    assert "refused" not in [r[1] for r in await stored(rt)]


async def test_append_during_streaming_reaches_the_next_model_call(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW, Reply(text="Noted the addition."))
    active = await begin(rt, "write a poem")
    reading = await Reader(active).until_text()
    run_id = await runs_of(rt).append(ALICE, "c1", [{"role": "user", "content": "make it rhyme"}])
    assert run_id == active.run_id
    assert ends(await reading.rest()) == [("completed", "completed")]
    assert fake.requests[1].messages[-2:] == [
        {"role": "assistant", "content": "s" * 200},
        {"role": "user", "content": "make it rhyme"},
    ]
    assert [r[1] for r in await stored(rt)] == ["write a poem", "s" * 200, "make it rhyme", "Noted the addition."]


async def test_an_append_to_a_run_whose_model_call_then_fails_is_kept(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="s" * 200, chunk_size=2, delay_s=0.02, drop_after=40))
    reading = await Reader(await begin(rt, "write a poem")).until_text()
    await runs_of(rt).append(ALICE, "c1", [{"role": "user", "content": "make it rhyme"}])
    assert ends(await reading.rest()) == [("failed", "model_error")]
    contents = [r[1] for r in await stored(rt)]
    assert contents[0] == "write a poem" and contents[-1] == "make it rhyme"  # unanswered, but not lost


async def test_append_without_an_active_run_is_refused(rt: Runtime, fake: ScriptedModel) -> None:
    runs = runs_of(rt)
    with pytest.raises(NotFound, match="no chat 'c1'"):  # as over HTTP: an unknown chat is not found
        await runs.append(ALICE, "c1", [{"role": "user", "content": "anyone?"}])
    fake.enqueue(Reply(text="done"), SLOW)
    assert ends(await drain(await begin(rt, "hello"))) == [("completed", "completed")]
    with pytest.raises(NoActiveRun, match="chat 'c1' has no active run"):  # the caller's chat, at rest
        await runs.append(ALICE, "c1", [{"role": "user", "content": "anyone?"}])
    active = await begin(rt, "busy")
    reading = await Reader(active).until_text()
    with pytest.raises(NotFound, match="no chat 'c1'"):  # another tenant cannot append to it, nor learn it runs
        await runs.append(Identity("mallory"), "c1", [{"role": "user", "content": "hi"}])
    active.cancel()
    await reading.rest()


async def test_a_reader_that_stops_reading_does_not_stop_the_run(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="x" * 3000, chunk_size=1))
    handle = await begin(rt, "go on without me")
    reading = await Reader(handle).until_text()  # ...and then reads nothing for a while
    await asyncio.wait_for(asyncio.shield(handle.task), 30)
    assert (await stored(rt))[1] == ("assistant", "x" * 3000, "completed")
    waiting = await reading.rest()  # what waited meanwhile: bounded (text merged), stream_end kept
    assert len(waiting) < 600 and ends(waiting) == [("completed", "completed")]
    assert "".join(e.text or "" for e in waiting if isinstance(e, MessageDelta)) == "x" * 3000


async def test_a_reader_that_fell_behind_gets_what_waited_in_one_batch(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="y" * 40, chunk_size=1))
    handle = await begin(rt, "go on")
    await asyncio.wait_for(asyncio.shield(handle.task), 30)  # the reader was away for the whole run
    batches = [batch async for batch in handle.batches()]
    assert len(batches) == 1  # what a server writes to a connection that fell behind: one write
    [events] = batches
    assert events[0].type == "stream_start" and ends(events) == [("completed", "completed")]
    assert "".join(e.text or "" for e in events if isinstance(e, MessageDelta)) == "y" * 40


class HeldFlush(SqlStore):
    """A store whose final write of a run waits until the test lets it go: whatever the test does on
    `flushing`, it does in the middle of the flush, however slow the machine."""

    flushing: asyncio.Event
    release: asyncio.Event

    @classmethod
    def over(cls, store: SqlStore) -> HeldFlush:
        held = cls(store.db)
        held.flushing, held.release = asyncio.Event(), asyncio.Event()
        return held

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None:  # fmt: skip
        self.flushing.set()
        await self.release.wait()
        await super().finish_run(identity, run, new, done, waiting, release)


async def test_a_cancel_during_the_flush_changes_nothing(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    from tests.support.runtimes import app_files

    held = HeldFlush.over(store)
    rt = make_runtime(tmp_path / "app", held, app_files(fake.base_url), model=fake)
    fake.enqueue(Reply(text="done"))
    handle = await begin(rt, "hi")
    reading = asyncio.create_task(drain(handle))
    await asyncio.wait_for(held.flushing.wait(), 10)
    handle.cancel()  # the cancel is delivered before the flush can go on: both wake in this order
    held.release.set()
    assert ends(await reading) == [("completed", "completed")]
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "done", "completed")]
    await rt.engines.aclose()


async def test_an_append_during_the_flush_is_refused_and_goes_as_a_new_request(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    held = HeldFlush.over(store)
    rt = make_runtime(tmp_path / "app", held, app_files(fake.base_url), model=fake)
    fake.enqueue(Reply(text="done"), "echo")
    reading = asyncio.create_task(drain(await begin(rt, "hi")))
    await asyncio.wait_for(held.flushing.wait(), 10)
    with pytest.raises(NoActiveRun, match="is ending and takes no more messages; send them as a new request"):
        await runs_of(rt).append(
            ALICE, "c1", [{"role": "user", "content": "one more thing"}]
        )  # it would never be answered
    again = await begin(rt, "one more thing")
    held.release.set()
    assert ends(await reading) == [("completed", "completed")]
    assert ends(await drain(again)) == [("completed", "completed")]
    assert [r[1] for r in await stored(rt)] == ["hi", "done", "one more thing", "echo: one more thing"]
    await rt.engines.aclose()


async def test_an_append_to_a_cancelled_run_is_refused(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW)
    reading = await Reader(await begin(rt, "busy")).until_text()
    await runs_of(rt).cancel(ALICE, "c1")
    with pytest.raises(NoActiveRun, match="is ending"):
        await runs_of(rt).append(ALICE, "c1", [{"role": "user", "content": "too late"}])
    assert ends(await reading.rest()) == [("cancelled", "cancelled")]
    assert "too late" not in [r[1] for r in await stored(rt)]


async def test_a_cancelled_batch_leaves_no_gate_behind(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW, Reply(text="fresh"))
    handles = [await begin(rt, f"q{n}") for n in range(4)]
    reading = await Reader(handles[0]).until_text()
    assert await runs_of(rt).cancel(ALICE, "c1") == 4
    results = await asyncio.gather(reading.rest(), *(drain(h) for h in handles[1:]))
    assert [ends(r) for r in results] == [[("cancelled", "cancelled")]] * 4
    assert runs_of(rt).process.admission.gates == {}  # the watermark went with the last request
    assert ends(await drain(await begin(rt, "fresh"))) == [("completed", "completed")]


def stream_ends_per_run(results: Sequence[Sequence[Event]]) -> list[list[str]]:
    return [[e.run_id for e in events if isinstance(e, StreamEnd)] for events in results]


async def test_one_stream_end_per_run_across_retries(rt: Runtime, fake: ScriptedModel) -> None:
    rt.retry = RetryPolicy(max_attempts=3)
    fake.enqueue("e500", Reply(text="one"), "e429", Reply(text="two"), "e503", "e500", Reply(text="three"))
    handles = [await begin(rt, f"q{n}") for n in range(3)]
    results = await asyncio.gather(*(drain(h) for h in handles))
    assert stream_ends_per_run(results) == [[h.run_id] for h in handles]
    assert [ends(r) for r in results] == [[("completed", "completed")]] * 3
    assert len(fake.requests) == 7
    assert [r[1] for r in await stored(rt)] == ["q0", "one", "q1", "two", "q2", "three"]


async def test_one_stream_end_per_run_across_a_fallback(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    files = app_files(fake.base_url)
    files["app.yml"] = files["app.yml"].replace("default: fake.model", "default: [fake.model, fake.backup]")
    files["connectors/fake/backup.yml"] = files["connectors/fake/model.yml"].replace("model: text", "model: backup")
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue("e500", "e503", model="text")
    fake.enqueue(Reply(text="from the backup"), Reply(text="again the backup"), model="backup")
    handles = [await begin(rt, f"q{n}") for n in range(2)]
    results = await asyncio.gather(*(drain(h) for h in handles))
    assert stream_ends_per_run(results) == [[h.run_id] for h in handles]
    assert [ends(r) for r in results] == [[("completed", "completed")]] * 2
    assert [len([e for e in r if isinstance(e, FallbackEvent)]) for r in results] == [1, 1]
    assert [r[1] for r in await stored(rt)] == ["q0", "from the backup", "q1", "again the backup"]
    await rt.engines.aclose()


async def test_a_reader_that_stops_reading_during_a_long_tool_call_gets_it_whole(
    rt: Runtime, fake: ScriptedModel
) -> None:
    lookup = ToolCall("lookup", {"query": "x" * 3000}, id="call_long")
    fake.enqueue(Reply(tool_calls=(lookup,), chunk_size=1))
    handle = await begin(rt, "look it up")
    reading = await Reader(handle).until_text()  # the call's first fragment; then nothing is read a while
    await asyncio.wait_for(asyncio.shield(handle.task), 30)
    waiting = await reading.rest()
    assert len(waiting) < 600  # bounded: the argument fragments were merged
    fragments = [e for e in reading.events if isinstance(e, MessageDelta) and e.kind == "tool_call"]
    assert "".join(e.arguments or "" for e in fragments) == lookup.arguments_json()
    assert {(e.tool_call_id, e.name) for e in fragments[:1]} == {("call_long", "lookup")}
    [call_end] = [e for e in reading.events if isinstance(e, MessageEnd) and e.kind == "tool_call"]
    assert call_end.content == {"id": "call_long", "name": "lookup", "arguments": lookup.arguments_json()}
    assert len(ends(waiting)) == 1  # (no such tool: the run fails, and says so once)


def reached(marker: str) -> bool:
    return Path(marker).exists()


async def test_a_chat_cancel_while_a_tool_runs(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    files = app_files(fake.base_url)
    files["mcps/testing.yml"] = "command: python\nargs: [-m, tests.support.mcp_server]\n"
    files["assistants/tooled/assistant.yml"] = "name: Tooled\nmcp:\n  servers: [testing]\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    marker = str(tmp_path / "nap")
    nap = ToolCall("testing__nap_marked", {"seconds": 30, "marker": marker}, id="n1")
    fake.enqueue(Reply(tool_calls=(nap,)), Reply(text="after"))
    ask = [{"role": "user", "content": "sleep on it"}]
    try:
        napping = await runs_of(rt).start(RunRequest("tooled", ALICE, ask, chat_id="c1"))
        queued = await runs_of(rt).start(
            RunRequest("tooled", ALICE, [{"role": "user", "content": "and?"}], chat_id="c1")
        )
        reading = asyncio.create_task(drain(napping))
        await until(lambda: reached(marker + ".started"))
        assert await runs_of(rt).cancel(ALICE, "c1") == 2
        assert ends(await reading) == [("cancelled", "cancelled")]
        assert ends(await drain(queued)) == [("cancelled", "cancelled")]
        await until(lambda: reached(marker + ".cancelled"))  # the tool was stopped, not waited for
        assert not reached(marker + ".finished")
        rows = await rt.store.history(ALICE, "c1")
        assert [(m.tool_call_id, m.content) for m in rows if m.role == "tool"] == [("n1", "cancelled")]
        later = await runs_of(rt).start(
            RunRequest("tooled", ALICE, [{"role": "user", "content": "awake?"}], chat_id="c1")
        )
        assert ends(await drain(later)) == [("completed", "completed")]
        assert len(fake.requests) == 2  # the queued request never reached the model
    finally:
        await rt.engines.aclose()
        await rt.tools.aclose()


@ON_POSTGRES
async def test_many_requests_with_leases(leased: Runtime, fake: ScriptedModel) -> None:
    await test_many_requests_on_one_chat_each_end_once_in_one_order(leased, fake)
    assert await leases(leased) == []


@ON_POSTGRES
async def test_cancel_with_leases(leased: Runtime, fake: ScriptedModel) -> None:
    await test_cancel_reaches_the_active_run_and_everything_queued_but_not_what_comes_after(leased, fake)
    assert runs_of(leased).process.admission.gates == {} and await leases(leased) == []


@ON_POSTGRES
async def test_cancel_then_a_new_request_with_leases(leased: Runtime, fake: ScriptedModel) -> None:
    await test_cancel_then_at_once_a_new_request_the_new_one_survives(leased, fake)


@ON_POSTGRES
async def test_reject_and_interrupt_with_leases(leased: Runtime, fake: ScriptedModel) -> None:
    await test_reject_and_interrupt(leased, fake)


@ON_POSTGRES
async def test_a_cancel_while_waiting_for_the_lease(leased: Runtime, fake: ScriptedModel) -> None:
    lease = runs_of(leased).process.admission.lease
    assert isinstance(lease, PgLease)
    fake.enqueue(Reply(text="free again"))
    async with pg_session(leased, autocommit=True) as other:  # another process holds the chat
        await other.execute(
            "INSERT INTO chat_leases (chat_id, owner, run_id, expires_at) VALUES ('c1', 'elsewhere', 'run-x', %s)",
            (leased.clock() + 600,),
        )
        handle = await begin(leased, "waiting")
        reading = asyncio.create_task(drain(handle))
        await until(lambda: lease.busy_elsewhere("c1"))
        handle.cancel()
        assert ends(await reading) == [("cancelled", "cancelled")]
        assert await leases(leased) == [("c1", "elsewhere")]  # theirs, untouched
        with pytest.raises(ChatBusy, match="another process"):
            await begin(leased, "refused", on_busy="reject")
        assert runs_of(leased).process.admission.gates == {}
        await other.execute("DELETE FROM chat_leases")
    assert ends(await drain(await begin(leased, "now?"))) == [("completed", "completed")]


@ON_POSTGRES
async def test_a_cancel_while_claiming_the_lease_leaves_the_chat_free(leased: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="free"))
    async with pg_session(leased) as blocker, pg_session(leased, autocommit=True) as watcher:
        # Another transaction is inserting the chat's lease: the claim waits for it to commit or not.
        await blocker.execute(
            "INSERT INTO chat_leases (chat_id, owner, run_id, expires_at) VALUES ('c1', 'elsewhere', 'run-x', 0)"
        )
        handle = await begin(leased, "claiming")
        reading = asyncio.create_task(drain(handle))
        await blocked_on_a_lock(watcher, "INSERT INTO chat_leases")
        handle.cancel()  # the claim goes on in the database and takes the chat when the other gives up
        await blocker.rollback()
    assert ends(await reading) == [("cancelled", "cancelled")]
    assert await leases(leased) == []  # given back, not held for the lease's lifetime
    assert ends(await drain(await begin(leased, "next"))) == [("completed", "completed")]


@ON_POSTGRES
async def test_a_cancel_while_the_lease_is_released_still_frees_the_chat(leased: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(SLOW, Reply(text="next"))
    handle = await begin(leased, "hi")
    reading = await Reader(handle).until_text()
    async with pg_session(leased) as blocker, pg_session(leased, autocommit=True) as watcher:
        await blocker.execute("SELECT 1 FROM chat_leases WHERE chat_id = 'c1' FOR UPDATE")  # the release waits
        rest = asyncio.create_task(reading.rest())
        await blocked_on_a_lock(watcher, "DELETE FROM chat_leases")
        assert await runs_of(leased).cancel(ALICE, "c1") == 1  # the run is stored; only its lease is being let go
        await blocker.rollback()
    assert ends(await rest) == [("completed", "completed")]
    assert runs_of(leased).process.admission.gates == {} and await leases(leased) == []
    assert ends(await drain(await begin(leased, "next"))) == [("completed", "completed")]


class FailingFlush(SqlStore):
    """A store whose first flush of a run fails (its database refused the write)."""

    failed: int = 0

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None:  # fmt: skip
        if not self.failed:
            self.failed += 1
            raise RuntimeError("the database refused the write")
        await super().finish_run(identity, run, new, done, waiting, release)


@ON_POSTGRES
async def test_the_flush_lets_the_chat_go_and_a_flush_that_failed_still_does(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    """The lease is let go in the flush's own transaction; when that transaction fails, the run lets it go
    by itself: either way the next run on the chat, here or in another process, need not wait for it."""
    rt = make_runtime(tmp_path / "app", FailingFlush(store.db), app_files(fake.base_url), model=fake)
    await runs_of(rt).process.share_chats()
    lease = runs_of(rt).process.admission.lease
    try:
        fake.enqueue(Reply(text="lost"), Reply(text="kept"))
        assert ends(await drain(await begin(rt, "first"))) == [("completed", "completed")]
        assert await leases(rt) == []  # let go after the failed flush, by the run itself
        assert ends(await drain(await begin(rt, "second"))) == [("completed", "completed")]
        assert await leases(rt) == []  # let go with the flush
        assert ("assistant", "kept", "completed") in await stored(rt)
    finally:
        await lease.aclose()
        await rt.engines.aclose()


@ON_POSTGRES
async def test_a_run_whose_lease_another_process_took_is_cancelled(
    rt: Runtime, fake: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YAO_AGENT_LEASE_TTL_S", "0.9")  # renewed every 0.3 s
    await runs_of(rt).process.share_chats()
    lease = runs_of(rt).process.admission.lease
    assert isinstance(lease, PgLease)
    try:
        fake.enqueue(Reply(text="s" * 1000, chunk_size=2, delay_s=0.02))
        reading = await Reader(await begin(rt, "long")).until_text()
        async with pg_session(rt, autocommit=True) as other:  # as if its lease had expired and been taken
            await other.execute("UPDATE chat_leases SET owner = 'elsewhere', run_id = 'run-x' WHERE chat_id = 'c1'")
        assert ends(await reading.rest()) == [("cancelled", "cancelled")]  # no second run on the chat
        assert await leases(rt) == [("c1", "elsewhere")]
    finally:
        await lease.aclose()
