"""The SQL store (SQLite or PostgreSQL through SQLAlchemy; see engine.py for how it is driven).

Every method takes the caller's scope and refuses to run without one: tenant data is reachable only
through an `Identity`, operator-wide views only through the `OPERATOR` token the CLI holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Operator
from yao_agent.store import runlog
from yao_agent.store.chats import ChatStore
from yao_agent.store.engine import Database
from yao_agent.store.schema import role_settings
from yao_agent.store.tokens import TokenStore

SCOPE_KINDS = ("team", "user")


@dataclass(frozen=True, slots=True)
class RoleSetting:
    scope_kind: str
    scope_id: str
    role: str
    connectors: tuple[str, ...]
    updated_at: float


def check_scope(scope: tuple[str, str] | None) -> tuple[str, str]:
    if scope is None or scope[0] not in SCOPE_KINDS or not scope[1]:
        raise PermissionDenied("a team or user scope is required for this store call")
    return scope


class SqlStore(ChatStore, TokenStore):
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    @property
    def engine(self) -> Engine:
        return self.db.engine

    async def aclose(self) -> None:
        await self.db.dispose()

    def _upsert(self, table: Any) -> Any:
        dialect = postgresql if self.db.dialect == "postgresql" else sqlite
        return dialect.insert(table)

    # --- role settings -------------------------------------------------------------------------

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None:
        kind, owner = check_scope(scope)
        return await self.db.read_tx(lambda tx: runlog.role_connectors(tx, kind, owner, role))

    async def set_role(self, scope: tuple[str, str], role: str, connectors: Sequence[str]) -> None:
        kind, owner = check_scope(scope)
        values = {"scope_kind": kind, "scope_id": owner, "role": role, "connectors": list(connectors),
                  "updated_at": self.clock()}  # fmt: skip
        statement = self._upsert(role_settings).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=["scope_kind", "scope_id", "role"],
            set_={"connectors": values["connectors"], "updated_at": values["updated_at"]},
        )
        await self.db.write(lambda conn: conn.execute(statement))

    async def delete_role(self, scope: tuple[str, str], role: str) -> bool:
        kind, owner = check_scope(scope)
        statement = delete(role_settings).where(
            role_settings.c.scope_kind == kind, role_settings.c.scope_id == owner, role_settings.c.role == role
        )
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def list_roles(self, scope: tuple[str, str] | Operator) -> list[RoleSetting]:
        """Settings of one scope, or of every scope for the operator."""
        query = select(role_settings).order_by(
            role_settings.c.scope_kind, role_settings.c.scope_id, role_settings.c.role
        )
        if not isinstance(scope, Operator):
            kind, owner = check_scope(scope)
            query = query.where(role_settings.c.scope_kind == kind, role_settings.c.scope_id == owner)
        rows = await self.db.read(lambda conn: conn.execute(query).mappings().all())
        return [
            RoleSetting(r["scope_kind"], r["scope_id"], r["role"], tuple(r["connectors"]), r["updated_at"])
            for r in rows
        ]
