"""The audit log over HTTP (CONTRACT §9.3): `GET /api/audit`.

Who reads which rows is `sight_for`'s to decide (yao_agent/store/audit.py): the operator every row, a
team admin the team's — rows whose actor is of the team or that change something of it —, a caller
without a team their own changes, a member of a team nothing (403). This route reads the request and
renders.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from yao_agent import shapes
from yao_agent.errors import UsageError
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.native import runs_of
from yao_agent.server.operating import naming, only
from yao_agent.store import audit

router = APIRouter()
PARAMS = ("from", "to", "action", "limit")
FROM = "the first day (YYYY-MM-DD, UTC) or moment (ISO 8601) of the rows; default: the first row"
TO = "the last day, included whole, or a moment, excluded; default: now"
ACTION = "one action (token.create, role.set, …) or a family of them (token, role, budget, kb, kb.document, …)"


@router.get("/api/audit", tags=["audit"], response_model=None, responses=doc.answers(shapes.AuditOut, 400, 401, 403))
async def audit_log(
    request: Request,
    who: Caller,
    first: Annotated[str | None, Query(alias="from", description=FROM)] = None,
    last: Annotated[str | None, Query(alias="to", description=TO)] = None,
    action: Annotated[str | None, Query(description=ACTION)] = None,
    # (Checked below, not by FastAPI: its 400 then names `limit` in `param`, as for the other fields.)
    limit: Annotated[str, Query(description=f"at most this many rows, 1 to {audit.MAX_LIMIT}")] = "100",
) -> shapes.AuditOut:
    """The changes the caller may read, newest first: every change for the operator, a team admin's
    team's (made by its people, or of its tokens, roles, budgets and collections), a caller without a
    team's own; 403 for a member of a team."""
    only(request, PARAMS)
    try:
        sight = audit.sight_for(who)
        since, until = audit.span(first, last)
        wanted = audit.check_action(action)
        count = audit.check_limit(limit)
    except UsageError as exc:
        raise naming(exc, PARAMS) from None
    rows = await runs_of(request).rt.store.audit_rows(sight, since, until, wanted, count)
    return {"rows": [audit.shown(row) for row in rows]}
