"""Chats, their messages, runs and steps. Every query is scoped to the caller's identity.

A chat belongs to one (user, team) pair; anybody else asking for it gets `NotFound`, the same
answer as for a chat that does not exist, so ids reveal nothing.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Text, cast, delete, false, func, insert, select, update

from yao_agent.errors import HistoryUnavailable, NotFound, PermissionDenied, UsageError
from yao_agent.identity import Identity, Operator
from yao_agent.messages import ChatMessage
from yao_agent.store import runlog
from yao_agent.store.engine import Database, Tx
from yao_agent.store.records import ChatRecord, ResumePoint, RunRecord, StepRecord
from yao_agent.store.runlog import team_of
from yao_agent.store.schema import chat_leases, chats, memory, messages, metadata, runs, steps

TITLE_MAX = 200
# Bidirectional embeddings, overrides and isolates: in a title they could make it read as another one.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _require(identity: Identity | None) -> Identity:
    if not isinstance(identity, Identity):
        raise PermissionDenied("an identity is required for this store call")
    return identity


def _owned(identity: Identity) -> Any:
    return (chats.c.user_id == identity.user_id) & (chats.c.team_id == team_of(identity))


def _chat(row: Any) -> ChatRecord:
    return ChatRecord(row.id, row.user_id, row.team_id or None, row.assistant_id, row.title, row.created_at,
                      row.updated_at, row.last_status, row.last_run_id, row.message_count)  # fmt: skip


def _run(row: Any) -> RunRecord:
    return RunRecord(
        id=row.id, chat_id=row.chat_id, user_id=row.user_id, team_id=row.team_id or None,
        assistant_id=row.assistant_id, trace_id=row.trace_id, owner=row.owner, started_at=row.started_at,
        status=row.status, reason=row.reason, error=row.error, usage=row.usage or {}, next=row.next,
        resumed_from=row.resumed_from, ended_at=row.ended_at, duration_ms=row.duration_ms,
    )  # fmt: skip


def _step(row: Any) -> StepRecord:
    return StepRecord(row.id, row.run_id, row.seq, row.type, row.status, row.started_at, row.thread_id,
                      row.input, row.output, row.error, row.ended_at, row.transition)  # fmt: skip


class ChatStore:
    """The chat half of `SqlStore` (see store/sql.py for how it is opened)."""

    db: Database
    clock: Callable[[], float]

    async def start_run(self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage]) -> None:
        """Write-ahead: the clean input and a `running` run are durable before any model is called."""
        identity = _require(identity)
        now = self.clock()
        await self.db.write_tx(lambda tx: runlog.start(tx, identity, run, _locked(tx, identity, run), new, now))

    async def load_and_start(
        self,
        identity: Identity,
        run: RunRecord,
        limit: int,
        clean: Callable[[list[ChatMessage]], Sequence[ChatMessage]],
    ) -> list[ChatMessage]:
        """History and write-ahead in one trip: the last `limit` messages, then `clean(history)` stored.

        Returns the history. Being one transaction, no other run's messages can land in between.
        A history that cannot be read raises `HistoryUnavailable` with nothing written; a failed
        write raises as it is.
        """
        identity = _require(identity)
        now = self.clock()

        def work(tx: Tx) -> list[ChatMessage]:
            chat = _locked(tx, identity, run)
            try:
                past = self.read_history(tx, run.chat_id, limit) if chat is not None else []
            except Exception as exc:
                raise HistoryUnavailable(str(exc) or type(exc).__name__) from exc
            runlog.start(tx, identity, run, chat, clean(past), now)
            return past

        return await self.db.write_tx(work)

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord]
    ) -> None:
        """The deferred flush: the run's messages, steps and outcome, in one transaction."""
        identity = _require(identity)
        fallback = self.clock()

        def work(tx: Tx) -> None:
            chat = _locked(tx, identity, run)
            if chat is None:
                raise NotFound(f"no chat '{run.chat_id}'")
            runlog.finish(tx, run, chat, new, done, fallback)

        await self.db.write_tx(work)

    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None:
        """The caller's chat, None if there is none by that id, NotFound if it is somebody else's."""
        identity = _require(identity)
        return await self.db.read_tx(lambda tx: runlog.owned_chat(tx, identity, chat_id, lock=False))

    async def get_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None:
        identity = _require(identity)
        query = select(chats).where(chats.c.id == chat_id, _owned(identity))
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return _chat(row) if row is not None else None

    async def list_chats(self, identity: Identity, limit: int = 100, query: str | None = None) -> list[ChatRecord]:
        """The caller's chats, most recently active first; with `query`, only those it finds (see `_matching`)."""
        identity = _require(identity)
        where = _owned(identity) if not query else _owned(identity) & _matching(query)
        found = select(chats).where(where).order_by(chats.c.updated_at.desc()).limit(limit)
        return [_chat(r) for r in await self.db.read(lambda conn: conn.execute(found).all())]

    async def rename_chat(self, identity: Identity, chat_id: str, title: str) -> ChatRecord:
        """Give the caller's chat a title of their own (`clean_title` says which); NotFound for any other chat."""
        identity = _require(identity)
        title = clean_title(title)

        def work(conn: Connection) -> ChatRecord:
            chat = runlog.owned_chat(Tx.of(conn), identity, chat_id, lock=True)
            if chat is None:
                raise NotFound(f"no chat '{chat_id}'")
            conn.execute(update(chats).where(chats.c.id == chat_id).values(title=title))
            return replace(chat, title=title)

        return await self.db.write(work)

    async def delete_chat(self, identity: Identity, chat_id: str) -> bool:
        """Delete the caller's chat and everything stored for it; NotFound for any other chat.

        False, with nothing deleted, while a process holds the chat for a run (its lease is live:
        PostgreSQL). Runs of this process are for the caller to rule out first; the chat's row is
        locked here, so a run's write-ahead on PostgreSQL waits for the deletion to commit.
        """
        identity = _require(identity)
        now = self.clock()

        def work(conn: Connection) -> bool:
            if runlog.owned_chat(Tx.of(conn), identity, chat_id, lock=True) is None:
                raise NotFound(f"no chat '{chat_id}'")
            held = select(chat_leases.c.chat_id).where(chat_leases.c.chat_id == chat_id, chat_leases.c.expires_at > now)
            if conn.execute(held).first() is not None:
                return False
            _erase(conn, chat_id)
            return True

        return await self.db.write(work)

    async def history(self, identity: Identity, chat_id: str, limit: int | None = None) -> list[ChatMessage]:
        """The chat's messages in order; with `limit`, only the last `limit` of them."""
        identity = _require(identity)

        def work(tx: Tx) -> list[ChatMessage]:
            owned = runlog.owned_chat(tx, identity, chat_id, lock=False) is not None
            return self.read_history(tx, chat_id, limit) if owned else []

        return await self.db.read_tx(work)

    def read_history(self, tx: Tx, chat_id: str, limit: int | None) -> list[ChatMessage]:
        """The messages of a chat whose owner was checked in this transaction, oldest first."""
        return runlog.messages_of(tx, chat_id, limit)

    async def runs_of(self, identity: Identity, chat_id: str, limit: int = 100) -> list[RunRecord]:
        """The chat's runs, newest first."""
        identity = _require(identity)
        query = (
            select(runs)
            .where(runs.c.chat_id == chat_id, runs.c.user_id == identity.user_id, runs.c.team_id == team_of(identity))
            .order_by(runs.c.started_at.desc(), runs.c.id.desc())
            .limit(limit)
        )
        return [_run(row) for row in await self.db.read(lambda conn: conn.execute(query).all())]

    async def latest_run(self, identity: Identity, chat_id: str) -> RunRecord | None:
        found = await self.runs_of(identity, chat_id, limit=1)
        return found[0] if found else None

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint | None:
        """The latest run's unfinished steps, if that run did not complete (a later completed run clears it)."""
        run = await self.latest_run(identity, chat_id)
        if run is None or run.status in ("completed", "running"):
            return None
        unfinished = steps.c.status.not_in(("completed", "recovered"))
        query = select(steps).where(steps.c.run_id == run.id, unfinished).order_by(steps.c.seq)
        found = await self.db.read(lambda conn: conn.execute(query).all())
        return ResumePoint(run, tuple(_step(r) for r in found))

    async def recover_interrupted(self, operator: Operator, is_dead: Callable[[str, float], bool]) -> list[str]:
        """Runs left `running` by a process that is gone become `interrupted`, with a resume point at `llm`.

        `is_dead(owner, heartbeat_at)` decides; the operator token is required (this spans tenants).
        """
        if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied("recovering interrupted runs is an operator action")
        found = await self.db.read(lambda conn: conn.execute(select(runs).where(runs.c.status == "running")).all())
        dead = [row.id for row in found if is_dead(row.owner, row.heartbeat_at)]
        now = self.clock()
        for run_id in dead:
            await self.db.write(lambda conn, run_id=run_id: mark_interrupted(conn, run_id, now, "killed or crashed"))
        return dead

    async def memory_get(self, identity: Identity, chat_id: str, key: str) -> Any:
        """A hook's per-chat memory (ctx.memory.get); None when unset. A key that could not be stored is
        a UsageError on every database (PostgreSQL would fail on it, SQLite would take it)."""
        identity = _require(identity)
        _check_memory_key(key)
        query = (
            select(memory.c.value)
            .join(chats, chats.c.id == memory.c.chat_id)
            .where(memory.c.chat_id == chat_id, memory.c.key == key, _owned(identity))
        )
        return await self.db.read(lambda conn: conn.execute(query).scalar_one_or_none())

    async def memory_set(self, identity: Identity, chat_id: str, key: str, value: Any) -> None:
        identity = _require(identity)
        _check_memory_key(key)
        now = self.clock()

        def work(conn: Connection) -> None:
            if runlog.owned_chat(Tx.of(conn), identity, chat_id, lock=False) is None:
                raise NotFound(f"no chat '{chat_id}'")
            conn.execute(delete(memory).where(memory.c.chat_id == chat_id, memory.c.key == key))
            conn.execute(insert(memory).values(chat_id=chat_id, key=key, value=value, updated_at=now))

        await self.db.write(work)


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


