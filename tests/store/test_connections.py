"""Every PostgreSQL connection the store opens is closed by the store, whatever cancels or closes what and when.

A psycopg connection the garbage collector finds open makes a ResourceWarning, at whatever moment the
collector runs: under the suite's `filterwarnings = error` it failed whichever test was running then (in CI,
`test_a_lone_surrogate_is_a_400_naming_the_field`, which had nothing to do with it). Each test here puts one
of those moments where it can be seen: a transaction under way when the store closes, a lease closed while
its listener connects, an opening store cancelled while it migrates.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import func, insert, literal, select

from tests.support.stores import ALICE, a_run
from tests.support.waits import wait_until
from yao_agent.messages import ChatMessage
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.chats import mark_interrupted
from yao_agent.store.leases import PgLease
from yao_agent.store.schema import chats
from yao_agent.store.tx import Sql, Tx

pytestmark = pytest.mark.parametrize("store_raw_url", [pytest.param("postgres", marks=pytest.mark.postgres)],
                                     indirect=True)  # fmt: skip


async def test_a_transaction_under_way_when_the_store_closes_closes_its_connection_when_it_ends(
    store_raw_url: str, tmp_path: Path
) -> None:
    """Fixed: a transaction still running on its thread when the store closed (a task nobody waited for, as a
    token's last-use write after a short test) gave its connection back to the disposed pool, open, for the
    garbage collector to find. (SQLite's transactions run on the loop, unless another process holds its lock.)"""
    store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))
    inside, go_on = threading.Event(), threading.Event()
    used: list[Any] = []

    def work(tx: Tx) -> int:
        used.append(cast(Any, tx.cursor).connection)  # the driver's connection (psycopg's)
        inside.set()
        go_on.wait(10)
        return tx.scalar(Sql(select(literal(7))), {})

    try:
        writing = asyncio.ensure_future(store.db.write_tx(work))
        assert await asyncio.to_thread(inside.wait, 10)
    finally:
        await store.aclose()  # while the transaction is under way
    go_on.set()
    assert await asyncio.wait_for(writing, 10) == 7  # it ends as it would have (a write is not cut short)
    assert used[0].closed, "the connection of the transaction went back to the closed pool, open"


