"""API tokens: only a hash is kept; the token itself is shown once, when it is made.

Each token has a public id (`tok_…`, drawn apart from the secret: knowing it tells nothing of the token),
a kind (member, team admin, operator), an optional expiry, and when it was last used. Who may list, make
and revoke which tokens is a `TokenSight`: every token (the operator), one team's (its admins) or one
user's own. The service decides the sight (yao_agent/service/tokens.py); the SQL here holds to it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, bindparam, false, select, update

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Identity, Operator
from yao_agent.store import audit
from yao_agent.store.engine import Database
from yao_agent.store.schema import tokens
from yao_agent.store.tx import Sql, Tx

TOKEN_PREFIX = "ya_"
ID_PREFIX = "tok_"
_T = tokens.c
INSERT_TOKEN = Sql(tokens.insert())
SELECT_OWNER = Sql(
    select(_T.id, _T.user_id, _T.team_id, _T.admin, _T.operator, _T.expires_at, _T.last_used_at).where(
        _T.hash == bindparam("hash"), _T.revoked_at.is_(None)
    )
)
# The last use, written when the one stored is a minute old or more: of processes marking one token at
# once, one writes, and a token in use costs one write a minute however many requests it carries.
MARK_USED = Sql(
    update(tokens).where(_T.id == bindparam("id"), _T.last_used_at.is_(None) | (_T.last_used_at <= bindparam("stale"))),
    columns=("last_used_at",),
)
REVOKE_TOKEN = Sql(
    update(tokens).where(
        (_T.hash == bindparam("hash")) | (_T.prefix == bindparam("prefix")) | (_T.id == bindparam("id")),
        _T.revoked_at.is_(None),
    ),
    columns=("revoked_at",),
)
Kind = Literal["member", "admin", "operator"]


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A token as it is listed: never its secret (`prefix` is its first characters, for the CLI's operator)."""

    prefix: str
    user_id: str
    team_id: str | None
    label: str
    created_at: float
    revoked_at: float | None
    admin: bool = False
    id: str = ""
    operator: bool = False
    expires_at: float | None = None
    last_used_at: float | None = None

    @property
    def kind(self) -> Kind:
        return "operator" if self.operator else "admin" if self.admin else "member"


@dataclass(frozen=True, slots=True)
class TokenOwner:
    """What checking a request's token reads: whose it is, until when, and when it was last marked used."""

    id: str
    identity: Identity
    expires_at: float | None
    last_used_at: float | None


@dataclass(frozen=True, slots=True)
class Issued:
    """A token just made: its record, and its secret, which is never seen again."""

    record: TokenRecord
    secret: str


@dataclass(frozen=True, slots=True)
class TokenSight:
    """Whose tokens a caller may list, make and revoke: every token (`team_id` None: the operator), one
    team's (its admins; `team_id` "" is the users without a team), or one user's own (`user_id` too).
    Only the whole sight reaches operator tokens."""

    team_id: str | None = None
    user_id: str | None = None

    @property
    def everyone(self) -> bool:
        return self.team_id is None

    def covers(self, identity: Identity) -> bool:
        """Whether a token for `identity` is within sight (to make it)."""
        if self.everyone:
            return True
        own_team = (identity.team_id or "") == self.team_id
        return own_team and not identity.operator and self.user_id in (None, identity.user_id)

    def where(self) -> list[ColumnElement[bool]]:
        """The sight as SQL conditions on `tokens` (its values are `params`)."""
        if self.everyone:
            return []
        where = [_T.team_id == bindparam("team_id"), _T.operator == false()]
        return where + ([_T.user_id == bindparam("user_id")] if self.user_id is not None else [])

    def params(self) -> dict[str, str]:
        given = {"team_id": self.team_id, "user_id": self.user_id}
        return {k: v for k, v in given.items() if v is not None}

    @property
    def shape(self) -> str:
        return "all" if self.everyone else "team" if self.user_id is None else "user"


EVERYONE = TokenSight()
_SHAPES = {"all": EVERYONE, "team": TokenSight("t"), "user": TokenSight("t", "u")}
LISTS = {(shape, revoked): Sql(select(tokens).where(*sight.where(), *([] if revoked else [_T.revoked_at.is_(None)]))
                               .order_by(_T.created_at, _T.id))
         for shape, sight in _SHAPES.items() for revoked in (False, True)}  # fmt: skip
REVOKE_IDS = {shape: Sql(update(tokens).where(_T.id == bindparam("id"), _T.revoked_at.is_(None), *sight.where()),
                         columns=("revoked_at",)) for shape, sight in _SHAPES.items()}  # fmt: skip
SELECT_ID = Sql(select(tokens).where(_T.id == bindparam("id")))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def record_of(row: Any) -> TokenRecord:
    return TokenRecord(row.prefix, row.user_id, row.team_id or None, row.label, row.created_at, row.revoked_at,
                       bool(row.admin), row.id, bool(row.operator), row.expires_at, row.last_used_at)  # fmt: skip