def _matching(query: str) -> Any:
    """Chats whose title, or a user or assistant message of which, contains `query`, in any case.

    (Any case for every letter on PostgreSQL; for ASCII letters on SQLite, whose lower() knows no
    other.) Message content is stored as JSON text, so the query is looked for as JSON writes it.
    """
    needle = query.lower()
    in_title = func.lower(chats.c.title).like(_like(runlog.plain_text(needle) or ""), escape="!")
    in_text = func.lower(cast(messages.c.content, Text)).like(_like(json.dumps(needle)[1:-1]), escape="!")
    said = (
        select(messages.c.id)
        .where(messages.c.chat_id == chats.c.id, messages.c.role.in_(("user", "assistant")),
               messages.c.hidden == false(), in_text)
        .exists()
    )  # fmt: skip
    return in_title | said


def _erase(conn: Connection, chat_id: str) -> None:
    """Every row stored for a chat: in each table naming one of its runs, then each naming it, then the chat.

    The tables are found in the schema, so a table added later is not left holding a deleted chat's data.
    """
    ordered = [t for t in reversed(metadata.sorted_tables) if t is not chats]  # children before parents
    its_runs = select(runs.c.id).where(runs.c.chat_id == chat_id)
    for table in ordered:
        if "run_id" in table.c and "chat_id" not in table.c:
            conn.execute(delete(table).where(table.c.run_id.in_(its_runs)))
    for table in ordered:
        if "chat_id" in table.c:
            conn.execute(delete(table).where(table.c.chat_id == chat_id))
    conn.execute(delete(chats).where(chats.c.id == chat_id))


