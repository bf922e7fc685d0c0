"""One active run per chat across server processes sharing a PostgreSQL database.

A run holds its chat through a lease row (`chat_leases`) that its process renews every few seconds;
a process that dies stops renewing, and once the lease expires any process may take the chat (the run
it left is marked interrupted). A renewal that finds the lease gone (or that kept failing for longer
than the lease lives, so another process may have taken it) stops the run holding it. Processes tell
each other about cancels and released chats with PostgreSQL's LISTEN/NOTIFY on one channel; a cancel
that wants to know what it cancelled (`cancel_counted`) is answered by each process with its count. An
append for a run held by another process goes to that process the same way, which answers with the
run it reached or why none took the messages (`append_elsewhere`).
SQLite deployments are single-process: their `LocalLease` holds nothing and has nobody to tell.

Every time the processes compare — a lease's expiry, which requests a cancel reaches — is the
database's clock, not the host's: each process measures how far its own clock is from the database's
(`now`), so hosts whose clocks disagree still agree on the order of accepts and cancels.

Leases, heartbeats and notices are written like every statement of the store (`Database.write_tx`).
Listening is another transport: one psycopg connection of the lease's own, in autocommit, that waits
for notices as long as the process lives — no transaction, so nothing a pool should hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.sql import ClauseElement

from yao_agent.base.aio import finish_despite_cancel
from yao_agent.errors import NoActiveRun, UsageError, YaoAgentError
from yao_agent.identity import Identity
from yao_agent.store.chats import mark_interrupted
from yao_agent.store.engine import Database
from yao_agent.store.notices import CHANNEL, let_go, notify
from yao_agent.store.records import LeaseRelease
from yao_agent.store.schema import chat_leases, runs
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql, Tx

log = logging.getLogger("yao_agent.lease")
TTL_S = 15.0  # a dead process blocks a chat at most this long
RENEW_S = 4.0
POLL_S = 1.0  # re-check a held chat this often even if no release notice arrives
ANSWER_S = 2.0  # how long a counted cancel (or an append) waits for the process holding the chat to answer
NOTICE_BYTES = 7900  # PostgreSQL refuses a notice of 8000 bytes or more
SYNC_S = 30.0  # how often the distance to the database's clock is measured again
SWEEP_S = 5.0  # how often a process looks for runs left `running` by processes that died

OnCancel = Callable[[str, float], int]  # (chat id, time of the cancel) -> how many it cancelled here
OnLost = Callable[[str, str], None]  # (chat id, run id) of a run whose lease is gone
OnAppend = Callable[[str, Identity, Any], str]  # (chat id, caller, messages) -> the run they went to; raises if none


class Lease(Protocol):
    """Holds a chat for one run across the processes that share a store, and carries what they tell
    each other about it: cancels, and messages appended to a run another process holds.

    `acquire` waits until the chat is this run's; cancelled, it holds nothing (a claim that was
    already on its way is given back). `release` is safe to repeat.
    """

    async def start(self) -> None: ...
    async def aclose(self) -> None: ...
    def now(self) -> float: ...  # the clock every process compares by (the database's)
    async def acquire(self, chat_id: str, run_id: str) -> None: ...
    async def release(self, chat_id: str, run_id: str) -> None: ...
    def releasing(self, chat_id: str, run_id: str) -> LeaseRelease | None: ...  # to let go with the run's flush
    async def held_elsewhere(self, chat_id: str) -> bool: ...  # another process holds it now
    def busy_elsewhere(self, chat_id: str) -> bool: ...  # a run here waits for another process's
    async def cancel_everywhere(self, chat_id: str, at: float | None = None) -> None: ...

    async def cancel_counted(self, chat_id: str) -> int:
        """`cancel_everywhere`, and how many runs and requests the other processes cancelled."""
        ...

    async def append_elsewhere(self, chat_id: str, identity: Identity, messages: list[dict[str, Any]]) -> str | None:
        """Hand user messages to the run another process holds the chat for: that run's id; None when no
        other process holds the chat."""
        ...

    @property
    def sweep_s(self) -> float | None:
        """How often to look for the runs of processes that died while others go on; None where one
        process serves the store (its runs are recovered when it opens)."""
        ...


class LocalLease:
    """The lease of a store one process serves (SQLite): admission alone keeps one run per chat, and
    there is no other process to hold a chat, hear a cancel or take messages."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.sweep_s: float | None = None  # no other process leaves runs behind while this one serves

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def now(self) -> float:
        return self.clock()

    async def acquire(self, chat_id: str, run_id: str) -> None:
        return None

    async def release(self, chat_id: str, run_id: str) -> None:
        return None

    def releasing(self, chat_id: str, run_id: str) -> LeaseRelease | None:
        return None  # nothing is held in the store

    async def held_elsewhere(self, chat_id: str) -> bool:
        return False

    def busy_elsewhere(self, chat_id: str) -> bool:
        return False

    async def cancel_everywhere(self, chat_id: str, at: float | None = None) -> None:
        return None

    async def cancel_counted(self, chat_id: str) -> int:
        return 0

    async def append_elsewhere(self, chat_id: str, identity: Identity, messages: list[dict[str, Any]]) -> str | None:
        return None


