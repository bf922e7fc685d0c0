"""What the pipeline needs of a store: the narrow face `SqlStore` shows a run.

A run checks its chat, reads history and writes its input ahead (one transaction), reads role
settings and a hook's memory, finds a resume point, commits each step as it completes (the step
journal), and flushes. The store never calls back into the
pipeline inside a transaction: what to write is passed as data, and what of the input repeats the
history is decided by the store (`messages.overlap`) on the history read in that same transaction.
(`recover_interrupted` asks its `is_dead` between transactions, never inside one.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from yao_agent.identity import Identity, Operator
from yao_agent.messages import ChatMessage
from yao_agent.store.engine import Database
from yao_agent.store.ledger import ScopeKind
from yao_agent.store.quota import RateRule, Spending
from yao_agent.store.records import Approval, ChatRecord, Loaded, ResumePoint, RunRecord, StepRecord


class Store(Protocol):
    @property
    def db(self) -> Database:
        """The database, for what shares its connection (the chat leases on PostgreSQL)."""
        ...

    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None: ...

    async def load_and_start(
        self, identity: Identity, run: RunRecord, limit: int, given: Sequence[ChatMessage]
    ) -> Loaded: ...

    async def start_run(self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage]) -> None: ...

    async def commit_steps(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        carry: Any = None,
    ) -> None: ...  # fmt: skip

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (),
    ) -> None: ...  # fmt: skip

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint | None: ...

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None: ...

    async def memory_get(self, identity: Identity, chat_id: str, key: str) -> Any: ...

    async def memory_set(self, identity: Identity, chat_id: str, key: str, value: Any) -> None: ...

    async def budget_state(
        self, identity: Identity, defaults: Mapping[ScopeKind, Mapping[str, float | None]], since: Mapping[str, float]
    ) -> Spending: ...

    async def admit(self, identity: Identity, run_id: str, rules: Sequence[RateRule]) -> float | None: ...

    async def recover_interrupted(self, operator: Operator, is_dead: Callable[[str, float], bool]) -> list[str]: ...

    async def aclose(self) -> None: ...
