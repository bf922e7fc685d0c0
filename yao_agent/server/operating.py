"""Usage and budgets over HTTP (CONTRACT §6, §8.2, §9.3): `GET /api/usage`, `GET /api/budgets`, `PUT /api/budgets`.

Who may see or change what is the `Tenancy` service's to decide (yao_agent/service/teams.py): a member gets 403 for
the team's usage, another member's, and any budget change; anybody but the operator gets 403 for another team's
(`team`) and for the deployment's usage by team. These routes read the request and render.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from yao_agent import shapes
from yao_agent.errors import UsageError
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import InvalidParam
from yao_agent.server.native import runs_of

router = APIRouter()
USD = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# (No max_length: `Tenancy` checks the id as an identity's, and its 400 names `user` in `param`.)
User = Annotated[str | None, Query(description="a team admin's: one member of the team")]
Team = Annotated[str | None, Query(description="the operator's: any team (another caller: only their own)")]


class BudgetBody(BaseModel):
    """Each window given is set (null: none of the admin's there, where no ceiling holds it); a window left
    out stays."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` or "5" is no amount of USD
    per_day: USD | None = Field(None, description="USD per calendar day (UTC), or null for none")
    per_month: USD | None = Field(None, description="USD per calendar month (UTC), or null for none")


def only(request: Request, names: Collection[str]) -> None:
    """Each query parameter known and given once: one dropped unseen would answer another question."""
    given = [name for name, _ in request.query_params.multi_items()]
    for name in given:
        if name not in names:
            raise InvalidParam(f"unknown query parameter {name!r} (expected {', '.join(names)})", param=name)
        if given.count(name) > 1:
            raise InvalidParam(f"{name}: given more than once", param=name)


def naming(exc: UsageError, names: Collection[str]) -> UsageError:
    """A plain usage error about one field (`from: …`) as one that names it in `param`."""
    name = str(exc).partition(":")[0]
    return InvalidParam(str(exc), param=name) if type(exc) is UsageError and name in names else exc


USAGE_PARAMS = ("from", "to", "by", "user", "team")
FROM = "first day, YYYY-MM-DD (UTC); default: the first day of `to`'s month"


@router.get(
    "/api/usage", tags=["usage"], response_model=None, responses=doc.answers(shapes.UsageReportOut, 400, 401, 403)
)
async def usage(
    request: Request,
    who: Caller,
    first: Annotated[str | None, Query(alias="from", description=FROM)] = None,
    last: Annotated[str | None, Query(alias="to", description="last day, included; default: today (UTC)")] = None,
    # Checked by `Tenancy.usage` (not as a Literal here): its 400 names `by` in `param`, as for the other fields.
    by: Annotated[
        str, Query(description="day | assistant | connector | user | team (user: team admins; team: the operator)")
    ] = "day",
    user: User = None,
    team: Team = None,
) -> shapes.UsageReportOut:
    """Usage and cost of the caller's scope: a member's own; a team admin's whole team, or one member's with
    `user` (403 for a member asking for the team's, `by=user` or another member's); the operator's any
    team's (`team`), or with `by=team` the whole deployment's, a row per team (403 for anyone else)."""
    only(request, USAGE_PARAMS)
    try:
        return await runs_of(request).tenancy.usage(who, first=first, last=last, by=by, user=user, team=team)
    except UsageError as exc:
        raise naming(exc, USAGE_PARAMS) from None


@router.get(
    "/api/budgets", tags=["usage"], response_model=None, responses=doc.answers(shapes.BudgetsOut, 400, 401, 403)
)
async def budgets(request: Request, who: Caller, user: User = None, team: Team = None) -> shapes.BudgetsOut:
    """The budgets that hold the caller's runs — a member's team's and own; a team admin's team's, or one
    member's with `user`; the operator's, any team's with `team` — each window with its budget, where that
    comes from, the spend so far and when it resets (403 for another team's but the operator's)."""
    only(request, ("user", "team"))
    try:
        return await runs_of(request).tenancy.budgets(who, user=user, team=team)
    except UsageError as exc:
        raise naming(exc, ("user", "team")) from None


@router.put("/api/budgets", tags=["usage"], response_model=None,
            responses=doc.answers(shapes.BudgetsOut, 400, 401, 403, 413))  # fmt: skip
async def set_budgets(
    body: BudgetBody, request: Request, who: Caller, user: User = None, team: Team = None
) -> shapes.BudgetsOut:
    """Set the team's budget (a team admin; one member's with `user`) at or below the operator's ceiling
    that holds it; 403 above it, for null under a ceiling, for a member and for a caller without a team.
    The operator sets the ceiling of any team (`team`) or user instead, as `yao-agent budgets set` does.
    Answers the budgets as `GET /api/budgets` shows them."""
    only(request, ("user", "team"))
    limits = body.model_dump(exclude_unset=True)
    try:
        return await runs_of(request).tenancy.set_budget(who, limits, user=user, team=team)
    except UsageError as exc:
        raise naming(exc, ("user", "team", "per_day", "per_month")) from None
