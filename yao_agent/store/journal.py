"""Where a run killed mid-way resumes: after the last step its journal committed (CONTRACT §4 item 3).

A run commits each step as it completes (runlog.journal), so a process that dies leaves the run's
committed replies and tool results in the store. When the run is marked `interrupted`, its resume
point is the step after the last of them, read from its root thread's messages:

- a reply whose tool calls do not all have a result: the calls without one get a stand-in result
  (the chat stays valid to send), and the resume point is a `tool` step running only those calls;
- a complete round of tool results: an `llm` step with transition `tool_results` (`tool_retry` when
  that round failed and the model was to correct it);
- a completed reply without calls: an `llm` step whose input says it was answered — nothing is asked again;
- nothing past the input: an `llm` step, as before the journal (the model is asked from the start).
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import bindparam, func, select

from yao_agent.messages import ChatMessage
from yao_agent.store import runlog
from yao_agent.store.schema import messages, steps
from yao_agent.store.step_inputs import Answered, ToolRound
from yao_agent.store.tx import Sql, Tx

STAND_IN = "interrupted: the process running this call stopped before it finished; a resume runs it again"

RUN_MESSAGES = Sql(
    select(*runlog.READ_COLUMNS)
    .where(messages.c.run_id == bindparam("run_id"), messages.c.thread_id.is_(None))
    .order_by(messages.c.seq)
)
LAST_TOOL_STEP = Sql(
    select(steps.c.status)
    .where(steps.c.run_id == bindparam("run_id"), steps.c.type == "tool", steps.c.thread_id.is_(None))
    .order_by(steps.c.seq.desc())
    .limit(1)
)
LAST_SEQ = Sql(select(func.max(steps.c.seq)).where(steps.c.run_id == bindparam("run_id")))


def resume_step(tx: Tx, run_id: str, chat_id: str, error: Any, started_at: float, now: float) -> dict[str, Any]:
    """The row of the interrupted step a resume starts at; stand-in results are written for calls left
    without one."""
    seq = int(tx.scalar(LAST_SEQ, {"run_id": run_id}) or 0) + 1
    row: dict[str, Any] = {"id": f"{run_id}-interrupted", "run_id": run_id, "seq": seq, "type": "llm",
                           "status": "interrupted", "transition": None, "thread_id": None, "input": None,
                           "output": None, "error": error, "started_at": started_at, "ended_at": now}  # fmt: skip
    said = [runlog.read_message(r) for r in tx.tuples(RUN_MESSAGES, {"run_id": run_id})]
    last = said[-1] if said else None
    if last is None or last.role in ("user", "system", "summary") or last.status != "completed":
        return row  # nothing of the run's own past its input: the model is asked again
    reply = next((m for m in reversed(said) if m.role == "assistant" and m.status == "completed"), None)
    answered = {m.tool_call_id for m in said if m.role == "tool"}
    open_calls = [c for c in reply.tool_calls if c.id not in answered] if reply is not None else []
    if open_calls:
        _stand_in(tx, chat_id, run_id, [c.id for c in open_calls], now)
        return row | {"type": "tool", "input": ToolRound(tuple(open_calls)).to_json()}
    if last.role == "tool":
        failed = tx.scalar(LAST_TOOL_STEP, {"run_id": run_id}) == "recovered"
        return row | {"transition": "tool_retry" if failed else "tool_results"}
    return row | {"input": Answered(last.id).to_json()}


def _stand_in(tx: Tx, chat_id: str, run_id: str, call_ids: list[str], now: float) -> None:
    """A result for each call the process did not finish, until a resume replaces it (by its id)."""
    chat = tx.tuples(runlog.SELECT_CHAT, {"chat_id": chat_id})
    if not chat or not call_ids:
        return
    count: int = chat[0][-1]
    stand_ins = [ChatMessage(id=f"msg_{secrets.token_hex(12)}", role="tool", content=STAND_IN, run_id=run_id,
                             tool_call_id=call_id, created_at=now) for call_id in call_ids]  # fmt: skip
    count = runlog.append(tx, chat_id, count, stand_ins)
    tx.execute(runlog.COUNT_CHAT, {"message_count": count, "chat_id": chat_id})
