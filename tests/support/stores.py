"""Run records as the store keeps them, and a store that counts its look-ups."""

from __future__ import annotations

from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.store.records import ChatRecord, RunRecord

ALICE = Identity("alice", "acme")


def a_run(n: int = 1, chat_id: str = "c1") -> RunRecord:
    return RunRecord(id=f"r{n}", chat_id=chat_id, user_id=ALICE.user_id, team_id=ALICE.team_id, assistant_id="a",
                     trace_id="t", owner="test", started_at=100.0 + n)  # fmt: skip


def finished(run: RunRecord) -> RunRecord:
    run.status, run.reason, run.ended_at, run.duration_ms = "completed", "completed", run.started_at + 1, 1000
    run.usage, run.next = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}, {"route": "light", "n": 2}
    return run


class CountingStore(SqlStore):
    """The real store, counting how often a chat's owner is looked up."""

    checks = 0

    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None:
        type(self).checks += 1
        return await super().check_chat(identity, chat_id)
