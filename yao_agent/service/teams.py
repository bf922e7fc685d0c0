"""Operating for many teams: who sees and changes which usage, budgets and role mappings, and how usage
and budgets are shown (CONTRACT §6 "Roles of tokens", §8.2).

A team admin (a token made with `--admin`) sees the whole team's usage and budgets — or one member's,
with `user` — and changes the team's budgets and a member's, at or below the operator's ceilings, and
the team's role mappings. The operator (a token made with `--operator`) sees and sets any team's or
user's: the whole deployment's usage by team, any scope's budgets, whose ceilings it sets. A member
sees their own usage and the budgets their runs are held to, and changes nothing of the team's. A
caller without a team is their own admin, of their own scope only — except for budgets, which only
the operator sets for them: a budget binds those who cannot change it.

The HTTP API (through the `Tenancy` service, tenancy.py) and the CLI (the trusted operator, any scope)
show the same report and the same budget view, built here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from yao_agent.dsl.specs import Budgets
from yao_agent.errors import Forbidden, PermissionDenied, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import iso_time
from yao_agent.pipeline.quota import NAMES, WINDOWS, window_end, window_start
from yao_agent.store.ledger import GROUPS, Group, ScopeKind, scope_of, shown
from yao_agent.store.protocol import TenancyStore
from yao_agent.store.quota import Own

if TYPE_CHECKING:
    from yao_agent.shapes import BudgetOut, BudgetsOut, UsageReportOut, UsageScopeOut

DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
ADMIN_TOKEN = "a team admin token (`yao-agent tokens create --admin`)"
OPERATOR_TOKEN = "an operator token (`yao-agent tokens create --operator`)"


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose usage or budgets: a whole team (no `user_id`), one user of a team, a user without a team, or
    (usage only, `everyone`) the whole deployment."""

    team_id: str | None
    user_id: str | None
    everyone: bool = False

    def __post_init__(self) -> None:
        if self.team_id is None and self.user_id is None and not self.everyone:
            raise ValueError("a scope names a team, a user, or both")

    @property
    def kinds(self) -> tuple[ScopeKind, ...]:
        """The budgets that hold the scope's runs: its team's and its user's (a whole team: the team's)."""
        if self.team_id is None:
            return ("user",)
        return ("team",) if self.user_id is None else ("team", "user")

    @property
    def subject(self) -> Identity:
        """An identity the scope's spend is read for (a whole team's is the same for any of its users)."""
        return Identity(self.user_id or "any", self.team_id)

    @property
    def budget_scope(self) -> tuple[ScopeKind, str]:
        """The budget a change to this scope sets: its user's, or the whole team's."""
        return scope_of(self.subject, self.kinds[-1])

    def to_api(self) -> UsageScopeOut:
        out: UsageScopeOut = {}
        if self.team_id is not None:
            out["team_id"] = self.team_id
        if self.user_id is not None:
            out["user_id"] = self.user_id
        return out


def named(team_id: str | None, user_id: str | None) -> Scope:
    """A scope named by ids from outside (a query, the command line): a malformed id is the caller's
    mistake (HTTP 400, exit 2), where `Identity` would refuse it as a permission."""
    try:
        Identity(user_id or "any", team_id)
    except PermissionDenied as exc:
        raise UsageError(f"{'user' if 'user id' in str(exc) else 'team'}: {exc}") from None
    return Scope(team_id, user_id)


DEPLOYMENT = Scope(None, None, everyone=True)


def scope_for(
    identity: Identity, user: str | None, what: str, *, change: bool = False, team: str | None = None
) -> Scope:
    """The scope the caller asks for `what` of: their own, or (a team admin) the team's or one member's,
    or (the operator) any team's (`team`) or user's. Forbidden for what a member may not see or change;
    nobody but the operator reaches another team's."""
    if identity.operator:
        return operator_scope(identity, user, team)
    if team is not None and team != identity.team_id:
        raise Forbidden(f"team: only the operator sees another team's {what}: use {OPERATOR_TOKEN}")
    if identity.team_id is None:  # their own admin, of nobody else
        if user is not None and user != identity.user_id:
            raise Forbidden(f"{what}: a caller without a team has only their own")
        return Scope(None, identity.user_id)
    if identity.admin:
        return Scope(identity.team_id, None) if user is None else named(identity.team_id, user)
    if change:
        raise Forbidden(f"only a team admin changes team {identity.team_id}'s {what}: use {ADMIN_TOKEN}")
    if user is not None and user != identity.user_id:
        raise Forbidden(f"only a team admin sees another member's {what}: use {ADMIN_TOKEN}")
    return Scope(identity.team_id, identity.user_id)


def operator_scope(identity: Identity, user: str | None, team: str | None) -> Scope:
    """The operator's: team `team` (default: its own), or user `user` of it (or without a team, when it has
    none); without either, the operator's own scope."""
    in_team = team if team is not None else identity.team_id
    if user is not None or team is not None:
        return named(in_team, user)
    return Scope(in_team, None) if in_team is not None else Scope(None, identity.user_id)


def require_admin(identity: Identity, what: str) -> None:
    """Refuse a member's change of what is the whole team's (a caller without a team administers their own)."""
    if not identity.administers_team:
        raise Forbidden(f"only a team admin changes team {identity.team_id}'s {what}: use {ADMIN_TOKEN}")


# -- usage -------------------------------------------------------------------------------------------


def group(by: str) -> Group:
    if by not in GROUPS:
        raise UsageError(f"by: expected one of {', '.join(GROUPS)}, got {by!r}")
    return by


