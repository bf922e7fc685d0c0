"""API tokens as the HTTP API asks for them (CONTRACT §9.3): whose a request's token is, and who lists,
makes and revokes which tokens.

- The operator (a token made with `--operator`) sees, makes and revokes any token, of any kind.
- A team admin sees and revokes their team's tokens, and makes tokens for their own team — a member's or
  another admin's (a team admin can do nothing a fellow admin could not) — never an operator's, never
  another team's.
- Anybody else (a member; a caller without a team) sees and revokes their own tokens and makes none.

An expired token is refused as such (`TokenExpired`), an unknown or revoked one as unknown. Each use is
noted (`last_used_at`) at most once a minute per token, in a task of its own: the request does not wait
for the write, and tokens in use cost a write a minute each, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING

from yao_agent.errors import Forbidden, NotFound, PermissionDenied, TokenExpired, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import iso_time
from yao_agent.service.process import Process
from yao_agent.service.teams import ADMIN_TOKEN, OPERATOR_TOKEN
from yao_agent.store.audit import actor_of
from yao_agent.store.protocol import Store
from yao_agent.store.tokens import EVERYONE, Issued, TokenOwner, TokenRecord, TokenSight

if TYPE_CHECKING:
    from yao_agent.shapes import TokenMadeOut, TokenOut

log = logging.getLogger("yao_agent.tokens")
USE_EVERY_S = 60.0  # how stale a token's last use may be before it is written again
MARKS_KEPT = 10_000  # tokens whose last write this process remembers, before it forgets the stale ones
DAY_S = 86_400.0


class UseMarks:
    """When each token's use was last written by this process, and the writes under way."""

    def __init__(self, every_s: float = USE_EVERY_S) -> None:
        self.every_s = every_s
        self.written: dict[str, float] = {}
        self.pending: set[asyncio.Task[None]] = set()

    def due(self, owner: TokenOwner, now: float) -> bool:
        """Whether the use at `now` is to be written (and, if so, count it written from here on)."""
        if owner.last_used_at is not None and now - owner.last_used_at < self.every_s:
            return False  # written by this process or another less than a minute ago
        if now - self.written.get(owner.id, -math.inf) < self.every_s:
            return False
        if len(self.written) >= MARKS_KEPT:
            self.written = {k: at for k, at in self.written.items() if now - at < self.every_s}
        self.written[owner.id] = now
        return True

    def start(self, store: Store, token_id: str, now: float) -> None:
        task = asyncio.get_running_loop().create_task(self._write(store, token_id, now))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _write(self, store: Store, token_id: str, now: float) -> None:
        try:
            await store.mark_token_used(token_id, now, self.every_s)
        except Exception:  # a last-used time not written is no reason to fail anything
            log.warning("could not note the use of token %s", token_id, exc_info=True)

    async def aclose(self) -> None:
        await asyncio.gather(*self.pending, return_exceptions=True)


class Tokens:
    """The tokens of the callers of the app `process` serves."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.marks = UseMarks()

    @property
    def store(self) -> Store:
        return self.process.rt.store

    async def identity_for(self, token: str) -> Identity | None:
        """Whose token this is: None when unknown or revoked; TokenExpired past its expiry."""
        owner = await self.store.token_owner(token)
        if owner is None:
            return None
        now = self.process.rt.clock()
        if owner.expires_at is not None and now >= owner.expires_at:
            raise TokenExpired(owner.expires_at)
        if self.marks.due(owner, now):
            self.marks.start(self.store, owner.id, now)
        return owner.identity

    async def list(self, caller: Identity) -> list[TokenRecord]:
        """The active tokens the caller may see: all (the operator), the team's (an admin), else their own."""
        return await self.store.token_list(sight_of(caller))

    async def create(
        self, caller: Identity, target: Identity, *, label: str = "", expires_in_days: int | None = None
    ) -> Issued:
        """A token for `target` (its `admin`, `operator` say the kind), if the caller may make it."""
        sight = minting(caller, target)
        if label and not label.isprintable():
            raise UsageError("label: a label is one line of printable text")
        expires_at = None if expires_in_days is None else self.process.rt.clock() + expires_in_days * DAY_S
        return await self.store.issue_token(sight, target, label, expires_at, actor_of(caller))

    async def revoke(self, caller: Identity, token_id: str) -> TokenRecord:
        """Revoke an active token the caller may see; NotFound for any other id, whoever's it is."""
        found = await self.store.revoke_token_id(sight_of(caller), token_id, actor_of(caller))
        if found is None:
            raise NotFound(f"no active token with id {token_id!r} among the tokens you may revoke")
        return found

    async def aclose(self) -> None:
        """Wait for the last-used times being written."""
        await self.marks.aclose()


def sight_of(caller: Identity) -> TokenSight:
    if caller.operator:
        return EVERYONE
    if caller.admin and caller.team_id is not None:
        return TokenSight(caller.team_id)
    return TokenSight(caller.team_id or "", caller.user_id)


def minting(caller: Identity, target: Identity) -> TokenSight:
    """The sight the caller makes `target`'s token in; Forbidden for a token the caller may not make."""
    if caller.operator:
        return EVERYONE
    if not (caller.admin and caller.team_id is not None):
        raise Forbidden(f"only a team admin (for their team) or the operator makes tokens: use {ADMIN_TOKEN}")
    if target.operator:
        raise Forbidden(f"operator: only the operator makes operator tokens: use {OPERATOR_TOKEN}")
    if target.team_id != caller.team_id:
        raise Forbidden(f"team: a team admin makes tokens for their own team ({caller.team_id}) only")
    return TokenSight(caller.team_id)


def target_of(caller: Identity, user: str, team: str | None, *, admin: bool, operator: bool) -> Identity:
    """The identity a token is asked for: `team` defaults to a team admin's own (the operator's: none);
    a malformed id is the caller's mistake (400, naming the field)."""
    if team is None and not caller.operator:
        team = caller.team_id
    if admin and team is None:
        raise UsageError("admin: a team admin's token needs a team (give `team`)")
    try:
        return Identity(user, team, admin=admin, operator=operator)
    except PermissionDenied as exc:
        raise UsageError(f"{'user' if 'user id' in str(exc) else 'team'}: {exc}") from None


def to_api(record: TokenRecord, now: float) -> TokenOut:
    return {"id": record.id, "user_id": record.user_id, "team_id": record.team_id, "kind": record.kind,
            "admin": record.admin, "label": record.label, "created_at": iso_time(record.created_at),
            "expires_at": _time(record.expires_at), "last_used_at": _time(record.last_used_at),
            "expired": record.expires_at is not None and now >= record.expires_at}  # fmt: skip


def made_to_api(issued: Issued) -> TokenMadeOut:
    made = issued.record
    return {"id": made.id, "token": issued.secret, "user_id": made.user_id, "team_id": made.team_id,
            "kind": made.kind, "admin": made.admin, "label": made.label, "created_at": iso_time(made.created_at),
            "expires_at": _time(made.expires_at)}  # fmt: skip


def _time(at: float | None) -> str | None:
    return None if at is None else iso_time(at)


def expired_message(exc: TokenExpired) -> str:
    return (f"token expired at {iso_time(exc.expires_at)}: ask for a new one (a team admin makes it with "
            "POST /api/tokens, the operator with `yao-agent tokens create`)")  # fmt: skip
