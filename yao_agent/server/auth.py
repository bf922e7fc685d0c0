"""Bearer tokens → identities. The identity of a request comes from its token, never from its body."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from yao_agent.identity import Identity
from yao_agent.server.errors import Unauthorized


async def caller(request: Request) -> Identity:
    """The FastAPI dependency every API route takes: 401 without a valid, unrevoked token."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token (expected the header Authorization: Bearer <token>)")
    identity = await request.app.state.runtime.store.identity_for(token.strip())
    if identity is None:
        raise Unauthorized("invalid or revoked token")
    return identity


Caller = Annotated[Identity, Depends(caller)]
