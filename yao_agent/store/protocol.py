"""What a store is to the rest of the package: one protocol per kind of caller, and `Store`, all of them.

`SqlStore` implements `Store`; a `Runtime` holds a `Store`, never the SQL store itself. Each caller is
typed by the narrowest face it needs, so what it may reach is written down:

- `RunStore`, what a run needs (the pipeline's stages call nothing else: tests/test_imports.py). A run
  checks its chat, reads history and writes its input ahead (one transaction), reads role settings and
  a hook's memory, finds a resume point, commits each step as it completes (the step journal), holds
  and gives back budget, and flushes. The store never calls back into the pipeline inside a
  transaction: what to write is passed as data, and what of the input repeats the history is decided
  by the store (`messages.overlap`) on the history read in that same transaction.
  (`recover_interrupted` asks its `is_dead` between transactions, never inside one.)
- `ChatQueries`, what the owner of chats asks about them (the chats service, `yao-agent runs`).
- `TenancyStore`, who may use which connectors and what it costs: role mappings, budgets, usage, and
  whose token is whose, and the tokens a caller's `TokenSight` reaches (the tenancy service).
- `OperatorStore`, what only the operator does (the CLI): tokens made and revoked, budget ceilings.
- `KnowledgeFace`, the knowledge base's collections, documents and chunks (the knowledge service); every
  call but declaring and creating collections takes the caller's `Sight`, which the SQL enforces.
- `AuditFace`, the audit log: reading it (an `AuditSight`), checking its chain, and recording an app
  reload. Every change the other faces make is written with its audit row, in its transaction, by
  whom `by` names (the CLI's when not named: the store's own callers are trusted, the CLI among them).
- `WebSessions`, the web page's sign-ins through the identity provider (server/oidc_web.py).
- `Replays`, what each MCP server offered when last listed (the tool manager keeps it) and the stored
  turns an operator replays on a changed app (evals/replay.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from yao_agent.identity import Identity, Operator
from yao_agent.messages import ChatMessage
from yao_agent.shapes import UsageRowOut, UsageTotalOut
from yao_agent.store.admission import Admission
from yao_agent.store.audit import Actor, AuditRow, AuditSight, Verified
from yao_agent.store.engine import Database
from yao_agent.store.holds import Hold, Scope, Taken
from yao_agent.store.knowledge import ChunkHit, ChunkIn, CollectionRecord, DocumentRecord, Sight
from yao_agent.store.ledger import Group, ScopeKind
from yao_agent.store.quota import BudgetSetting, Limits, Own, RateRule, Spending
from yao_agent.store.records import (
    Approval,
    ChatRecord,
    LeaseRelease,
    Loaded,
    ResumePoint,
    Rewind,
    RoleSetting,
    RunRecord,
    RunView,
    StepRecord,
)
from yao_agent.store.replay import StoredTurn
from yao_agent.store.sessions import WebSession
from yao_agent.store.tokens import Issued, TokenOwner, TokenRecord, TokenSight


class RunStore(Protocol):
    @property
    def db(self) -> Database:
        """The database, for what shares its connection (the chat leases on PostgreSQL)."""
        ...

    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None: ...

    async def load_and_start(
        self, identity: Identity, run: RunRecord, limit: int, given: Sequence[ChatMessage],
        rewind: Rewind | None = None,
    ) -> Loaded: ...  # fmt: skip

    async def start_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], rewind: Rewind | None = None
    ) -> None: ...

    async def commit_steps(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        carry: Any = None,
    ) -> None: ...  # fmt: skip

    async def finish_run(
        self, identity: Identity, run: RunRecord, new: Sequence[ChatMessage], done: Sequence[StepRecord],
        waiting: Sequence[Approval] = (), release: LeaseRelease | None = None,
    ) -> None: ...  # fmt: skip

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint | None: ...

    async def waiting_for_client(self, identity: Identity, call_ids: Collection[str]) -> str | None: ...

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None: ...

    async def memory_get(self, identity: Identity, chat_id: str, key: str) -> Any: ...

    async def memory_set(self, identity: Identity, chat_id: str, key: str, value: Any) -> None: ...

    async def budget_state(
        self, identity: Identity, defaults: Mapping[ScopeKind, Limits], since: Mapping[str, float]
    ) -> Spending: ...

    async def admit(
        self, identity: Identity, run_id: str, rules: Sequence[RateRule]
    ) -> tuple[float, RateRule] | None: ...

    async def start_checks(
        self,
        identity: Identity,
        defaults: Mapping[ScopeKind, Limits],
        since: Mapping[str, float],
        rules: Sequence[RateRule],
        run_id: str,
        roles: tuple[str, str] | None = None,
    ) -> Admission: ...

    async def take_hold(self, identity: Identity, defaults: Mapping[ScopeKind, Limits], days: Mapping[str, str],
                        hold: Hold, now: float) -> Taken: ...  # fmt: skip

    async def give_back(self, scopes: Sequence[Scope], hold_id: str, run: RunRecord, steps: Sequence[StepRecord],
                        now: float) -> None: ...  # fmt: skip

    async def recover_interrupted(self, operator: Operator, is_dead: Callable[[str, float], bool]) -> list[str]: ...

    async def aclose(self) -> None: ...


class ChatQueries(Protocol):
    async def check_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None: ...

    async def get_chat(self, identity: Identity, chat_id: str) -> ChatRecord | None: ...

    async def list_chats(self, identity: Identity, limit: int = 100, query: str | None = None) -> list[ChatRecord]: ...

    async def history(
        self, identity: Identity, chat_id: str, limit: int | None = None, *, versions: bool = False
    ) -> list[ChatMessage]: ...

    async def runs_of(self, identity: Identity, chat_id: str, limit: int = 100) -> list[RunRecord]: ...

    async def latest_run(self, identity: Identity, chat_id: str) -> RunRecord | None: ...

    async def run_view(self, identity: Identity, chat_id: str, run_id: str) -> RunView | None: ...

    async def rename_chat(self, identity: Identity, chat_id: str, title: str) -> ChatRecord: ...

    async def delete_chat(self, identity: Identity, chat_id: str) -> bool: ...

    async def decide_approvals(
        self, identity: Identity, chat_id: str, run_id: str, decisions: Sequence[Approval]
    ) -> ResumePoint | None: ...


class TenancyStore(Protocol):
    async def list_roles(self, scope: tuple[str, str] | Operator) -> list[RoleSetting]: ...

    async def set_role(
        self, scope: tuple[str, str], role: str, connectors: Sequence[str], *, by: Actor = ...
    ) -> None: ...

    async def delete_role(self, scope: tuple[str, str], role: str, *, by: Actor = ...) -> bool: ...

    async def spending(
        self, identity: Identity, kinds: Sequence[ScopeKind], since: Mapping[str, float]
    ) -> dict[ScopeKind, tuple[Own, dict[str, float]]]: ...

    async def usage_report(
        self, team_id: str | None, user_id: str | None, first: str, last: str, by: Group
    ) -> tuple[list[UsageRowOut], UsageTotalOut]: ...

    async def set_budget(
        self, scope: tuple[ScopeKind, str], limits: Limits, allowed: Callable[[Own], None] = ..., *, by: Actor = ...
    ) -> None: ...

    async def identity_for(self, token: str) -> Identity | None: ...

    async def token_owner(self, token: str) -> TokenOwner | None: ...

    async def mark_token_used(self, token_id: str, now: float, every_s: float) -> bool: ...

    async def issue_token(
        self, sight: TokenSight, identity: Identity, label: str = "", expires_at: float | None = None, by: Actor = ...
    ) -> Issued: ...

    async def token_list(self, sight: TokenSight, revoked: bool = False) -> list[TokenRecord]: ...

    async def revoke_token_id(self, sight: TokenSight, token_id: str, by: Actor = ...) -> TokenRecord | None: ...


class OperatorStore(Protocol):
    async def create_token(
        self, operator: Operator, identity: Identity, label: str = "", expires_at: float | None = None
    ) -> str: ...

    async def revoke_token(self, operator: Operator, token_or_id: str) -> int: ...

    async def list_tokens(self, operator: Operator) -> list[TokenRecord]: ...

    async def set_ceilings(self, scope: tuple[ScopeKind, str], limits: Limits, *, by: Actor = ...) -> None: ...

    async def list_budgets(self, operator: Operator) -> list[BudgetSetting]: ...


class KnowledgeFace(Protocol):
    async def kb_declare(self, collections: Sequence[tuple[str, str, str]]) -> None: ...

    async def kb_create(self, team_id: str, name: str, embedding: str, *, by: Actor = ...) -> CollectionRecord: ...

    async def kb_collections(self, sight: Sight) -> list[CollectionRecord]: ...

    async def kb_collection(self, sight: Sight, collection_id: str) -> CollectionRecord | None: ...

    async def kb_documents(self, sight: Sight, collection_id: str) -> list[DocumentRecord]: ...

    async def kb_same_content(self, sight: Sight, collection_id: str, content_hash: str) -> DocumentRecord | None: ...

    async def kb_known_vectors(self, sight: Sight, collection_id: str, digests: Sequence[str]) -> dict[str, bytes]: ...

    async def kb_put(
        self, sight: Sight, collection_id: str, document: DocumentRecord, chunks: Sequence[ChunkIn], *,
        by: Actor = ...,
    ) -> DocumentRecord: ...  # fmt: skip

    async def kb_delete(self, sight: Sight, collection_id: str, document_id: str, *, by: Actor = ...) -> bool: ...

    async def kb_delete_missing(
        self, sight: Sight, collection_id: str, keep_sources: Sequence[str], *, by: Actor = ...
    ) -> int: ...

    async def kb_vectors(self, sight: Sight, collection_id: str) -> tuple[int, list[int], bytes]: ...

    async def kb_unembedded(self, sight: Sight, collection_id: str, limit: int) -> list[tuple[int, str, str]]: ...

    async def kb_set_vectors(
        self, sight: Sight, collection_id: str, embedding: str, vectors: Mapping[int, bytes]
    ) -> int: ...

    async def kb_fulltext(
        self, sight: Sight, collection_ids: Sequence[str], query: str, limit: int, filter: Mapping[str, str]
    ) -> list[ChunkHit]: ...

    async def kb_chunks(self, sight: Sight, chunk_ids: Sequence[int], filter: Mapping[str, str]) -> list[ChunkHit]: ...

    async def kb_hits(
        self, sight: Sight, collection_ids: Sequence[str], query: str, limit: int, filter: Mapping[str, str],
        chunk_ids: Sequence[int],
    ) -> tuple[list[ChunkHit], list[ChunkHit]]: ...  # fmt: skip


class AuditFace(Protocol):
    async def audit_rows(
        self, sight: AuditSight, since: float, until: float, action: str | None = None, limit: int = 100
    ) -> list[AuditRow]: ...

    async def audit_verify(self, operator: Operator) -> Verified: ...

    async def audit_reload(self, before: str, after: str, why: str) -> bool: ...


class WebSessions(Protocol):
    async def create_session(self, identity: Identity, lifetime_s: float) -> tuple[str, WebSession]: ...

    async def session(self, session_id: str) -> WebSession | None: ...

    async def end_session(self, session_id: str) -> bool: ...


class Replays(Protocol):
    async def save_tool_catalog(self, server_id: str, tools: Sequence[Mapping[str, Any]]) -> None: ...

    async def tool_catalogs(self) -> dict[str, list[dict[str, Any]]]: ...

    async def stored_turns(
        self, operator: Operator, *, assistant: str | None = ..., team: str | None = ...,
        since: float | None = ..., limit: int = ...,
    ) -> list[StoredTurn]: ...  # fmt: skip


class Store(
    RunStore, ChatQueries, TenancyStore, OperatorStore, KnowledgeFace, AuditFace, WebSessions, Replays, Protocol
):
    """Everything a store is for: what `Runtime.store` holds (`SqlStore` is one)."""
