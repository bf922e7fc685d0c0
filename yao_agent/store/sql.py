"""The SQL store (SQLite or PostgreSQL; see engine.py for how it is driven, tx.py for how statements run).

Every method takes the caller's scope and refuses to run without one: tenant data is reachable only
through an `Identity`, operator-wide views only through the `OPERATOR` token the CLI holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlalchemy import bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Operator
from yao_agent.store import runlog
from yao_agent.store.chats import ChatStore
from yao_agent.store.engine import Database
from yao_agent.store.holds import HoldStore
from yao_agent.store.knowledge import KnowledgeStore
from yao_agent.store.quota import QuotaStore
from yao_agent.store.records import RoleSetting
from yao_agent.store.schema import role_settings
from yao_agent.store.sessions import SessionStore
from yao_agent.store.tokens import TokenStore
from yao_agent.store.tx import Sql

SCOPE_KINDS = ("team", "user")


def _upsert_role() -> Sql:
    """Insert a role setting, or replace the one its scope has (each database spells it its own way)."""
    spelled: dict[str, ClauseElement] = {}
    for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql)):
        insert = dialect.insert(role_settings)
        spelled[name] = insert.on_conflict_do_update(
            index_elements=["scope_kind", "scope_id", "role"],
            set_={"connectors": insert.excluded.connectors, "updated_at": insert.excluded.updated_at},
        )
    return Sql(spelled, columns=[c.key for c in role_settings.c])


_SCOPE = (role_settings.c.scope_kind == bindparam("kind")) & (role_settings.c.scope_id == bindparam("owner"))
_ORDER = (role_settings.c.scope_kind, role_settings.c.scope_id, role_settings.c.role)
SET_ROLE = _upsert_role()
DELETE_ROLE = Sql(delete(role_settings).where(_SCOPE, role_settings.c.role == bindparam("role")))
LIST_ROLES = Sql(select(role_settings).where(_SCOPE).order_by(*_ORDER))
LIST_ALL_ROLES = Sql(select(role_settings).order_by(*_ORDER))


def check_scope(scope: tuple[str, str] | None) -> tuple[str, str]:
    if scope is None or scope[0] not in SCOPE_KINDS or not scope[1]:
        raise PermissionDenied("a team or user scope is required for this store call")
    return scope


class SqlStore(ChatStore, TokenStore, QuotaStore, HoldStore, KnowledgeStore, SessionStore):
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    async def aclose(self) -> None:
        await self.db.dispose()

    # --- role settings -------------------------------------------------------------------------

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None:
        kind, owner = check_scope(scope)
        return await self.db.read_tx(lambda tx: runlog.role_connectors(tx, kind, owner, role))

    async def set_role(self, scope: tuple[str, str], role: str, connectors: Sequence[str]) -> None:
        kind, owner = check_scope(scope)
        chain, now = list(connectors), self.clock()
        values = {"scope_kind": kind, "scope_id": owner, "role": role, "updated_at": now}
        await self.db.write_tx(lambda tx: tx.execute(SET_ROLE, {**values, "connectors": chain}))

    async def delete_role(self, scope: tuple[str, str], role: str) -> bool:
        kind, owner = check_scope(scope)
        params = {"kind": kind, "owner": owner, "role": role}
        return bool(await self.db.write_tx(lambda tx: tx.execute(DELETE_ROLE, params)))

    async def list_roles(self, scope: tuple[str, str] | Operator) -> list[RoleSetting]:
        """Settings of one scope, or of every scope for the operator."""
        if isinstance(scope, Operator):
            rows = await self.db.read_tx(lambda tx: tx.all(LIST_ALL_ROLES))
        else:
            kind, owner = check_scope(scope)
            rows = await self.db.read_tx(lambda tx: tx.all(LIST_ROLES, {"kind": kind, "owner": owner}))
        return [RoleSetting(r.scope_kind, r.scope_id, r.role, tuple(r.connectors), r.updated_at) for r in rows]
