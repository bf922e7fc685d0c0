"""The web page's sign-in sessions: the store keeps a hash of each session id, never the id itself."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, select

from yao_agent.identity import Identity
from yao_agent.store.engine import Database
from yao_agent.store.schema import web_sessions
from yao_agent.store.tx import Sql, Tx

INSERT_SESSION = Sql(web_sessions.insert())
SELECT_SESSION = Sql(
    select(
        web_sessions.c.user_id,
        web_sessions.c.team_id,
        web_sessions.c.admin,
        web_sessions.c.operator,
        web_sessions.c.csrf,
    ).where(web_sessions.c.hash == bindparam("hash"), web_sessions.c.expires_at > bindparam("now"))
)
DELETE_SESSION = Sql(delete(web_sessions).where(web_sessions.c.hash == bindparam("hash")))
DELETE_EXPIRED = Sql(delete(web_sessions).where(web_sessions.c.expires_at <= bindparam("now")))


@dataclass(frozen=True, slots=True)
class WebSession:
    """A signed-in page: who, and the token its writes must carry."""

    identity: Identity
    csrf: str


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


class SessionStore:
    """The web-session half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    async def create_session(self, identity: Identity, lifetime_s: float) -> tuple[str, WebSession]:
        """A new session for `identity` (ended ones are swept meanwhile): its id, for the cookie, and it."""
        session_id, csrf, now = secrets.token_urlsafe(32), secrets.token_urlsafe(24), self.clock()
        values = {"hash": session_hash(session_id), "user_id": identity.user_id, "team_id": identity.team_id or "",
                  "admin": identity.admin, "operator": identity.operator, "csrf": csrf, "created_at": now,
                  "expires_at": now + lifetime_s}  # fmt: skip

        def write(tx: Tx) -> None:
            tx.execute(DELETE_EXPIRED, {"now": now})
            tx.execute(INSERT_SESSION, values)

        await self.db.write_tx(write)
        return session_id, WebSession(identity, csrf)

    async def session(self, session_id: str) -> WebSession | None:
        """The session a cookie holds; None if unknown, ended or expired."""
        params = {"hash": session_hash(session_id), "now": self.clock()}
        found = await self.db.read_tx(lambda tx: tx.tuples(SELECT_SESSION, params))
        if not found:
            return None
        user_id, team_id, admin, operator, csrf = found[0]
        who = Identity(user_id, team_id or None, admin=bool(admin), operator=bool(operator), via="oidc")
        return WebSession(who, csrf)

    async def end_session(self, session_id: str) -> bool:
        params = {"hash": session_hash(session_id)}
        return bool(await self.db.write_tx(lambda tx: tx.execute(DELETE_SESSION, params)))