def _operator(operator: Operator, what: str) -> None:
    if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise PermissionDenied(f"{what} tokens is an operator action")


def _owner(tx: Tx, hashed: str) -> TokenOwner | None:
    found = tx.all(SELECT_OWNER, {"hash": hashed})
    if not found:
        return None
    r = found[0]
    who = Identity(r.user_id, r.team_id or None, admin=bool(r.admin), operator=bool(r.operator))
    return TokenOwner(r.id, who, r.expires_at, r.last_used_at)


class TokenStore:
    """The token half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    async def issue_token(self, sight: TokenSight, identity: Identity, label: str = "",
                          expires_at: float | None = None, by: audit.Actor = audit.CLI) -> Issued:  # fmt: skip
        """Make a token for `identity` (its `admin` and `operator` say its kind), within `sight`."""
        if not sight.covers(identity):
            raise PermissionDenied(f"a token for {identity} is not the caller's to make")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        made = TokenRecord(token[:12], identity.user_id, identity.team_id, label, self.clock(), None, identity.admin,
                           ID_PREFIX + secrets.token_urlsafe(12), identity.operator, expires_at)  # fmt: skip
        values = {"hash": token_hash(token), "prefix": made.prefix, "user_id": made.user_id,
                  "team_id": made.team_id or "", "label": label, "created_at": made.created_at, "revoked_at": None,
                  "admin": made.admin, "id": made.id, "operator": made.operator, "expires_at": expires_at,
                  "last_used_at": None}  # fmt: skip
        insert = audit.logged(lambda tx: tx.execute(INSERT_TOKEN, values), by, audit.token_made(values),
                              made.created_at)  # fmt: skip
        await self.db.write_tx(insert)
        return Issued(made, token)

    async def create_token(
        self, operator: Operator, identity: Identity, label: str = "", expires_at: float | None = None
    ) -> str:
        """The operator's (the CLI's): a token for anyone; its secret."""
        _operator(operator, "making")
        return (await self.issue_token(EVERYONE, identity, label, expires_at, audit.actor_of(operator))).secret

    async def token_owner(self, token: str) -> TokenOwner | None:
        """Whose a token is, expired or not; None if unknown or revoked."""
        return await self.db.read_tx(lambda tx: _owner(tx, token_hash(token)))

    async def identity_for(self, token: str) -> Identity | None:
        """The identity a token stands for; None if unknown or revoked (expiry is the caller's to check)."""
        found = await self.token_owner(token)
        return found.identity if found is not None else None

    async def mark_token_used(self, token_id: str, now: float, every_s: float) -> bool:
        """Note that the token was used at `now`, unless that was noted less than `every_s` before."""
        params = {"id": token_id, "last_used_at": now, "stale": now - every_s}
        return bool(await self.db.write_tx(lambda tx: tx.execute(MARK_USED, params)))

    async def token_list(self, sight: TokenSight, revoked: bool = False) -> list[TokenRecord]:
        """The tokens within sight, oldest first (the revoked ones too with `revoked`)."""
        rows = await self.db.read_tx(lambda tx: tx.all(LISTS[(sight.shape, revoked)], sight.params()))
        return [record_of(r) for r in rows]

    async def revoke_token_id(
        self, sight: TokenSight, token_id: str, by: audit.Actor = audit.CLI
    ) -> TokenRecord | None:
        """Revoke the token of this id if it is within sight and active; it as revoked, else None."""
        now = self.clock()
        params = {"id": token_id, "revoked_at": now, **sight.params()}

        def work(tx: Tx) -> TokenRecord | None:
            if not tx.execute(REVOKE_IDS[sight.shape], params):
                return None
            return record_of(tx.all(SELECT_ID, {"id": token_id})[0])

        rows = audit.tokens_revoked({"hash": "", "prefix": "", "id": token_id, "revoked_at": now})
        return await self.db.write_tx(audit.logged(work, by, lambda tx, done: rows(tx, done is not None), now))

    async def revoke_token(self, operator: Operator, token_or_id: str) -> int:
        """The operator's: revoke a token given as itself, its id or its first 12 characters."""
        _operator(operator, "revoking")
        now = self.clock()
        params = {"hash": token_hash(token_or_id), "prefix": token_or_id[:12] if len(token_or_id) >= 12 else "",
                  "id": token_or_id, "revoked_at": now}  # fmt: skip
        revoke = audit.logged(lambda tx: tx.execute(REVOKE_TOKEN, params), audit.actor_of(operator),
                              audit.tokens_revoked(params), now)  # fmt: skip
        return await self.db.write_tx(revoke)

    async def list_tokens(self, operator: Operator) -> list[TokenRecord]:
        _operator(operator, "listing")
        return await self.token_list(EVERYONE, revoked=True)
