"""Answer versions in the store: a regeneration or an edit makes the end of a chat an earlier version.

Nothing is deleted. Each message from the rewind's point on that is still current gets `replaced_by` = the
run that replaces it; from then on only a reader asking for the versions sees it (runlog.CURRENT), so no
model, resume or compaction does. Rewinding again chains: the new run's messages are current until a
later run replaces them in turn.
"""

from __future__ import annotations

from sqlalchemy import bindparam, false, select, update

from yao_agent.store.records import Rewind
from yao_agent.store.runlog import CURRENT
from yao_agent.store.schema import messages
from yao_agent.store.tx import Sql, Tx

_OF_CHAT = messages.c.chat_id == bindparam("chat_id")
# The user message a regeneration answers again: the chat's last one a person sent (not a hook's hidden
# turn, not a delegated run's input).
LAST_USER_SEQ = Sql(
    select(messages.c.seq)
    .where(_OF_CHAT, CURRENT, messages.c.role == "user", messages.c.thread_id.is_(None), messages.c.hidden == false())
    .order_by(messages.c.seq.desc())
    .limit(1)
)  # fmt: skip
SEQ_OF = Sql(select(messages.c.seq).where(_OF_CHAT, messages.c.id == bindparam("message_id")))
REPLACE_FROM = Sql(
    update(messages).where(_OF_CHAT, CURRENT, messages.c.seq >= bindparam("from_seq")), columns=("replaced_by",)
)


def rewind(tx: Tx, chat_id: str, run_id: str, point: Rewind) -> int:
    """Mark the chat's current messages from `point` on replaced by `run_id`; how many were."""
    start = _start(tx, chat_id, point)
    if start is None:
        return 0  # (checked before the run was accepted: only a chat changed meanwhile has nothing to replace)
    return tx.execute(REPLACE_FROM, {"replaced_by": run_id, "chat_id": chat_id, "from_seq": start})


def _start(tx: Tx, chat_id: str, point: Rewind) -> int | None:
    """The first position replaced: the edited message's, or the one after the last user message."""
    if point.message_id is not None:
        return tx.scalar(SEQ_OF, {"chat_id": chat_id, "message_id": point.message_id})
    last = tx.scalar(LAST_USER_SEQ, {"chat_id": chat_id})
    return None if last is None else int(last) + 1
