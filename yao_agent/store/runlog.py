"""What every request reads and every run writes: role settings, write-ahead and flush.

Each run opens two transactions (CONTRACT §4 step 3): one before the model is called, one at the end;
in between, the step journal commits each step as it completes (`journal`), in a small one of its own.
Their statements are the store's like any other (tx.py: built from schema.py, compiled once per
database, run on the driver's cursor); they are gathered here because they are the hot path, and
`bench/flush.py` measures them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, select, update

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import NotFound
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, Cited, ToolCall, as_client_saw, overlap, provider_messages
from yao_agent.store import ledger, step_inputs
from yao_agent.store.records import ChatRecord, RunRecord, StepRecord
from yao_agent.store.schema import SUMMARY_ROLE, chats, messages, role_settings, runs, steps
from yao_agent.store.tx import Sql, Tx

TITLE_CHARS = 80

# The columns a `ChatRecord` is made of, in its order (see `chat_record`).
CHAT_COLUMNS = [chats.c[name] for name in ("id", "user_id", "team_id", "assistant_id", "title", "created_at",
                                           "updated_at", "last_status", "last_run_id", "message_count")]  # fmt: skip
_CHAT = select(*CHAT_COLUMNS).where(chats.c.id == bindparam("chat_id"))
SELECT_CHAT = Sql(_CHAT)
LOCK_CHAT = Sql(_CHAT.with_for_update())  # PostgreSQL locks the row; SQLite's write lock covers it
_OF_CHAT = messages.c.chat_id == bindparam("chat_id")
# The chat as it is now: an earlier version (replaced by a regeneration or an edit) is read by nobody but
# a reader asking for the versions (`messages_of`), so no run, resume or compaction ever sees one.
CURRENT = messages.c.replaced_by.is_(None)
# What `_message` reads, in the order it unpacks them (every message of a run's history is read so).
_READ = [messages.c[name] for name in ("id", "seq", "run_id", "role", "content", "tool_calls", "tool_call_id",
                                       "reasoning", "status", "thread_id", "created_at", "hidden",
                                       "summarises", "connector", "model", "citations", "replaced_by")]  # fmt: skip
READ_COLUMNS = _READ
_LAST = bindparam("limit", type_=Integer)
SELECT_HISTORY = Sql(select(*_READ).where(_OF_CHAT, CURRENT).order_by(messages.c.seq.desc()).limit(_LAST))
SELECT_LATEST_SUMMARY = Sql(
    select(*_READ).where(_OF_CHAT, CURRENT, messages.c.role == SUMMARY_ROLE).order_by(messages.c.seq.desc()).limit(1)
)
_covered = messages.alias("covered")
_AFTER_COVERED = select(_covered.c.seq).where(
    _covered.c.id == bindparam("last_id"), _covered.c.chat_id == bindparam("chat_id")
)
SELECT_SINCE_SUMMARY = Sql(  # what follows a summary's last message, other summaries aside
    select(*_READ)
    .where(_OF_CHAT, CURRENT, messages.c.seq > _AFTER_COVERED.scalar_subquery(), messages.c.role != SUMMARY_ROLE)
    .order_by(messages.c.seq.desc())
    .limit(_LAST)
)
SELECT_ALL_HISTORY = Sql(select(*_READ).where(_OF_CHAT, CURRENT).order_by(messages.c.seq))
SELECT_VERSIONS = Sql(select(*_READ).where(_OF_CHAT).order_by(messages.c.seq))  # the earlier versions too
INSERT_CHAT = Sql(chats.insert())
INSERT_MESSAGE = Sql(messages.insert())
REPLACE_MESSAGE = Sql(
    update(messages).where(messages.c.id == bindparam("id"), _OF_CHAT),
    columns=("run_id", "content", "status", "created_at", "hidden"),
)
_STARTED = ("id", "chat_id", "user_id", "team_id", "assistant_id", "trace_id", "status", "owner", "resumed_from",
            "started_at", "heartbeat_at", "app_version")  # fmt: skip
INSERT_RUN = Sql(runs.insert(), columns=_STARTED)  # its outcome's columns are the flush's
INSERT_STEP = Sql(steps.insert())
_RUN = update(runs).where(runs.c.id == bindparam("run_id"))
FINISH_RUN = Sql(_RUN, columns=("status", "reason", "error", "usage", "next", "ended_at", "duration_ms", "carry"))
CARRY_RUN = Sql(_RUN, columns=("carry",))
_OF_CHAT_ROW = update(chats).where(chats.c.id == bindparam("chat_id"))
START_CHAT = Sql(_OF_CHAT_ROW, columns=("message_count", "updated_at", "last_status", "last_run_id"))
FINISH_CHAT = Sql(_OF_CHAT_ROW, columns=("message_count", "updated_at", "last_status"))
COUNT_CHAT = Sql(_OF_CHAT_ROW, columns=("message_count",))
SELECT_ROLE = Sql(
    select(role_settings.c.connectors).where(
        role_settings.c.scope_kind == bindparam("kind"),
        role_settings.c.scope_id == bindparam("owner"),
        role_settings.c.role == bindparam("role"),
    )
)


def team_of(identity: Identity) -> str:
    return identity.team_id or ""


def plain_text(value: str | None) -> str | None:
    """Text for a plain text column: PostgreSQL refuses NUL in text, so it is dropped everywhere alike."""
    return value.replace("\x00", "") if value and "\x00" in value else value


SCOPE_ROLES = Sql(
    select(role_settings.c.role, role_settings.c.connectors).where(
        role_settings.c.scope_kind == bindparam("kind"), role_settings.c.scope_id == bindparam("owner")
    )
)


def scope_roles(tx: Tx, scope: tuple[str, str]) -> dict[str, tuple[str, ...]]:
    """Every role one scope sets, with the connectors it maps each to (a scope sets a handful at most)."""
    return {role: tuple(found) for role, found in tx.tuples(SCOPE_ROLES, {"kind": scope[0], "owner": scope[1]})
            if found}  # fmt: skip


def role_connectors(tx: Tx, kind: str, owner: str, role: str) -> tuple[str, ...] | None:
    """The connectors one scope maps a role to, None if it sets none."""
    found = tx.scalar(SELECT_ROLE, {"kind": kind, "owner": owner, "role": role})
    return tuple(found) if found else None


def chat_record(row: Sequence[Any]) -> ChatRecord:
    """A chat from a row of CHAT_COLUMNS."""
    chat_id, user_id, team_id, assistant_id, title, created_at, updated_at, last_status, last_run_id, count = row
    return ChatRecord(chat_id, user_id, team_id or None, assistant_id, title, created_at, updated_at, last_status,
                      last_run_id, count)  # fmt: skip


def owned_chat(tx: Tx, identity: Identity, chat_id: str, *, lock: bool) -> ChatRecord | None:
    """The caller's chat (row-locked on PostgreSQL with `lock`), None if there is none by that id."""
    found = tx.tuples(LOCK_CHAT if lock else SELECT_CHAT, {"chat_id": chat_id})
    if not found:
        return None
    row = found[0]
    if row[1] != identity.user_id or row[2] != team_of(identity):
        raise NotFound(f"no chat '{chat_id}'")  # another tenant's: the same answer as a missing one
    return chat_record(row)