_CHAT = chat_leases.c.chat_id == bindparam("chat_id")
HOLDER = Sql(select(chat_leases.c.owner).where(_CHAT, chat_leases.c.expires_at > bindparam("now")))
HOLDING_RUN = Sql(select(chat_leases.c.run_id).where(_CHAT))
EXTEND = Sql(update(chat_leases).where(_CHAT, chat_leases.c.run_id == bindparam("run_id")), columns=("expires_at",))
HEARTBEAT = Sql(update(runs).where(runs.c.id == bindparam("run_id")), columns=("heartbeat_at",))
DB_NOW = Sql(select(func.extract("epoch", func.clock_timestamp())))


def _claiming(dialect: str) -> ClauseElement:
    """Take the chat, unless a lease its holder still renews has it; the run holding it then, if taken."""
    insert = conflict_insert(dialect, chat_leases)
    return insert.on_conflict_do_update(
        index_elements=["chat_id"],
        set_={"owner": insert.excluded.owner, "run_id": insert.excluded.run_id,
              "expires_at": insert.excluded.expires_at},
        where=chat_leases.c.expires_at <= bindparam("now"),  # only a lease its holder stopped renewing
    ).returning(chat_leases.c.run_id)  # fmt: skip


CLAIM = Sql(Spelled(_claiming, ("postgresql",)), columns=("chat_id", "owner", "run_id", "expires_at"))


@dataclass
class _Tally:
    """The answers to one counted cancel: what the other processes cancelled, and whether the holder said."""

    holder: str  # the process that held the chat when the cancel was sent
    count: int = 0
    holder_answered: asyncio.Event = field(default_factory=asyncio.Event)


