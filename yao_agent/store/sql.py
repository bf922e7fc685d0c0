"""The SQL store (SQLite or PostgreSQL; see engine.py for how it is driven, tx.py for how statements run).

Every method takes the caller's scope and refuses to run without one: tenant data is reachable only
through an `Identity`, operator-wide views only through the `OPERATOR` token the CLI holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlalchemy import bindparam, delete, select
from sqlalchemy.sql import ClauseElement

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Operator
from yao_agent.store import audit, runlog
from yao_agent.store.admission import AdmissionStore
from yao_agent.store.audit import CLI, Actor, AuditStore
from yao_agent.store.chats import ChatStore
from yao_agent.store.engine import Database
from yao_agent.store.holds import HoldStore
from yao_agent.store.knowledge import KnowledgeStore
from yao_agent.store.records import RoleSetting
from yao_agent.store.replay import ReplayStore
from yao_agent.store.schema import role_settings
from yao_agent.store.sessions import SessionStore
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tokens import TokenStore
from yao_agent.store.tx import Sql, Tx

SCOPE_KINDS = ("team", "user")


def _upsert_role(dialect: str) -> ClauseElement:
    """Insert a role setting, or replace the one its scope has (each database spells it its own way)."""
    insert = conflict_insert(dialect, role_settings)
    return insert.on_conflict_do_update(
        index_elements=["scope_kind", "scope_id", "role"],
        set_={"connectors": insert.excluded.connectors, "updated_at": insert.excluded.updated_at},
    )


_SCOPE = (role_settings.c.scope_kind == bindparam("kind")) & (role_settings.c.scope_id == bindparam("owner"))
_ORDER = (role_settings.c.scope_kind, role_settings.c.scope_id, role_settings.c.role)
SET_ROLE = Sql(Spelled(_upsert_role), columns=[c.key for c in role_settings.c])
DELETE_ROLE = Sql(delete(role_settings).where(_SCOPE, role_settings.c.role == bindparam("role")))
LIST_ROLES = Sql(select(role_settings).where(_SCOPE).order_by(*_ORDER))
LIST_ALL_ROLES = Sql(select(role_settings).order_by(*_ORDER))


def _role_change(
    action: str, kind: str, owner: str, role: str, before: Sequence[str] | None, after: Sequence[str] | None
) -> audit.Change:
    return audit.Change(action, f"role/{kind}/{owner}/{role}", owner if kind == "team" else "",
                        None if before is None else {"connectors": list(before)},
                        None if after is None else {"connectors": list(after)})  # fmt: skip


def check_scope(scope: tuple[str, str] | None) -> tuple[str, str]:
    if scope is None or scope[0] not in SCOPE_KINDS or not scope[1]:
        raise PermissionDenied("a team or user scope is required for this store call")
    return scope


class SqlStore(ChatStore, TokenStore, AdmissionStore, HoldStore, KnowledgeStore, AuditStore, SessionStore, ReplayStore):
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    async def aclose(self) -> None:
        await self.db.dispose()

    # --- role settings -------------------------------------------------------------------------

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None:
        kind, owner = check_scope(scope)
        return await self.db.read_tx(lambda tx: runlog.role_connectors(tx, kind, owner, role))

    async def set_role(self, scope: tuple[str, str], role: str, connectors: Sequence[str], *, by: Actor = CLI) -> None:
        kind, owner = check_scope(scope)
        chain, now = list(connectors), self.clock()
        values = {"scope_kind": kind, "scope_id": owner, "role": role, "updated_at": now}

        def work(tx: Tx) -> None:
            before = runlog.role_connectors(tx, kind, owner, role)
            tx.execute(SET_ROLE, {**values, "connectors": list(chain)})
            change = _role_change("role.set", kind, owner, role, before, chain)
            audit.append(tx, by, change, now)

        await self.db.write_tx(work)

    async def delete_role(self, scope: tuple[str, str], role: str, *, by: Actor = CLI) -> bool:
        kind, owner = check_scope(scope)
        params, now = {"kind": kind, "owner": owner, "role": role}, self.clock()

        def work(tx: Tx) -> bool:
            before = runlog.role_connectors(tx, kind, owner, role)
            if not tx.execute(DELETE_ROLE, dict(params)):
                return False
            audit.append(tx, by, _role_change("role.unset", kind, owner, role, before, None), now)
            return True

        return await self.db.write_tx(work)

    async def list_roles(self, scope: tuple[str, str] | Operator) -> list[RoleSetting]:
        """Settings of one scope, or of every scope for the operator."""
        if isinstance(scope, Operator):
            rows = await self.db.read_tx(lambda tx: tx.all(LIST_ALL_ROLES))
        else:
            kind, owner = check_scope(scope)
            rows = await self.db.read_tx(lambda tx: tx.all(LIST_ROLES, {"kind": kind, "owner": owner}))
        return [RoleSetting(r.scope_kind, r.scope_id, r.role, tuple(r.connectors), r.updated_at) for r in rows]