def messages_of(tx: Tx, chat_id: str, limit: int | None, *, versions: bool = False) -> list[ChatMessage]:
    """A chat's current messages, oldest first; with `limit`, only the last `limit` of them; with
    `versions` (and no limit), the earlier versions too, each in its place. No scope check."""
    if limit is None:
        found = tx.tuples(SELECT_VERSIONS if versions else SELECT_ALL_HISTORY, {"chat_id": chat_id})
        return [_message(row) for row in found]
    return [_message(row) for row in reversed(tx.tuples(SELECT_HISTORY, {"chat_id": chat_id, "limit": limit}))]


def context_of(tx: Tx, chat_id: str, limit: int) -> list[ChatMessage]:
    """What a run loads of its chat (CONTRACT §4 item 5): the latest summary, then the last `limit` of the
    messages after the last one it covers (the turns kept whole when it was made, and later ones);
    without a summary, the last `limit` messages. Oldest first. No scope check."""
    found = tx.tuples(SELECT_LATEST_SUMMARY, {"chat_id": chat_id})
    if not found:
        return messages_of(tx, chat_id, limit)
    summary = _message(found[0])
    last = summary.summarises[1] if summary.summarises else summary.id
    rows = tx.tuples(SELECT_SINCE_SUMMARY, {"chat_id": chat_id, "last_id": last, "limit": limit})
    return [summary, *(_message(row) for row in reversed(rows))]