class PgLease:
    def __init__(
        self,
        db: Database,
        owner: str,
        on_cancel: OnCancel,
        *,
        clock: Callable[[], float],
        ttl_s: float = TTL_S,
        on_lost: OnLost = lambda _chat_id, _run_id: None,
        on_append: OnAppend | None = None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.on_cancel = on_cancel
        self.on_lost = on_lost
        self.on_append = on_append
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}  # appends sent from here, by key
        self.clock = clock
        self.ttl_s = ttl_s
        self.renew_s = min(RENEW_S, ttl_s / 3)
        self.sweep_s = min(SWEEP_S, ttl_s)  # (a process that died is found about as soon as its leases expire)
        self._released: dict[str, asyncio.Event] = {}  # set when a chat waited for is released
        self._renewals: dict[str, asyncio.Task[None]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._held_elsewhere: set[str] = set()
        self._tallies: dict[str, _Tally] = {}  # the counted cancels sent from here, waiting for answers
        self._answers: set[asyncio.Task[None]] = set()
        self.offset = 0.0  # the database's clock minus ours
        self._syncing: asyncio.Task[None] | None = None

    def now(self) -> float:
        """The database's clock, read off ours: what every process compares times by."""
        return self.clock() + self.offset

    async def start(self) -> None:
        """Listen for the other processes' notices (cancels, released chats), on the database's clock."""
        await self.sync_clock()
        self._syncing = asyncio.create_task(self._keep_in_sync(), name="database clock")
        ready = asyncio.Event()
        self._listener = asyncio.create_task(self._listen(ready), name="chat lease listener")
        await asyncio.wait_for(ready.wait(), 10)

    async def sync_clock(self) -> None:
        """Measure how far our clock is from the database's (to within half a round trip)."""
        before = self.clock()
        theirs = float(await self.db.read_tx(lambda tx: tx.scalar(DB_NOW, {})))
        after = self.clock()
        self.offset = theirs - (before + after) / 2

    async def _keep_in_sync(self) -> None:
        while True:  # clocks drift, and hosts' clocks get stepped
            await asyncio.sleep(SYNC_S)
            try:
                await self.sync_clock()
            except Exception:
                log.exception("could not read the database's clock; keeping the last distance measured")

    async def aclose(self) -> None:
        extra = [t for t in (self._listener, self._syncing) if t is not None]
        tasks = [*self._renewals.values(), *self._answers, *extra]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._renewals.clear()

    def busy_elsewhere(self, chat_id: str) -> bool:
        return chat_id in self._held_elsewhere

    async def held_elsewhere(self, chat_id: str) -> bool:
        """Whether another process holds the chat now (for `on_busy: reject`)."""
        owner = await self._holder(chat_id)
        return owner is not None and owner != self.owner

    async def acquire(self, chat_id: str, run_id: str) -> None:
        """Wait until this process holds the chat for `run_id`; cancelled, it holds nothing."""
        released = self._released[chat_id] = asyncio.Event()  # before the claim: no notice is missed
        try:
            while True:
                released.clear()
                if await self._claim_or_give_back(chat_id, run_id):
                    break
                self._held_elsewhere.add(chat_id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(released.wait(), POLL_S)
        finally:
            self._released.pop(chat_id, None)
            self._held_elsewhere.discard(chat_id)
        self._renewals[chat_id] = asyncio.create_task(self._renew(chat_id, run_id), name=f"lease {chat_id}")

    async def _claim_or_give_back(self, chat_id: str, run_id: str) -> bool:
        """Claim the chat. Cancelled meanwhile, the claim still commits on its thread: then undo it."""
        claim = asyncio.ensure_future(self._claim(chat_id, run_id))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            await finish_despite_cancel(self._give_back(claim, chat_id, run_id))
            raise

    async def _give_back(self, claim: asyncio.Future[bool], chat_id: str, run_id: str) -> None:
        try:
            if await claim:
                await self.release(chat_id, run_id)
        except Exception:  # a claim that failed took nothing; a failed release expires by itself
            log.exception("could not give back chat %s after a cancelled claim", chat_id)

    async def release(self, chat_id: str, run_id: str) -> None:
        release = self.releasing(chat_id, run_id)
        await self.db.write_tx(lambda tx: let_go(tx, release))

    def releasing(self, chat_id: str, run_id: str) -> LeaseRelease:
        """The release, for a transaction that stores the run (`finish_run`) to let go with: the renewals
        stop now, and the other processes hear of it when that transaction commits. If it does not commit,
        `release` is still to be called (it is safe to repeat)."""
        renewal = self._renewals.pop(chat_id, None)
        if renewal is not None:
            renewal.cancel()
        return LeaseRelease(chat_id, run_id)

    async def cancel_everywhere(self, chat_id: str, at: float | None = None) -> None:
        """Tell the other processes to cancel what they accepted for the chat up to now (or `at`)."""
        message = {"op": "cancel", "chat_id": chat_id, "at": self.now() if at is None else at, "from": self.owner}
        await self.db.write_tx(lambda tx: notify(tx, message))

    async def cancel_counted(self, chat_id: str) -> int:
        """`cancel_everywhere`, and how many runs and requests the other processes cancelled.

        When another process holds the chat, its answer (its active run, and what it had queued by then)
        is waited for, up to ANSWER_S; the answers of the others that arrive meanwhile count too. A holder
        that does not answer in time (busy, or dead before its lease expired) counts for its run: the
        cancel stops it when heard, or the lease's expiry does. When nobody else holds the chat, there is
        nothing to wait for: the count is what has answered by the time the cancel is sent (usually none).
        """
        holder = await self._holder(chat_id)
        key = secrets.token_hex(8)
        tally = self._tallies[key] = _Tally(holder or "")
        try:
            message = {"op": "cancel", "chat_id": chat_id, "at": self.now(), "from": self.owner, "tally": key}
            await self.db.write_tx(lambda tx: notify(tx, message))
            if holder is None or holder == self.owner:
                return tally.count
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tally.holder_answered.wait(), ANSWER_S)
            return tally.count + (0 if tally.holder_answered.is_set() else 1)
        finally:
            del self._tallies[key]

    async def append_elsewhere(self, chat_id: str, identity: Identity, messages: list[dict[str, Any]]) -> str | None:
        """Hand user messages to the run another process holds the chat for: the id of the run that took
        them; None when no other process holds the chat; NoActiveRun when its run takes no more (or the
        process did not answer in time); UsageError when the messages are too long to hand over."""
        holder = await self._holder(chat_id)
        if holder is None or holder == self.owner:
            return None
        key = secrets.token_hex(8)
        message = {"op": "append", "chat_id": chat_id, "user_id": identity.user_id, "team_id": identity.team_id,
                   "messages": messages, "from": self.owner, "to": holder, "reply": key}  # fmt: skip
        if len(json.dumps(message).encode()) > NOTICE_BYTES:
            raise UsageError(
                f"messages: too long to hand to the run of chat '{chat_id}', which runs in another process "
                f"(at most about {NOTICE_BYTES // 1000} KB); send them as a new request (it runs next)"
            )
        reply = self._replies[key] = asyncio.get_running_loop().create_future()
        try:
            await self.db.write_tx(lambda tx: notify(tx, message))
            answer = await asyncio.wait_for(reply, ANSWER_S)
        except TimeoutError:
            raise NoActiveRun(f"chat '{chat_id}': the process running it did not answer; send the messages as a "
                              "new request (it runs next)") from None  # fmt: skip
        finally:
            del self._replies[key]
        if answer.get("run_id"):
            return str(answer["run_id"])
        raise NoActiveRun(str(answer.get("error") or f"chat '{chat_id}' has no active run to append to"))

    def _take_append(self, message: dict[str, Any]) -> None:
        """Another process hands us messages for the run we hold: give them to it, and say what became of them."""
        answer: dict[str, Any] = {"op": "appended", "to": message.get("from"), "reply": message.get("reply")}
        try:
            if self.on_append is None:
                raise NoActiveRun("this process takes no appends")
            who = Identity(str(message.get("user_id")), _text_or_none(message.get("team_id")))
            answer["run_id"] = self.on_append(str(message.get("chat_id")), who, message.get("messages"))
        except YaoAgentError as exc:
            answer["error"] = str(exc)
        self._send(answer, f"could not answer an append to chat {message.get('chat_id')}")

    async def _holder(self, chat_id: str) -> str | None:
        """The process holding the chat now, if any."""
        params = {"chat_id": chat_id, "now": self.now()}
        return await self.db.read_tx(lambda tx: tx.scalar(HOLDER, params))

    async def _claim(self, chat_id: str, run_id: str) -> bool:
        now = self.now()
        claim = {"chat_id": chat_id, "owner": self.owner, "run_id": run_id, "expires_at": now + self.ttl_s, "now": now}

        def work(tx: Tx) -> bool:
            previous = tx.scalar(HOLDING_RUN, {"chat_id": chat_id})
            taken = tx.first(CLAIM, claim)
            if taken is not None and previous is not None and previous != run_id:
                mark_interrupted(tx, previous, now, "its lease expired")  # it died holding the chat
            return taken is not None

        return await self.db.write_tx(work)

    async def _renew(self, chat_id: str, run_id: str) -> None:
        """Extend the lease while the run lasts; once it is gone, stop the run (one run per chat)."""
        renewed_at = self.now()  # just claimed
        while True:
            await asyncio.sleep(self.renew_s)
            now = self.now()
            try:
                held = await self.db.write_tx(lambda tx, now=now: self._extend(tx, chat_id, run_id, now))
            except Exception:
                log.exception("could not renew the lease of chat %s", chat_id)
                held = None if now - renewed_at < self.ttl_s else False  # past its expiry: others may run
            if held is False:
                log.warning("chat %s: run %s lost its lease, so it is cancelled", chat_id, run_id)
                self.on_lost(chat_id, run_id)
                return
            if held:
                renewed_at = now

    def _extend(self, tx: Tx, chat_id: str, run_id: str, now: float) -> bool:
        """Whether the run still held the lease (now extended), with its heartbeat."""
        if tx.execute(EXTEND, {"chat_id": chat_id, "run_id": run_id, "expires_at": now + self.ttl_s}) == 0:
            return False
        tx.execute(HEARTBEAT, {"run_id": run_id, "heartbeat_at": now})
        return True

    async def _listen(self, ready: asyncio.Event) -> None:
        import psycopg

        dsn = self.db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                # Cancelled while it connects, `connect` leaves no connection behind: psycopg makes the
                # connection object at its last step, and hands it over without awaiting anything after.
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    ready.set()
                    async for notice in conn.notifies():
                        self._handle(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lost the connection listening for chat notices; reconnecting")
                await asyncio.sleep(1)

    def _handle(self, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        chat_id = str(message.get("chat_id"))
        if message.get("op") == "release":
            self._held_elsewhere.discard(chat_id)
            released = self._released.get(chat_id)
            if released is not None:
                released.set()
        elif message.get("op") == "cancel" and message.get("from") != self.owner:  # ours was done here
            count = self.on_cancel(chat_id, float(message.get("at", self.now())))
            if message.get("tally"):  # a counted cancel: every process answers, the holder even with 0
                self._answer(message, count)
        elif message.get("op") == "append" and message.get("to") == self.owner:
            self._take_append(message)
        elif message.get("op") == "appended" and message.get("to") == self.owner:
            reply = self._replies.get(str(message.get("reply")))
            if reply is not None and not reply.done():
                reply.set_result(message)
        elif message.get("op") == "cancelled" and message.get("to") == self.owner:
            tally = self._tallies.get(str(message.get("tally")))
            if tally is not None:
                tally.count += int(message.get("count") or 0)
                if message.get("from") == tally.holder:
                    tally.holder_answered.set()

    def _answer(self, cancel: dict[str, Any], count: int) -> None:
        """Tell the sender of a counted cancel what it cancelled here (if this fails, the canceller counts
        the holder's run alone)."""
        answer = {"op": "cancelled", "tally": cancel["tally"], "to": cancel.get("from"), "from": self.owner,
                  "count": count}  # fmt: skip
        self._send(answer, f"could not answer a cancel of chat {cancel.get('chat_id')}")

    def _send(self, answer: dict[str, Any], failed: str) -> None:
        """Send a notice from a task: the listener that calls this must not wait."""

        async def send() -> None:
            try:
                await self.db.write_tx(lambda tx: notify(tx, answer))
            except Exception:
                log.exception(failed)

        task = asyncio.create_task(send(), name="lease answer")
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)


def _text_or_none(value: Any) -> str | None:
    return str(value) if value else None


def lease_for(
    db: Database,
    owner: str,
    on_cancel: OnCancel,
    *,
    clock: Callable[[], float],
    ttl_s: float = TTL_S,
    on_lost: OnLost = lambda _chat_id, _run_id: None,
    on_append: OnAppend | None = None,
) -> Lease:
    """The lease of a store: on PostgreSQL, one that the processes sharing it hold chats with (started
    by the caller); else the one process's own."""
    if db.dialect != "postgresql":
        return LocalLease(clock)
    return PgLease(db, owner, on_cancel, clock=clock, ttl_s=ttl_s, on_lost=on_lost, on_append=on_append)