def _locked(tx: Tx, identity: Identity, run: RunRecord) -> ChatRecord | None:
    """The run's chat, locked for the rest of the transaction (PostgreSQL; SQLite's write lock covers it)."""
    return runlog.owned_chat(tx, identity, run.chat_id, lock=True)


def mark_interrupted(conn: Connection, run_id: str, now: float, why: str) -> bool:
    """A `running` run whose process is gone becomes `interrupted`, resumable from its model call."""
    row = conn.execute(select(runs).where(runs.c.id == run_id, runs.c.status == "running")).first()
    if row is None:
        return False  # it finished meanwhile
    error = {"message": f"the process running this run stopped before it finished ({why})"}
    conn.execute(update(runs).where(runs.c.id == run_id).values(
        status="interrupted", reason="internal_error", error=error, ended_at=now,
        duration_ms=int((now - row.started_at) * 1000)))  # fmt: skip
    step = StepRecord(id=f"{run_id}-interrupted", run_id=run_id, seq=1, type="llm", status="interrupted",
                      started_at=row.started_at, error=error, ended_at=now)  # fmt: skip
    conn.execute(
        insert(steps).values(
            id=step.id,
            run_id=step.run_id,
            seq=step.seq,
            type=step.type,
            status=step.status,
            error=step.error,
            started_at=step.started_at,
            ended_at=step.ended_at,
        )
    )
    conn.execute(update(chats).where(chats.c.id == row.chat_id, chats.c.last_run_id == run_id).values(
        last_status="interrupted", updated_at=now))  # fmt: skip
    return True
