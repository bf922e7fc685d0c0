"""What every request reads and every run writes — its token, role settings, write-ahead and
flush — as the database driver's own SQL.

Each run opens two transactions (CONTRACT §4 step 3): one before the model is called, one at the end.
SQLAlchemy Core rebuilds, keys and compiles each of their statements on every execution, and that
measured three times the work of the database itself for a plain run. So these few statements are
written out once per dialect and go straight to the driver's cursor (`Tx`: see Database.write_tx
for where the transaction comes from). The tables are those of schema.py; everything off this
path keeps using SQLAlchemy Core.

JSON columns are written as JSON text. SQLite gives that text back; psycopg parses it on the way
out, so `Dialect.json_value` undoes only what the driver did not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from yao_agent.errors import NotFound
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.store.engine import Dialect, Tx
from yao_agent.store.records import ChatRecord, RunRecord, StepRecord

TITLE_CHARS = 80
CHAT_COLUMNS = (
    "id, user_id, team_id, assistant_id, title, created_at, updated_at, last_status, last_run_id, message_count"
)
MESSAGE_COLUMNS = (
    "id, chat_id, seq, run_id, role, content, tool_calls, tool_call_id, reasoning, status, thread_id, created_at, "
    "hidden"
)
STEP_COLUMNS = "id, run_id, seq, type, status, transition, thread_id, input, output, error, started_at, ended_at"


def _values(columns: str) -> str:
    return ", ".join(":" + column for column in columns.split(", "))


SELECT_CHAT = f"SELECT {CHAT_COLUMNS} FROM chats WHERE id = :id"
SELECT_HISTORY = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id = :chat_id ORDER BY seq DESC LIMIT :limit"
SELECT_ALL_HISTORY = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id = :chat_id ORDER BY seq"
INSERT_CHAT = (
    "INSERT INTO chats (id, user_id, team_id, assistant_id, title, created_at, updated_at, message_count)"
    " VALUES (:id, :user_id, :team_id, :assistant_id, :title, :now, :now, 0)"
)
INSERT_MESSAGE = f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({_values(MESSAGE_COLUMNS)})"
REPLACE_MESSAGE = (
    "UPDATE messages SET run_id = :run_id, content = :content, status = :status, created_at = :created_at,"
    " hidden = :hidden WHERE id = :id AND chat_id = :chat_id"
)
INSERT_STEP = f"INSERT INTO steps ({STEP_COLUMNS}) VALUES ({_values(STEP_COLUMNS)})"
INSERT_RUN = (
    "INSERT INTO runs (id, chat_id, user_id, team_id, assistant_id, trace_id, status, owner, resumed_from,"
    " started_at, heartbeat_at) VALUES (:id, :chat_id, :user_id, :team_id, :assistant_id, :trace_id, 'running',"
    " :owner, :resumed_from, :started_at, :now)"
)
START_CHAT = (
    "UPDATE chats SET message_count = :count, updated_at = :now, last_status = 'running', last_run_id = :run_id"
    " WHERE id = :id"
)
FINISH_RUN = (
    "UPDATE runs SET status = :status, reason = :reason, error = :error, usage = :usage, next = :next,"
    " ended_at = :ended_at, duration_ms = :duration_ms WHERE id = :id"
)
SELECT_TOKEN = "SELECT user_id, team_id FROM tokens WHERE hash = :hash AND revoked_at IS NULL"
SELECT_ROLE = "SELECT connectors FROM role_settings WHERE scope_kind = :kind AND scope_id = :owner AND role = :role"
FINISH_CHAT = "UPDATE chats SET message_count = :count, updated_at = :now, last_status = :status WHERE id = :id"


def team_of(identity: Identity) -> str:
    return identity.team_id or ""


def plain_text(value: str | None) -> str | None:
    """Text for a plain text column: PostgreSQL refuses NUL in text, so it is dropped everywhere alike."""
    return value.replace("\x00", "") if value and "\x00" in value else value


def token_owner(tx: Tx, hashed: str) -> tuple[str, str] | None:
    """(user_id, team_id) of a token that is not revoked, by its hash."""
    cur, dialect = tx.cursor, tx.dialect
    cur.execute(dialect.sql(SELECT_TOKEN), {"hash": hashed})
    row = cur.fetchone()
    return (row[0], row[1]) if row is not None else None


def role_connectors(tx: Tx, kind: str, owner: str, role: str) -> tuple[str, ...] | None:
    """The connectors one scope maps a role to, None if it sets none."""
    cur, dialect = tx.cursor, tx.dialect
    cur.execute(dialect.sql(SELECT_ROLE), {"kind": kind, "owner": owner, "role": role})
    row = cur.fetchone()
    return tuple(dialect.json_value(row[0])) if row is not None and row[0] else None


def owned_chat(tx: Tx, identity: Identity, chat_id: str, *, lock: bool) -> ChatRecord | None:
    """The caller's chat (row-locked on PostgreSQL with `lock`), None if there is none by that id."""
    cur, dialect = tx.cursor, tx.dialect
    cur.execute(dialect.sql(SELECT_CHAT, lock=lock), {"id": chat_id})
    row = cur.fetchone()
    if row is None:
        return None
    if row[1] != identity.user_id or row[2] != team_of(identity):
        raise NotFound(f"no chat '{chat_id}'")  # another tenant's: the same answer as a missing one
    return ChatRecord(row[0], row[1], row[2] or None, *row[3:])


