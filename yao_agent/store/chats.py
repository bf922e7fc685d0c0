"""Chats, their messages, runs and steps. Every query is scoped to the caller's identity.

A chat belongs to one (user, team) pair; anybody else asking for it gets `NotFound`, the same
answer as for a chat that does not exist, so ids reveal nothing.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, Integer, Text, bindparam, cast, delete, false, func, or_, select, update

from yao_agent.errors import HistoryUnavailable, NotFound, PermissionDenied, UsageError
from yao_agent.identity import Identity, Operator
from yao_agent.messages import ChatMessage
from yao_agent.store import approvals, journal, runlog, step_inputs, versions
from yao_agent.store.audit import actor_of
from yao_agent.store.engine import Database
from yao_agent.store.notices import let_go
from yao_agent.store.records import (
    Approval,
    ChatRecord,
    LeaseRelease,
    Loaded,
    ResumePoint,
    Rewind,
    RunRecord,
    RunView,
    StepRecord,
)
from yao_agent.store.runlog import chat_record, team_of
from yao_agent.store.schema import chat_leases, chats, memory, messages, metadata, runs, steps
from yao_agent.store.tx import Sql, Tx

TITLE_MAX = 200
# Bidirectional embeddings, overrides and isolates: in a title they could make it read as another one.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_LIMIT = bindparam("limit", type_=Integer)
_OWNED = (chats.c.user_id == bindparam("user_id")) & (chats.c.team_id == bindparam("team_id"))


def _matching() -> ColumnElement[bool]:
    """Chats whose title, or a user or assistant message of which, matches (LIKE, escape `!`) a pattern.

    The title is matched against `in_title`, messages against `in_text`: message content is stored as
    JSON text, so the query is looked for as JSON writes it (see `_patterns`).
    """
    in_title = func.lower(chats.c.title).like(bindparam("in_title"), escape="!")
    in_text = func.lower(cast(messages.c.content, Text)).like(bindparam("in_text"), escape="!")
    said = (
        select(messages.c.id)
        .where(messages.c.chat_id == chats.c.id, or_(messages.c.role == "user", messages.c.role == "assistant"),
               messages.c.hidden == false(), runlog.CURRENT, in_text)
        .exists()
    )  # fmt: skip
    return in_title | said


_LISTED = select(*runlog.CHAT_COLUMNS).order_by(chats.c.updated_at.desc()).limit(_LIMIT)
LIST_CHATS = Sql(_LISTED.where(_OWNED))
FIND_CHATS = Sql(_LISTED.where(_OWNED, _matching()))
GET_CHAT = Sql(select(*runlog.CHAT_COLUMNS).where(chats.c.id == bindparam("chat_id"), _OWNED))
RENAME_CHAT = Sql(update(chats).where(chats.c.id == bindparam("chat_id")), columns=("title",))
HELD = Sql(
    select(chat_leases.c.chat_id).where(
        chat_leases.c.chat_id == bindparam("chat_id"), chat_leases.c.expires_at > bindparam("now")
    )
)
RUNS_OF = Sql(
    select(runs)
    .where(runs.c.chat_id == bindparam("chat_id"), runs.c.user_id == bindparam("user_id"),
           runs.c.team_id == bindparam("team_id"))
    .order_by(runs.c.started_at.desc(), runs.c.id.desc())
    .limit(_LIMIT)
)  # fmt: skip
ONE_RUN = Sql(
    select(runs)
    .where(runs.c.id == bindparam("run_id"), runs.c.chat_id == bindparam("chat_id"),
           runs.c.user_id == bindparam("user_id"), runs.c.team_id == bindparam("team_id"))
)  # fmt: skip
STEPS_OF_RUN = Sql(select(steps).where(steps.c.run_id == bindparam("run_id")).order_by(steps.c.seq))
UNFINISHED_STEPS = Sql(
    select(steps)
    .where(steps.c.run_id == bindparam("run_id"), steps.c.status != "completed", steps.c.status != "recovered")
    .order_by(steps.c.seq)
)
WAITING_FOR_CLIENT = Sql(
    select(runs.c.id, runs.c.chat_id)
    .where(runs.c.status == "waiting", runs.c.reason == "client_tools", runs.c.user_id == bindparam("user_id"),
           runs.c.team_id == bindparam("team_id"))
    .order_by(runs.c.started_at.desc(), runs.c.id.desc())
    .limit(_LIMIT)
)  # fmt: skip
WAITING_RUNS_LOOKED_AT = 20  # a client answers the calls it was just given: the newest waiting runs suffice
RUNNING = Sql(select(runs.c.id, runs.c.owner, runs.c.heartbeat_at).where(runs.c.status == "running"))
RUNNING_RUN = Sql(
    select(runs.c.chat_id, runs.c.started_at).where(runs.c.id == bindparam("run_id"), runs.c.status == "running")
)
# Only a run still `running`: two processes that both found it so (each reaping what a dead one left)
# race here, and on PostgreSQL the second waits for the first's row lock, then finds nothing to mark.
INTERRUPT_RUN = Sql(
    update(runs).where(runs.c.id == bindparam("run_id"), runs.c.status == "running"),
    columns=("status", "reason", "error", "ended_at", "duration_ms"),
)
INTERRUPTED_STEP = Sql(steps.insert())
INTERRUPT_CHAT = Sql(
    update(chats).where(chats.c.id == bindparam("chat_id"), chats.c.last_run_id == bindparam("run_id")),
    columns=("last_status", "updated_at"),
)
MEMORY_GET = Sql(
    select(memory.c.value)
    .join(chats, chats.c.id == memory.c.chat_id)
    .where(memory.c.chat_id == bindparam("chat_id"), memory.c.key == bindparam("key"), _OWNED)
)
MEMORY_DELETE = Sql(delete(memory).where(memory.c.chat_id == bindparam("chat_id"), memory.c.key == bindparam("key")))
MEMORY_INSERT = Sql(memory.insert())


def _erasing() -> tuple[Sql, ...]:
    """Deleting every row stored for a chat: in each table naming one of its runs, then each naming it,
    then the chat. The tables are found in the schema, so a table added later is not left holding a
    deleted chat's data (the usage ledger, which holds no content, says it outlives chats: spend stays spent)."""
    ordered = [t for t in reversed(metadata.sorted_tables) if t is not chats and not t.info.get("outlives_chats")]
    its_runs = select(runs.c.id).where(runs.c.chat_id == bindparam("chat_id"))
    by_run = [delete(t).where(t.c.run_id.in_(its_runs)) for t in ordered if "run_id" in t.c and "chat_id" not in t.c]
    by_chat = [delete(t).where(t.c.chat_id == bindparam("chat_id")) for t in ordered if "chat_id" in t.c]
    return tuple(Sql(s) for s in (*by_run, *by_chat, delete(chats).where(chats.c.id == bindparam("chat_id"))))