def fresh_input(
    history: Sequence[ChatMessage], given: Sequence[ChatMessage], unseen: Collection[str] = ()
) -> tuple[list[dict[str, Any]], int]:
    """The history as a model is sent it, and how many of the given messages merely repeat its end (as
    the client has it: `unseen` are the calls it was to run and sent no result for, `as_client_saw`)."""
    known = provider_messages(history)
    return known, (overlap(as_client_saw(known, unseen), [m.to_provider() for m in given]) if known else 0)


def start(tx: Tx, identity: Identity, run: RunRecord, chat: ChatRecord | None, new: Sequence[ChatMessage],
          now: float) -> None:  # fmt: skip
    """Write-ahead: the chat (created on its first run), the clean input and a `running` run."""
    if chat is None:  # the chat is written first: its messages and runs refer to it
        title = next((m.content for m in new if m.role == "user" and isinstance(m.content, str)), "") or ""
        count = sum(1 for m in new if not m.replaces)
        tx.execute(INSERT_CHAT, {"id": run.chat_id, "user_id": identity.user_id, "team_id": team_of(identity),
                                 "assistant_id": run.assistant_id, "title": plain_text(title[:TITLE_CHARS]),
                                 "created_at": now, "updated_at": now, "last_status": "running",
                                 "last_run_id": run.id, "message_count": count})  # fmt: skip
        _append(tx, run.chat_id, 0, new)
    else:
        count = _append(tx, run.chat_id, chat.message_count, new)
        tx.execute(START_CHAT, {"message_count": count, "updated_at": now, "last_status": "running",
                                "last_run_id": run.id, "chat_id": run.chat_id})  # fmt: skip
    tx.execute(INSERT_RUN, _run_row(identity, run, now))


def finish(tx: Tx, run: RunRecord, chat: ChatRecord, new: Sequence[ChatMessage],
           done: Sequence[StepRecord], now: float) -> None:  # fmt: skip
    """The deferred flush: the run's messages, its steps, its outcome and the chat's new state."""
    count = _append(tx, run.chat_id, chat.message_count, new)
    if done:
        tx.executemany(INSERT_STEP, [_step_row(step) for step in done])
        ledger.record(tx, run, done)  # the model calls among them, in the usage ledger
    tx.execute(FINISH_RUN, {"status": run.status, "reason": run.reason, "error": run.error, "usage": run.usage,
                            "next": run.next, "ended_at": run.ended_at, "duration_ms": run.duration_ms,
                            "carry": run.carry, "run_id": run.id})  # fmt: skip
    tx.execute(FINISH_CHAT, {"message_count": count, "updated_at": run.ended_at or now, "last_status": run.status,
                             "chat_id": run.chat_id})  # fmt: skip


def journal(tx: Tx, run: RunRecord, chat: ChatRecord, new: Sequence[ChatMessage],
            done: Sequence[StepRecord], carry: Any = None) -> None:  # fmt: skip
    """The step journal: messages and completed steps of a run still going, committed as they complete
    (its outcome stays the flush's: `finish`), with what the run decided so far (`carry`) when given."""
    count = _append(tx, run.chat_id, chat.message_count, new)
    if done:
        tx.executemany(INSERT_STEP, [_step_row(step) for step in done])
        ledger.record(tx, run, done)
    if carry is not None:
        tx.execute(CARRY_RUN, {"carry": carry, "run_id": run.id})
    if count != chat.message_count:
        tx.execute(COUNT_CHAT, {"message_count": count, "chat_id": run.chat_id})


def append(tx: Tx, chat_id: str, start: int, given: Sequence[ChatMessage]) -> int:
    """Add messages after the chat's last (see `_append`); the chat's count is the caller's to write."""
    return _append(tx, chat_id, start, given)


def read_message(row: Any) -> ChatMessage:
    """A message from a row of the columns history reads (`READ_COLUMNS`)."""
    return _message(row)