def messages_of(tx: Tx, chat_id: str, limit: int | None) -> list[ChatMessage]:
    """A chat's messages, oldest first; with `limit`, only the last `limit` of them. No scope check."""
    cur, dialect = tx.cursor, tx.dialect
    if limit is None:
        cur.execute(dialect.sql(SELECT_ALL_HISTORY), {"chat_id": chat_id})
        return [_message(row, dialect) for row in cur.fetchall()]
    cur.execute(dialect.sql(SELECT_HISTORY), {"chat_id": chat_id, "limit": limit})
    return [_message(row, dialect) for row in reversed(cur.fetchall())]


def start(tx: Tx, identity: Identity, run: RunRecord, chat: ChatRecord | None, new: Sequence[ChatMessage],
          now: float) -> None:  # fmt: skip
    """Write-ahead: the chat (created on its first run), the clean input and a `running` run."""
    cur, dialect = tx.cursor, tx.dialect
    team = team_of(identity)
    if chat is None:
        title = next((m.content for m in new if m.role == "user" and isinstance(m.content, str)), "") or ""
        cur.execute(dialect.sql(INSERT_CHAT), {"id": run.chat_id, "user_id": identity.user_id, "team_id": team,
                                               "assistant_id": run.assistant_id, "now": now,
                                               "title": plain_text(title[:TITLE_CHARS])})  # fmt: skip
    count = _append(cur, dialect, run.chat_id, chat.message_count if chat is not None else 0, new)
    cur.execute(dialect.sql(INSERT_RUN), {"id": run.id, "chat_id": run.chat_id, "user_id": identity.user_id,
                                          "team_id": team, "assistant_id": run.assistant_id, "trace_id": run.trace_id,
                                          "owner": run.owner, "resumed_from": run.resumed_from,
                                          "started_at": run.started_at, "now": now})  # fmt: skip
    cur.execute(dialect.sql(START_CHAT), {"count": count, "now": now, "run_id": run.id, "id": run.chat_id})


def finish(tx: Tx, run: RunRecord, chat: ChatRecord, new: Sequence[ChatMessage],
           done: Sequence[StepRecord], now: float) -> None:  # fmt: skip
    """The deferred flush: the run's messages, its steps, its outcome and the chat's new state."""
    cur, dialect = tx.cursor, tx.dialect
    count = _append(cur, dialect, run.chat_id, chat.message_count, new)
    if done:
        cur.executemany(dialect.sql(INSERT_STEP), [_step_row(step) for step in done])
    cur.execute(dialect.sql(FINISH_RUN), {"status": run.status, "reason": run.reason, "error": _json(run.error),
                                          "usage": _json(run.usage), "next": _json(run.next),
                                          "ended_at": run.ended_at, "duration_ms": run.duration_ms,
                                          "id": run.id})  # fmt: skip
    cur.execute(dialect.sql(FINISH_CHAT), {"count": count, "now": run.ended_at or now, "status": run.status,
                                           "id": run.chat_id})  # fmt: skip


def _append(cur: Any, dialect: Dialect, chat_id: str, start: int, given: Sequence[ChatMessage]) -> int:
    """Add messages after the chat's last; a replacing one overwrites its predecessor in place."""
    new = [m for m in given if not m.replaces]
    for offset, message in enumerate(new):
        message.seq = start + offset + 1
    if new:
        cur.executemany(dialect.sql(INSERT_MESSAGE), [_message_row(m, chat_id) for m in new])
    replacing = [m for m in given if m.replaces]
    if replacing:
        cur.executemany(dialect.sql(REPLACE_MESSAGE), [_message_row(m, chat_id) for m in replacing])
    return start + len(new)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _message_row(message: ChatMessage, chat_id: str) -> dict[str, Any]:
    calls = [c.to_dict() for c in message.tool_calls] or None
    return {"id": message.id, "chat_id": chat_id, "seq": message.seq, "run_id": message.run_id,
            "role": message.role, "content": _json(message.content), "tool_calls": _json(calls),
            "tool_call_id": message.tool_call_id, "reasoning": plain_text(message.reasoning),
            "status": message.status, "thread_id": message.thread_id, "created_at": message.created_at,
            "hidden": message.hidden}  # fmt: skip


def _message(row: Sequence[Any], dialect: Dialect) -> ChatMessage:
    (id_, _chat, seq, run_id, role, content, calls, tool_call_id, reasoning, status, thread_id, created_at,
     hidden) = row  # fmt: skip
    # `written`: a chat stored before invalid arguments were replaced must not carry them to a provider
    tool_calls = tuple(ToolCall.written(c["id"], c["name"], c["arguments"]) for c in dialect.json_value(calls) or ())
    return ChatMessage(
        id=id_, role=role, content=dialect.json_value(content), run_id=run_id, tool_calls=tool_calls,
        tool_call_id=tool_call_id, reasoning=reasoning, status=status, thread_id=thread_id, created_at=created_at,
        seq=seq, hidden=bool(hidden),
    )  # fmt: skip


def _step_row(step: StepRecord) -> dict[str, Any]:
    return {"id": step.id, "run_id": step.run_id, "seq": step.seq, "type": step.type, "status": step.status,
            "transition": step.transition, "thread_id": step.thread_id, "input": _json(step.input),
            "output": _json(step.output), "error": _json(step.error), "started_at": step.started_at,
            "ended_at": step.ended_at}  # fmt: skip