ERASE_CHAT = _erasing()


def _require(identity: Identity | None) -> Identity:
    if not isinstance(identity, Identity):
        raise PermissionDenied("an identity is required for this store call")
    return identity


def _owner(identity: Identity) -> dict[str, str]:
    return {"user_id": identity.user_id, "team_id": team_of(identity)}


def run_record(row: Any) -> RunRecord:
    """A `runs` row as its record."""
    return RunRecord(
        id=row.id, chat_id=row.chat_id, user_id=row.user_id, team_id=row.team_id or None,
        assistant_id=row.assistant_id, trace_id=row.trace_id, owner=row.owner, started_at=row.started_at,
        status=row.status, reason=row.reason, error=row.error, usage=row.usage or {}, next=row.next,
        resumed_from=row.resumed_from, ended_at=row.ended_at, duration_ms=row.duration_ms,
        app_version=row.app_version, carry=row.carry,
    )  # fmt: skip


def _step(row: Any) -> StepRecord:
    return StepRecord(row.id, row.run_id, row.seq, row.type, row.status, row.started_at, row.thread_id,
                      step_inputs.read(row.type, row.input), row.output, row.error, row.ended_at,
                      row.transition)  # fmt: skip


class ChatStore:
    """The chat half of `SqlStore` (see store/sql.py for how it is opened)."""

    db: Database
    clock: Callable[[], float]

    async def start_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], rewind: Rewind | None = None
    ) -> None:
        """Write-ahead: the clean input and a `running` run are durable before any model is called; what a
        `rewind` replaces is replaced in the same transaction."""
        identity = _require(identity)
        now = self.clock()

        def work(tx: Tx) -> None:
            chat = _locked(tx, identity, run)
            if chat is not None and rewind is not None:
                versions.rewind(tx, run.chat_id, run.id, rewind)
            runlog.start(tx, identity, run, chat, new, now)

        await self.db.write_tx(work)

    async def load_and_start(
        self, identity: Identity, run: RunRecord, limit: int, given: Sequence[ChatMessage],
        rewind: Rewind | None = None,
    ) -> Loaded:  # fmt: skip
        """History and write-ahead in one transaction: the last `limit` messages are read, then the given
        input is stored, less its leading messages that repeat the end of that history (clients resend
        the conversation; see `messages.overlap`). A `rewind` (regenerate, edit) first makes the end of the
        chat an earlier version (store/versions.py), and its input is stored whole: it is no resent history.

        Being one transaction, no other run's messages can land in between: the input is compared with
        the chat as it is when it is written. A history that cannot be read raises `HistoryUnavailable`
        with nothing written; a failed write raises as it is.
        """
        identity = _require(identity)
        now = self.clock()

        def work(tx: Tx) -> Loaded:
            chat = _locked(tx, identity, run)
            unseen = set[str]()  # the calls the client was to run: what it resends has none of their results
            if chat is not None and chat.last_status == "waiting" and run.resumed_from is None:
                approvals.deny_pending(tx, run.chat_id, actor_of(identity), now)  # a new message (CONTRACT §4.8)
                unseen = approvals.close_client_calls(tx, run.chat_id, chat.last_run_id)  # (§9.2)
            if chat is not None and rewind is not None:
                versions.rewind(tx, run.chat_id, run.id, rewind)
            try:
                past = self.read_history(tx, run.chat_id, limit, since_summary=True) if chat is not None else []
            except Exception as exc:
                raise HistoryUnavailable(str(exc) or type(exc).__name__) from exc
            sent, repeated = runlog.fresh_input(past, given, unseen)
            fresh = list(given[0 if rewind is not None else repeated :])
            runlog.start(tx, identity, run, chat, fresh, now)
            return Loaded(past, sent, fresh)

        return await self.db.write_tx(work)

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None:  # fmt: skip
        """The deferred flush: the run's messages, steps and outcome, in one transaction; with the calls it
        waits for when it ends `waiting`; with the chat's lease let go when `release` says so."""
        identity = _require(identity)
        fallback = self.clock()

        def work(tx: Tx) -> None:
            chat = _locked(tx, identity, run)
            if chat is None:
                raise NotFound(f"no chat '{run.chat_id}'")
            runlog.finish(tx, run, chat, new, done, fallback)
            approvals.add(tx, run.chat_id, waiting, fallback)
            if release is not None:
                let_go(tx, release)

        await self.db.write_tx(work)

    async def commit_steps(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        carry: Any = None,
    ) -> None:  # fmt: skip
        """The step journal: messages and completed steps of a running run, in one small transaction; with
        the run's carry (what it decided so far) when it changed."""
        identity = _require(identity)

        def work(tx: Tx) -> None:
            chat = _locked(tx, identity, run)
            if chat is None:
                raise NotFound(f"no chat '{run.chat_id}'")
            runlog.journal(tx, run, chat, new, done, carry)

        await self.db.write_tx(work)

    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None:
        """The caller's chat, None if there is none by that id, NotFound if it is somebody else's."""
        identity = _require(identity)
        return await self.db.read_tx(lambda tx: runlog.owned_chat(tx, identity, chat_id, lock=False))

    async def get_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None:
        identity = _require(identity)
        found = await self.db.read_tx(lambda tx: tx.tuples(GET_CHAT, {"chat_id": chat_id, **_owner(identity)}))
        return chat_record(found[0]) if found else None

    async def list_chats(self, identity: Identity, limit: int = 100, query: str | None = None) -> list[ChatRecord]:
        """The caller's chats, most recently active first; with `query`, only those it finds (see `_matching`)."""
        identity = _require(identity)
        params = {**_owner(identity), "limit": limit}
        if query:
            params |= _patterns(query)
        found = await self.db.read_tx(lambda tx: tx.tuples(FIND_CHATS if query else LIST_CHATS, params))
        return [chat_record(r) for r in found]

    async def rename_chat(self, identity: Identity, chat_id: str, title: str) -> ChatRecord:
        """Give the caller's chat a title of their own (`clean_title` says which); NotFound for any other chat."""
        identity = _require(identity)
        title = clean_title(title)

        def work(tx: Tx) -> ChatRecord:
            chat = runlog.owned_chat(tx, identity, chat_id, lock=True)
            if chat is None:
                raise NotFound(f"no chat '{chat_id}'")
            tx.execute(RENAME_CHAT, {"title": title, "chat_id": chat_id})
            return replace(chat, title=title)

        return await self.db.write_tx(work)

    async def delete_chat(self, identity: Identity, chat_id: str) -> bool:
        """Delete the caller's chat and everything stored for it; NotFound for any other chat.

        False, with nothing deleted, while a process holds the chat for a run (its lease is live:
        PostgreSQL). Runs of this process are for the caller to rule out first; the chat's row is
        locked here, so a run's write-ahead on PostgreSQL waits for the deletion to commit.
        """
        identity = _require(identity)
        now = self.clock()

        def work(tx: Tx) -> bool:
            if runlog.owned_chat(tx, identity, chat_id, lock=True) is None:
                raise NotFound(f"no chat '{chat_id}'")
            if tx.first(HELD, {"chat_id": chat_id, "now": now}) is not None:
                return False
            for statement in ERASE_CHAT:
                tx.execute(statement, {"chat_id": chat_id})
            return True

        return await self.db.write_tx(work)

    async def history(
        self, identity: Identity, chat_id: str, limit: int | None = None, *, versions: bool = False
    ) -> list[ChatMessage]:
        """The chat's current messages in order; with `limit`, only the last `limit` of them; with
        `versions` (and no limit), the earlier versions too, each in its place. A call's result says
        what a person decided about the call, if it waited for one."""
        identity = _require(identity)

        def work(tx: Tx) -> list[ChatMessage]:
            if runlog.owned_chat(tx, identity, chat_id, lock=False) is None:
                return []
            found = (
                runlog.messages_of(tx, chat_id, limit, versions=True)
                if versions
                else self.read_history(tx, chat_id, limit)
            )
            decided = approvals.decided_in(tx, chat_id)
            for message in found if decided else ():
                decision = decided.get(message.id) if message.role == "tool" else None
                message.approval = decision.decision() if decision is not None else None
            return found

        return await self.db.read_tx(work)

    def read_history(
        self, tx: Tx, chat_id: str, limit: int | None, *, since_summary: bool = False
    ) -> list[ChatMessage]:
        """The messages of a chat whose owner was checked in this transaction, oldest first; `since_summary`:
        what a run is sent, from the chat's latest summary on (`runlog.context_of`)."""
        if since_summary and limit is not None:
            return runlog.context_of(tx, chat_id, limit)
        return runlog.messages_of(tx, chat_id, limit)

    async def runs_of(self, identity: Identity, chat_id: str, limit: int = 100) -> list[RunRecord]:
        """The chat's runs, newest first."""
        identity = _require(identity)
        params = {"chat_id": chat_id, **_owner(identity), "limit": limit}
        return [run_record(row) for row in await self.db.read_tx(lambda tx: tx.all(RUNS_OF, params))]

    async def latest_run(self, identity: Identity, chat_id: str) -> RunRecord | None:
        found = await self.runs_of(identity, chat_id, limit=1)
        return found[0] if found else None

    async def run_view(self, identity: Identity, chat_id: str, run_id: str) -> RunView | None:
        """One run of the caller's chat and all its steps in order; None if there is no such run of theirs."""
        identity = _require(identity)
        params = {"run_id": run_id, "chat_id": chat_id, **_owner(identity)}

        def work(tx: Tx) -> RunView | None:
            row = tx.first(ONE_RUN, params)
            if row is None:
                return None
            return RunView(run_record(row), tuple(_step(r) for r in tx.all(STEPS_OF_RUN, {"run_id": run_id})))

        return await self.db.read_tx(work)

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint | None:
        """The latest run's unfinished steps, if that run did not complete (a later completed run clears it);
        a run that waits for approvals has them, decided or not. One transaction: the run and its steps
        (a resume, a client's tool results and a decision read it before they start their run)."""
        identity = _require(identity)
        return await self.db.read_tx(lambda tx: _resume_point(tx, identity, chat_id))

    async def waiting_for_client(self, identity: Identity, call_ids: Collection[str]) -> str | None:
        """The caller's chat (the newest) whose run waits for the client's results of calls all among
        `call_ids`, if any: a client that keeps the conversation itself continues it without naming it."""
        identity = _require(identity)
        given = set(call_ids)

        def work(tx: Tx) -> str | None:
            for row in tx.all(WAITING_FOR_CLIENT, {**_owner(identity), "limit": WAITING_RUNS_LOOKED_AT}):
                rounds = tx.all(approvals.WAITING_ROUNDS, {"run_id": row.id})
                ids = {call_id for r in rounds for call_id in approvals.round_ids(r.input)}
                if ids and ids <= given:
                    return row.chat_id
            return None

        return await self.db.read_tx(work)

    async def decide_approvals(self, identity: Identity, chat_id: str, run_id: str,
                               decisions: Sequence[Approval]) -> ResumePoint | None:  # fmt: skip
        """Write a person's decisions on the calls a run of the caller's chat waits for; ApprovalConflict
        (nothing written) when one of them is no longer pending. Returns the chat's resume point as the
        decisions leave it, read in the same transaction (the run they continue starts from it)."""
        identity = _require(identity)
        by, now = actor_of(identity), self.clock()

        def work(tx: Tx) -> ResumePoint | None:
            if runlog.owned_chat(tx, identity, chat_id, lock=True) is None:
                raise NotFound(f"no chat '{chat_id}'")
            approvals.decide(tx, chat_id, run_id, decisions, by, now)
            return _resume_point(tx, identity, chat_id)

        return await self.db.write_tx(work)

    async def recover_interrupted(self, operator: Operator, is_dead: Callable[[str, float], bool]) -> list[str]:
        """Runs left `running` by a process that is gone become `interrupted`, with a resume point after
        their last committed step (`mark_interrupted`).

        `is_dead(owner, heartbeat_at)` decides, between transactions; the operator token is required
        (this spans tenants).
        """
        if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied("recovering interrupted runs is an operator action")
        found = await self.db.read_tx(lambda tx: tx.all(RUNNING))
        dead = [row.id for row in found if is_dead(row.owner, row.heartbeat_at)]
        now = self.clock()
        for run_id in dead:
            await self.db.write_tx(lambda tx, run_id=run_id: mark_interrupted(tx, run_id, now, "killed or crashed"))
        return dead

    async def memory_get(self, identity: Identity, chat_id: str, key: str) -> Any:
        """A hook's per-chat memory (ctx.memory.get); None when unset. A key that could not be stored is
        a UsageError on every database (PostgreSQL would fail on it, SQLite would take it)."""
        identity = _require(identity)
        _check_memory_key(key)
        params = {"chat_id": chat_id, "key": key, **_owner(identity)}
        return await self.db.read_tx(lambda tx: tx.scalar(MEMORY_GET, params))

    async def memory_set(self, identity: Identity, chat_id: str, key: str, value: Any) -> None:
        identity = _require(identity)
        _check_memory_key(key)
        now = self.clock()

        def work(tx: Tx) -> None:
            if runlog.owned_chat(tx, identity, chat_id, lock=False) is None:
                raise NotFound(f"no chat '{chat_id}'")
            tx.execute(MEMORY_DELETE, {"chat_id": chat_id, "key": key})
            tx.execute(MEMORY_INSERT, {"chat_id": chat_id, "key": key, "value": value, "updated_at": now})

        await self.db.write_tx(work)