def usage_scope(identity: Identity, user: str | None, by: Group, team: str | None = None) -> Scope:
    if by == "team" and not identity.operator:
        raise Forbidden(f"usage by team shows every team of the deployment: use {OPERATOR_TOKEN}")
    if identity.operator and by == "team" and team is None and user is None:
        return DEPLOYMENT
    scope = scope_for(identity, user, "usage", team=team)
    if by == "user" and scope.user_id is not None and not identity.administers_team:
        raise Forbidden(f"usage by user shows every member of team {identity.team_id}: use {ADMIN_TOKEN}")
    return scope


def parse_day(text: str, name: str) -> date:
    """A day as YYYY-MM-DD (only that spelling: `date.fromisoformat` also takes week dates and more)."""
    try:
        if DAY.fullmatch(text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise UsageError(f"{name}: expected a date as YYYY-MM-DD, got {text!r}")


def today(now: float) -> date:
    return datetime.fromtimestamp(now, UTC).date()


def span(first: str | None, last: str | None, now: float) -> tuple[date, date]:
    """The days a report covers, both included: `to` defaults to today (UTC) and `from` to the first day
    of `to`'s month, so that either alone names a sensible span."""
    end = parse_day(last, "to") if last is not None else today(now)
    start = parse_day(first, "from") if first is not None else end.replace(day=1)
    if start > end:
        raise UsageError(f"from: {start} is after to ({end})")
    return start, end


async def usage_report(store: TenancyStore, scope: Scope, first: date, last: date, by: Group) -> UsageReportOut:
    """The report of CONTRACT §8.2: `{scope, from, to, by, rows: [{key, …}], total}` (the whole deployment's:
    `scope` {})."""
    team_id = None if scope.everyone else scope.team_id or ""
    rows, total = await store.usage_report(team_id, scope.user_id, first.isoformat(), last.isoformat(), by)
    return {"scope": scope.to_api(), "from": first.isoformat(), "to": last.isoformat(), "by": by, "rows": rows,
            "total": total}  # fmt: skip


# -- budgets -----------------------------------------------------------------------------------------


def check_limits(limits: Mapping[str, Any]) -> dict[str, float | None]:
    """Budget windows as given (`per_day`, `per_month`: USD ≥ 0, or None for no budget there)."""
    if not limits:
        raise UsageError("give per_day and/or per_month (USD, or null for no budget)")
    checked: dict[str, float | None] = {}
    for window, value in limits.items():
        if window not in WINDOWS:
            raise UsageError(f"{window}: unknown budget window (expected per_day or per_month)")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
                                  or value == float("inf")):  # fmt: skip
            raise UsageError(f"{window}: expected USD as a number ≥ 0, or null for no budget (got {value!r})")
        checked[window] = None if value is None else float(value)
    return checked


def changing_budget(identity: Identity, user: str | None, team: str | None = None) -> Scope:
    """The scope whose budget the caller asks to change: a team admin's team's, or one member's; the
    operator's, any team's or user's (whose ceiling it sets). A caller without a team changes no budget,
    not even their own (it would lift the one that holds them)."""
    if identity.operator:
        return operator_scope(identity, user, team)
    if identity.team_id is None:
        raise Forbidden("a caller without a team cannot change budgets: the operator sets them (app.yml's "
                        "`budgets`, `yao-agent budgets set`)")  # fmt: skip
    return scope_for(identity, user, "budgets", change=True, team=team)


def within_ceiling(scope: Scope, defaults: Budgets, limits: Mapping[str, float | None]) -> Callable[[Own], None]:
    """What refuses a team admin's budget above the ceiling that holds the scope, or none (null) where a
    ceiling holds it (Forbidden, naming the ceiling); it reads the scope's settings where they are written."""
    kind, owner = scope.budget_scope

    def allowed(own: Own) -> None:
        for window, value in limits.items():
            cap = own.ceiling(window, getattr(defaults.of(kind), window))
            if cap is None or (value is not None and value <= cap):
                continue
            whose = f"{kind} {shown(owner)}'s {NAMES[window]} budget"
            by = "set by the operator" if window in own.ceilings else f"app.yml's budgets.{kind}.{window}"
            tried = "none (null)" if value is None else f"${value:,.2f}"
            raise Forbidden(f"{window}: {whose} may not be {tried}: its ceiling is ${cap:,.2f} ({by}); a team "
                            "admin sets it at or below that, and only the operator raises the ceiling")  # fmt: skip

    return allowed


async def budget_view(store: TenancyStore, defaults: Budgets, scope: Scope, now: float) -> BudgetsOut:
    """The budgets that hold the scope's runs, window by window: the budget that binds, where it comes from
    (app.yml, the operator's ceiling, a team admin's budget), the ceiling and the admin's budget apart,
    what was spent in the current window, and when the window resets."""
    at = datetime.fromtimestamp(now, UTC)
    starts = {window: window_start(window, at).timestamp() for window in WINDOWS}
    found = await store.spending(scope.subject, scope.kinds, starts)
    budgets: list[BudgetOut] = []
    for kind, (own, spent) in found.items():
        for window in WINDOWS:
            default = getattr(defaults.of(kind), window)
            limit, cap, chosen = own.budget(window, default), own.ceiling(window, default), own.admin.get(window)
            capped_by = "operator" if window in own.ceilings else "app.yml"
            budgets.append({
                "scope": kind, "id": shown(scope_of(scope.subject, kind)[1]), "window": window, "budget_usd": limit,
                "source": "admin" if chosen is not None and chosen == limit and chosen != cap else capped_by,
                "ceiling_usd": cap, "ceiling_source": capped_by, "admin_usd": chosen,
                "spent_usd": round(spent[window], 6),
                "remaining_usd": None if limit is None else round(max(0.0, limit - spent[window]), 6),
                "since": iso_time(starts[window]), "resets_at": iso_time(window_end(window, at).timestamp()),
            })  # fmt: skip
    return {"scope": scope.to_api(), "budgets": budgets}
