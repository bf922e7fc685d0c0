"""API tokens: only a hash is kept; the token itself is shown once, when it is made."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import bindparam, select, update

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Identity, Operator
from yao_agent.store import audit, runlog
from yao_agent.store.engine import Database
from yao_agent.store.schema import tokens
from yao_agent.store.tx import Sql

TOKEN_PREFIX = "ya_"
INSERT_TOKEN = Sql(tokens.insert())
REVOKE_TOKEN = Sql(
    update(tokens).where(
        (tokens.c.hash == bindparam("hash")) | (tokens.c.prefix == bindparam("prefix")), tokens.c.revoked_at.is_(None)
    ),
    columns=("revoked_at",),
)
LIST_TOKENS = Sql(select(tokens).order_by(tokens.c.created_at))


@dataclass(frozen=True, slots=True)
class TokenRecord:
    prefix: str
    user_id: str
    team_id: str | None
    label: str
    created_at: float
    revoked_at: float | None
    admin: bool = False


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _operator(operator: Operator, what: str) -> None:
    if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise PermissionDenied(f"{what} tokens is an operator action")


class TokenStore:
    """The token half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    async def create_token(self, operator: Operator, identity: Identity, label: str = "") -> str:
        _operator(operator, "making")
        token, now = TOKEN_PREFIX + secrets.token_urlsafe(32), self.clock()
        values = {"hash": token_hash(token), "prefix": token[:12], "user_id": identity.user_id,
                  "team_id": identity.team_id or "", "label": label, "created_at": now,
                  "revoked_at": None, "admin": identity.admin}  # fmt: skip
        await self.db.write_tx(audit.logged(lambda tx: tx.execute(INSERT_TOKEN, values), audit.actor_of(operator),
                                            audit.token_made(values), now))  # fmt: skip
        return token

    async def identity_for(self, token: str) -> Identity | None:
        """The identity a token stands for; None if unknown or revoked."""
        row = await self.db.read_tx(lambda tx: runlog.token_owner(tx, token_hash(token)))
        return Identity(row[0], row[1] or None, admin=row[2]) if row is not None else None

    async def revoke_token(self, operator: Operator, token_or_prefix: str) -> int:
        _operator(operator, "revoking")
        now = self.clock()
        params = {"hash": token_hash(token_or_prefix), "prefix": token_or_prefix[:12], "revoked_at": now}
        revoke = audit.logged(lambda tx: tx.execute(REVOKE_TOKEN, params), audit.actor_of(operator),
                              audit.tokens_revoked(params), now)  # fmt: skip
        return await self.db.write_tx(revoke)

    async def list_tokens(self, operator: Operator) -> list[TokenRecord]:
        _operator(operator, "listing")
        rows = await self.db.read_tx(lambda tx: tx.all(LIST_TOKENS))
        return [TokenRecord(r.prefix, r.user_id, r.team_id or None, r.label, r.created_at, r.revoked_at, r.admin)
                for r in rows]  # fmt: skip