MEMORY_KEY_MAX = 256  # the memory.key column's size (schema.py)


def _check_memory_key(key: object) -> None:
    """A memory key is a string of at most MEMORY_KEY_MAX characters, without control characters (NUL
    among them) or lone surrogates, which PostgreSQL cannot store."""
    if not isinstance(key, str):
        raise UsageError(f"a memory key is a string, not {type(key).__name__}")
    if len(key) > MEMORY_KEY_MAX:
        raise UsageError(f"a memory key may have at most {MEMORY_KEY_MAX} characters; this one has {len(key)}")
    bad = next((c for c in key if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        raise UsageError(f"a memory key may not contain U+{ord(bad):04X} (a key is printable text)")


def clean_title(title: str) -> str:
    """A title people set: one line of plain text, 1-200 characters once the spaces around it are trimmed.

    Anything else is a UsageError: control characters (line breaks, tabs, NUL), lone surrogates,
    and the invisible direction overrides that could make one title pass for another.
    """
    bad = next((c for c in title if c in _BIDI or unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        raise UsageError(f"title: U+{ord(bad):04X} is not allowed (a title is one line of plain text)")
    title = title.strip()
    if not 1 <= len(title) <= TITLE_MAX:
        raise UsageError(f"title: expected 1-{TITLE_MAX} characters, got {len(title)}")
    return title


def _like(text: str) -> str:
    """A LIKE pattern finding `text` anywhere (escape character `!`)."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def _patterns(query: str) -> dict[str, str]:
    """What `_matching` looks for: the query in any case (for every letter on PostgreSQL; for ASCII
    letters on SQLite, whose lower() knows no other), in a title and as JSON writes it in a message."""
    needle = query.lower()
    return {"in_title": _like(runlog.plain_text(needle) or ""), "in_text": _like(json.dumps(needle)[1:-1])}


def _locked(tx: Tx, identity: Identity, run: RunRecord) -> ChatRecord | None:
    """The run's chat, locked for the rest of the transaction (PostgreSQL; SQLite's write lock covers it)."""
    return runlog.owned_chat(tx, identity, run.chat_id, lock=True)


def _resume_point(tx: Tx, identity: Identity, chat_id: str) -> ResumePoint | None:
    """The chat's latest run and its unfinished steps (and approvals, if it waits), if it did not complete."""
    latest = tx.all(RUNS_OF, {"chat_id": chat_id, **_owner(identity), "limit": 1})
    run = run_record(latest[0]) if latest else None
    if run is None or run.status in ("completed", "running"):
        return None
    found = tuple(_step(r) for r in tx.all(UNFINISHED_STEPS, {"run_id": run.id}))
    return ResumePoint(run, found, approvals.of_run(tx, run.id) if run.status == "waiting" else ())


def mark_interrupted(tx: Tx, run_id: str, now: float, why: str) -> bool:
    """A `running` run whose process is gone becomes `interrupted`, resumable after the last step its
    journal committed (store/journal.py)."""
    row = tx.first(RUNNING_RUN, {"run_id": run_id})
    if row is None:
        return False  # it finished meanwhile
    error = {"message": f"the process running this run stopped before it finished ({why})"}
    marked = tx.execute(INTERRUPT_RUN, {"status": "interrupted", "reason": "internal_error", "error": error,
                                        "ended_at": now, "duration_ms": int((now - row.started_at) * 1000),
                                        "run_id": run_id})  # fmt: skip
    if not marked:
        return False  # another process marked it first (or it ended): its step is written already
    tx.execute(INTERRUPTED_STEP, journal.resume_step(tx, run_id, row.chat_id, error, row.started_at, now))
    tx.execute(INTERRUPT_CHAT, {"last_status": "interrupted", "updated_at": now, "chat_id": row.chat_id,
                                "run_id": run_id})  # fmt: skip
    return True