async def test_a_lease_closed_while_its_listener_connects_opens_no_connection(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fixed: the listener's connect went on, shielded, after the lease closed, and the connection it made was
    closed later by a task of its own, which a loop that ends meanwhile never runs. Cancelled, psycopg's
    `connect` leaves nothing open: the lease needs no more than to let the cancel through."""
    real = psycopg.AsyncConnection.connect
    connecting, go_on = asyncio.Event(), asyncio.Event()
    made: list[psycopg.AsyncConnection] = []

    async def slow_connect(*args: Any, **kwargs: Any) -> psycopg.AsyncConnection:
        connecting.set()
        await go_on.wait()  # a server slow to answer
        conn = await real(*args, **kwargs)
        made.append(conn)
        return conn

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", slow_connect)
    lease = PgLease(store.db, "me", lambda _chat, _at: 0, clock=lambda: 0.0)
    starting = asyncio.create_task(lease.start())
    try:
        await asyncio.wait_for(connecting.wait(), 10)
    finally:
        await lease.aclose()
        starting.cancel()
    go_on.set()
    for _ in range(20):  # time for a connect that went on to arrive
        await asyncio.sleep(0.01)
    assert made == [], "the closed lease still connected"


async def test_an_opening_store_cancelled_while_it_migrates_leaves_no_connection_open(
    store_raw_url: str, tmp_path: Path
) -> None:
    """Fixed: cancelled while the migration ran on its thread, the store was disposed at once; the migration's
    connection then went back to the disposed pool, open."""
    url = store_url(store_raw_url, tmp_path).update_query_dict({"application_name": "opening-test"})
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    theirs = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'opening-test'"
    async with (
        await psycopg.AsyncConnection.connect(dsn) as holder,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watcher,
    ):
        await holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")  # its look at the revision waits
        opening = asyncio.create_task(open_engine(url))

        async def waits_on_the_lock() -> bool:
            query = theirs + " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            row = await (await watcher.execute(query)).fetchone()  # pyright: ignore[reportArgumentType]
            return row is not None and row[0] == 1

        await wait_until(waits_on_the_lock, 10)
        opening.cancel()
        await asyncio.sleep(0.05)
        await holder.rollback()  # the migration goes on
        with pytest.raises(asyncio.CancelledError):
            await opening

        async def only_ours() -> bool:
            row = await (await watcher.execute(theirs)).fetchone()  # pyright: ignore[reportArgumentType]
            return row is not None and row[0] == 2  # the holder and the watcher

        for _ in range(40):  # time for a connection that went back to the disposed pool to stay there
            if await only_ours():
                break
            await asyncio.sleep(0.05)
        assert await only_ours(), "the migration's connection is still open"


async def test_two_processes_reaping_one_run_mark_it_once(store: SqlStore) -> None:
    """Fixed: two processes that both found a dead process's run still `running` both marked it; the second
    waited for the first's row lock, then wrote its interrupted step again (a duplicate key error)."""
    await store.start_run(ALICE, a_run(), [ChatMessage(id="m1", role="user", content="hi", run_id="r1")])
    inside, go_on = threading.Event(), threading.Event()

    def first(tx: Tx) -> bool:
        marked = mark_interrupted(tx, "r1", 200.0, "first")
        inside.set()
        go_on.wait(10)  # committed only once the second has found the run running, and waits for its lock
        return marked

    one = asyncio.ensure_future(store.db.write_tx(first))
    assert await asyncio.to_thread(inside.wait, 10)
    two = asyncio.ensure_future(store.db.write_tx(lambda tx: mark_interrupted(tx, "r1", 201.0, "second")))
    await asyncio.sleep(0.3)  # not a wait for a state: the second reaches the lock, or finds the run marked
    go_on.set()
    assert (await one, await two) == (True, False)
    point = await store.resume_point(ALICE, "c1")
    assert point is not None and [(s.status, s.error) for s in point.steps] == [
        ("interrupted", {"message": "the process running this run stopped before it finished (first)"})
    ]


def _terminate(url: str, pids: list[int]) -> None:
    """End these backends from a connection of another (as an operator, a restart or a proxy's timeout does)."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


NEW_CHAT = Sql(insert(chats), columns=("id", "user_id", "assistant_id", "created_at", "updated_at"))


def _backend(tx: Tx) -> int:
    return int(tx.scalar(Sql(select(func.pg_backend_pid())), {}))


async def test_a_transaction_on_a_connection_the_server_closed_runs_again_on_a_new_one(
    store: SqlStore, store_raw_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool does not check a connection before each transaction (a round trip each): one the server closed
    meanwhile fails its transaction before the commit, which then runs once more on a new connection."""
    first = await store.db.read_tx(_backend)
    _terminate(store_raw_url, [first])
    ran: list[int] = []

    def write(tx: Tx) -> int:
        ran.append(_backend(tx))
        return tx.execute(NEW_CHAT, {"id": "c9", "user_id": "alice", "assistant_id": "chat", "created_at": 1.0,
                                     "updated_at": 1.0})  # fmt: skip

    assert await store.db.write_tx(write) == 1
    assert ran[0] != first and len(ran) == 1  # the dead connection failed at the work's first statement
    assert "the transaction runs again" in caplog.text
    assert await store.db.read_tx(lambda tx: tx.scalar(Sql(select(func.count()).select_from(chats)), {})) == 1


async def test_a_commit_on_a_connection_the_server_closed_is_not_run_again(store: SqlStore, store_raw_url: str) -> None:
    """A commit that fails may have committed before the connection went: the error is the caller's, the work is
    not run a second time."""
    ran: list[int] = []

    def write(tx: Tx) -> None:
        ran.append(_backend(tx))
        _terminate(store_raw_url, [ran[-1]])  # after its statements, before its commit

    with pytest.raises(psycopg.OperationalError):
        await store.db.write_tx(write)
    assert len(ran) == 1
    assert await store.db.read_tx(_backend) != ran[0]  # the next transaction has a connection of its own


async def test_a_connection_lost_after_a_statement_is_not_run_again(store: SqlStore, store_raw_url: str) -> None:
    """A transaction whose connection goes after the server answered one of its statements may have done
    things in the work (ids taken, state changed) a second run would do twice: its error is the caller's."""
    ran: list[int] = []

    def write(tx: Tx) -> int:
        ran.append(_backend(tx))  # answered: the work is under way
        _terminate(store_raw_url, [ran[-1]])
        return tx.execute(NEW_CHAT, {"id": "c9", "user_id": "alice", "assistant_id": "chat", "created_at": 1.0,
                                     "updated_at": 1.0})  # fmt: skip

    with pytest.raises(psycopg.OperationalError):
        await store.db.write_tx(write)
    assert len(ran) == 1
    assert await store.db.read_tx(lambda tx: tx.scalar(Sql(select(func.count()).select_from(chats)), {})) == 0