def _append(tx: Tx, chat_id: str, start: int, given: Sequence[ChatMessage]) -> int:
    """Add messages after the chat's last; a replacing one overwrites its predecessor in place."""
    new = [m for m in given if not m.replaces]
    for offset, message in enumerate(new):
        message.seq = start + offset + 1
    if new:
        tx.executemany(INSERT_MESSAGE, [_message_row(m, chat_id) for m in new])
    replacing = [m for m in given if m.replaces]
    if replacing:
        tx.executemany(REPLACE_MESSAGE, [_message_row(m, chat_id) for m in replacing])
    return start + len(new)


def _run_row(identity: Identity, run: RunRecord, now: float) -> dict[str, Any]:
    return {"id": run.id, "chat_id": run.chat_id, "user_id": identity.user_id, "team_id": team_of(identity),
            "assistant_id": run.assistant_id, "trace_id": run.trace_id, "status": "running", "owner": run.owner,
            "resumed_from": run.resumed_from, "started_at": run.started_at, "heartbeat_at": now,
            "app_version": run.app_version}  # fmt: skip


def _message_row(message: ChatMessage, chat_id: str) -> dict[str, Any]:
    # What the model wrote when it was no JSON object is kept beside the `{}` a provider is sent: a resume
    # of the call (store/journal.py) answers it with its error again instead of running it with `{}`.
    calls = [c.to_dict() | ({"invalid": c.invalid} if c.invalid is not None else {}) for c in message.tool_calls]
    return {"id": message.id, "chat_id": chat_id, "seq": message.seq, "run_id": message.run_id,
            "role": message.role, "content": message.content, "tool_calls": calls or None,
            "tool_call_id": message.tool_call_id, "reasoning": plain_text(message.reasoning),
            "status": message.status, "thread_id": message.thread_id, "created_at": message.created_at,
            "hidden": message.hidden,
            "summarises": list(message.summarises) if message.summarises else None,
            "connector": message.connector, "model": message.model, "citations": _extras(message),
            "replaced_by": message.replaced_by}  # fmt: skip


def _extras(message: ChatMessage) -> dict[str, Any] | None:
    """What the `citations` column keeps of an assistant message: its references and citations, and the cut
    reply it continues — beside them, in the one JSON column an assistant message has, so `continues`
    needed no migration (an older row has no such key: it continues nothing)."""
    kept = message.cited.to_json() if message.cited is not None else {}
    if message.continues is not None:
        kept["continues"] = message.continues
    return kept or None


def _from_extras(stored: object) -> tuple[Cited | None, str | None]:
    """The references and citations, and the id of the reply it continues, from the `citations` column."""
    kept = as_mapping(stored)
    continues = kept.get("continues")
    cited = Cited.from_json(kept) if "references" in kept else None
    return cited, continues if isinstance(continues, str) else None


def _call(stored: Mapping[str, Any]) -> ToolCall:
    invalid = stored.get("invalid")
    if isinstance(invalid, str):
        return ToolCall(str(stored["id"]), str(stored["name"]), "{}", invalid=invalid)
    return ToolCall.written(stored["id"], stored["name"], stored["arguments"])


def _message(row: Any) -> ChatMessage:
    (message_id, seq, run_id, role, content, calls, tool_call_id, reasoning, status, thread_id, created_at, hidden,
     summarises, connector, model, citations, replaced_by) = row  # fmt: skip
    # `written`: a chat stored before invalid arguments were replaced must not carry them to a provider
    tool_calls = tuple(_call(c) for c in calls or ())
    cited, continues = _from_extras(citations)
    return ChatMessage(
        id=message_id, role=role, content=content, run_id=run_id, tool_calls=tool_calls, tool_call_id=tool_call_id,
        reasoning=reasoning, status=status, thread_id=thread_id, created_at=created_at, seq=seq, hidden=hidden,
        summarises=(str(summarises[0]), str(summarises[1])) if summarises else None, connector=connector,
        model=model, cited=cited, continues=continues, replaced_by=replaced_by,
    )  # fmt: skip


def _step_row(step: StepRecord) -> dict[str, Any]:
    return {"id": step.id, "run_id": step.run_id, "seq": step.seq, "type": step.type, "status": step.status,
            "transition": step.transition, "thread_id": step.thread_id, "input": step_inputs.to_json(step.input),
            "output": step.output, "error": step.error, "started_at": step.started_at,
            "ended_at": step.ended_at}  # fmt: skip
