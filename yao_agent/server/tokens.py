"""API tokens over HTTP (CONTRACT §9.3): `GET /api/tokens`, `POST /api/tokens`, `DELETE /api/tokens/{id}`.

Who sees, makes and revokes which tokens is the `Tokens` service's to decide (yao_agent/service/tokens.py),
and the store's queries hold to it again: a token the caller may not see is a 404, whoever's it is. The
secret of a token made here is in this one answer and nowhere else: not in a log line, an error or the
database (which keeps its hash).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from yao_agent import shapes
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.native import runs_of
from yao_agent.server.operating import only
from yao_agent.service.tokens import Tokens, made_to_api, target_of, to_api

router = APIRouter()
# (No pattern on the ids: the service checks them as an identity's, and its 400 names the field.)
Name = Annotated[str, Field(min_length=1, max_length=128)]


class TokenBody(BaseModel):
    """A token to make: whose (user, team), of which kind, with what label, for how long."""

    model_config = ConfigDict(extra="forbid", strict=True)
    user: Name = Field(description="the user the token acts as")
    team: Name | None = Field(None, description="its team: a team admin's own (the default for one); the operator "
                              "names any, or none for a user without a team")  # fmt: skip
    admin: bool = Field(False, description="a team admin's token (a team admin may make one for their own team)")
    operator: bool = Field(False, description="an operator's token: only the operator makes one")
    label: str = Field("", max_length=200, description="a note to tell tokens apart (one line)")
    expires_in_days: int | None = Field(None, ge=1, le=3650, description="days until it expires; none: never")


def tokens_of(request: Request) -> Tokens:
    return runs_of(request).tenancy.tokens


@router.get("/api/tokens", tags=["tokens"], response_model=None, responses=doc.answers(shapes.TokensOut, 400, 401))
async def list_tokens(request: Request, who: Caller) -> shapes.TokensOut:
    """The active tokens the caller may see: every token (the operator), the team's (a team admin), else the
    caller's own. Never a secret."""
    only(request, ())
    now = runs_of(request).rt.clock()
    return {"tokens": [to_api(t, now) for t in await tokens_of(request).list(who)]}


@router.post("/api/tokens", tags=["tokens"], response_model=None,
             responses=doc.answers(shapes.TokenMadeOut, 400, 401, 403, 413))  # fmt: skip
async def create_token(body: TokenBody, request: Request, who: Caller) -> shapes.TokenMadeOut:
    """Make a token: a team admin for their own team (a member's, or an admin's); the operator for anyone.
    The secret `token` is shown in this answer only. 403 for a member, for another team, for an operator's
    token made by anyone but the operator."""
    only(request, ())
    target = target_of(who, body.user, body.team, admin=body.admin, operator=body.operator)
    issued = await tokens_of(request).create(who, target, label=body.label, expires_in_days=body.expires_in_days)
    return made_to_api(issued)


@router.delete("/api/tokens/{token_id}", tags=["tokens"], response_model=None,
               responses=doc.answers(shapes.TokenRevokedOut, 401, 404))  # fmt: skip
async def revoke_token(
    request: Request, who: Caller, token_id: Annotated[str, Path(description="the token's id")]
) -> shapes.TokenRevokedOut:
    """Revoke a token the caller may see (its own; a team admin: the team's; the operator: any). Any other id
    — another team's, one that never was, one revoked already — is a 404."""
    await tokens_of(request).revoke(who, token_id)
    return {"id": token_id, "revoked": True}
