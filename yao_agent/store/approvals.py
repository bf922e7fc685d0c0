"""Approvals in the store (CONTRACT §4.8): the calls a run stopped for, and the decisions on them.

A run that ends `waiting` writes its pending calls in its flush (`add`), with the stand-in results
that keep the chat valid. A decision is written before the run goes on, each call only while it is
still pending (`decide`), so two people deciding at once cannot both continue the run. A new user
message on a waiting chat denies what is pending (`deny_pending`), in the transaction that writes the
message, and the stand-ins say so, so the model sees why the calls never ran; so do the stand-ins of
calls the client was to run (`close_client_calls`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, select, update

from yao_agent.errors import ApprovalConflict
from yao_agent.store import step_inputs
from yao_agent.store.records import Approval
from yao_agent.store.schema import approvals, messages, runs, steps
from yao_agent.store.step_inputs import ToolRound
from yao_agent.store.tx import Sql, Tx

NEW_MESSAGE = "the user sent a new message"
NO_CLIENT_RESULT = f"not run: {NEW_MESSAGE} instead of this tool's result"

INSERT = Sql(approvals.insert())
OF_RUN = Sql(select(approvals).where(approvals.c.run_id == bindparam("run_id")).order_by(approvals.c.seq))
OF_CHAT = Sql(select(approvals).where(approvals.c.chat_id == bindparam("chat_id"), approvals.c.status != "pending"))
PENDING_OF_CHAT = Sql(
    select(approvals.c.run_id, approvals.c.tool_call_id)
    .where(approvals.c.chat_id == bindparam("chat_id"), approvals.c.status == "pending")
)  # fmt: skip
_DECIDED = ("status", "reason", "decided_by", "decided_at")
DECIDE = Sql(
    update(approvals).where(
        approvals.c.run_id == bindparam("run_id"),
        approvals.c.tool_call_id == bindparam("call_id"),
        approvals.c.status == "pending",
    ),
    columns=_DECIDED,
)
RUN_REASON = Sql(select(runs.c.reason).where(runs.c.id == bindparam("run_id"), runs.c.status == "waiting"))
WAITING_ROUNDS = Sql(select(steps.c.input).where(steps.c.run_id == bindparam("run_id"), steps.c.status == "waiting"))
ANSWER_STAND_IN = Sql(
    update(messages).where(
        messages.c.chat_id == bindparam("chat_id"),
        messages.c.run_id == bindparam("run_id"),
        messages.c.role == "tool",
        messages.c.tool_call_id == bindparam("call_id"),
    ),
    columns=("content",),
)

# The latest result of a call in the chat: a client's call waiting after a decision has its stand-in in the
# run that waited for the decision, not in the decision's continuation, which is the run that waits now.
LATEST_RESULT = (
    select(messages.c.id)
    .where(messages.c.chat_id == bindparam("chat_id"), messages.c.role == "tool",
           messages.c.tool_call_id == bindparam("call_id"))
    .order_by(messages.c.seq.desc())
    .limit(1)
    .scalar_subquery()
)  # fmt: skip
ANSWER_LATEST = Sql(update(messages).where(messages.c.id == LATEST_RESULT), columns=("content",))


def add(tx: Tx, chat_id: str, waiting: Sequence[Approval], now: float) -> None:
    """The calls a run stopped for, pending."""
    rows = [{"run_id": a.run_id, "tool_call_id": a.tool_call_id, "chat_id": chat_id, "seq": seq,
             "server": a.server, "tool": a.tool, "arguments": a.arguments, "thread_id": a.thread_id,
             "status": "pending", "reason": None, "decided_by": None, "decided_at": None,
             "message_id": a.message_id, "created_at": now}
            for seq, a in enumerate(waiting, 1)]  # fmt: skip
    if rows:
        tx.executemany(INSERT, rows)


def of_run(tx: Tx, run_id: str) -> tuple[Approval, ...]:
    return tuple(_approval(row) for row in tx.all(OF_RUN, {"run_id": run_id}))


def decided_in(tx: Tx, chat_id: str) -> dict[str, Approval]:
    """The chat's decided approvals, by the id of the call's result message (the history shows them with
    it: a provider may use one call id in several turns, a message id is the chat's own)."""
    return {row.message_id: _approval(row) for row in tx.all(OF_CHAT, {"chat_id": chat_id}) if row.message_id}


def decide(tx: Tx, run_id: str, decisions: Sequence[Approval]) -> None:
    """Write decisions, each on a call still pending; ApprovalConflict (nothing written) if one is not."""
    for decision in decisions:
        changed = tx.execute(DECIDE, _decided(decision) | {"run_id": run_id, "call_id": decision.tool_call_id})
        if changed != 1:
            raise ApprovalConflict(
                f"the call {decision.tool_call_id} was decided already (by someone else, or by a new message)"
            )


def deny_pending(tx: Tx, chat_id: str, user_id: str, now: float) -> None:
    """A new user message: what waits for a decision is denied, and the stand-in results of the calls that
    waited (those that needed no approval too) say why they never ran."""
    pending = {call_id: run_id for run_id, call_id in tx.tuples(PENDING_OF_CHAT, {"chat_id": chat_id})}
    for call_id, run_id in pending.items():
        denied = Approval(run_id, call_id, "", "", None, status="denied", reason=NEW_MESSAGE, decided_by=user_id,
                          decided_at=now)  # fmt: skip
        tx.execute(DECIDE, _decided(denied) | {"run_id": run_id, "call_id": call_id})
    for run_id in set(pending.values()):
        for row in tx.all(WAITING_ROUNDS, {"run_id": run_id}):
            for call_id in _round(row.input).ids:
                said = denial(NEW_MESSAGE) if call_id in pending else f"not run: {NEW_MESSAGE}"
                tx.execute(ANSWER_STAND_IN, {"content": said, "chat_id": chat_id, "run_id": run_id, "call_id": call_id})


def close_client_calls(tx: Tx, chat_id: str, run_id: str | None) -> set[str]:
    """A new user message on a chat whose last run waits for the client's tool results (CONTRACT §9.2):
    the stand-ins of those calls say that none came, so the chat stays valid and the model knows why.
    Returns the ids of the calls it closed."""
    if run_id is None or tx.scalar(RUN_REASON, {"run_id": run_id}) != "client_tools":
        return set()
    closed = {call_id for row in tx.all(WAITING_ROUNDS, {"run_id": run_id}) for call_id in _round(row.input).ids}
    for call_id in closed:
        tx.execute(ANSWER_LATEST, {"content": NO_CLIENT_RESULT, "chat_id": chat_id, "call_id": call_id})
    return closed


def round_ids(stored: Any) -> list[str]:
    """The call ids of a stored `waiting` tool round."""
    return _round(stored).ids


def _round(stored: Any) -> ToolRound:
    given = step_inputs.read("tool", stored)
    return given if isinstance(given, ToolRound) else ToolRound(())


def denial(reason: str) -> str:
    """What a denied call's result says, to the model and in the chat."""
    return f"denied: {reason}"


def _decided(decision: Approval) -> dict[str, Any]:
    return {"status": decision.status, "reason": decision.reason, "decided_by": decision.decided_by,
            "decided_at": decision.decided_at}  # fmt: skip


def _approval(row: Any) -> Approval:
    return Approval(row.run_id, row.tool_call_id, row.server, row.tool, row.arguments, row.thread_id, row.status,
                    row.reason, row.decided_by, row.decided_at, row.message_id)  # fmt: skip
