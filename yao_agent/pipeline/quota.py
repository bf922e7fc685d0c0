"""Stage 1, the rest of it: a run may start only within its team's and user's budgets and rate limits
(CONTRACT §8.2). Checked after permission and before anything is created; a refusal is a `Refused`
error (HTTP 429), and a run that started is never cut off by what it spends.

Budgets: app.yml's defaults per kind of scope, over which a scope's own settings (PUT /api/budgets,
`yao-agent budgets set`) win window by window; spend is the usage ledger's, in calendar windows (UTC).
Rate limits: runs started, and model tokens used, in the last minute, counted in the database so
every process sharing it counts the same (store/quota.py).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from yao_agent.errors import BudgetExceeded, RateLimited
from yao_agent.identity import Identity
from yao_agent.pipeline.runtime import Runtime
from yao_agent.store.ledger import ScopeKind
from yao_agent.store.quota import RateRule

WINDOWS = ("per_day", "per_month")
NAMES = {"per_day": "daily", "per_month": "monthly"}


async def check(rt: Runtime, identity: Identity, run_id: str) -> None:
    """Refuse the run if a budget is spent or a rate limit reached; else count it against the limits."""
    await check_budgets(rt, identity)
    rules = rate_rules(rt, identity)
    if rules:
        wait = await rt.store.admit(identity, run_id, rules)
        if wait is not None:
            raise RateLimited(_rate_message(identity, rules, wait), retry_after=wait)


def kinds_of(identity: Identity) -> tuple[ScopeKind, ...]:
    return ("team", "user") if identity.team_id is not None else ("user",)


async def check_budgets(rt: Runtime, identity: Identity) -> None:
    now = datetime.fromtimestamp(rt.clock(), UTC)
    starts = {window: window_start(window, now).timestamp() for window in WINDOWS}
    budgets = rt.app.config.budgets
    defaults: dict[ScopeKind, dict[str, float | None]] = {
        kind: {"per_day": budgets.of(kind).per_day, "per_month": budgets.of(kind).per_month}
        for kind in kinds_of(identity)
    }
    spending = await rt.store.budget_state(identity, defaults, starts)
    for kind, windows in spending.items():
        for window, (limit, spent) in windows.items():
            if spent >= limit:
                raise BudgetExceeded(_budget_message(identity, kind, window, spent, limit, now))


def window_start(window: str, now: datetime) -> datetime:
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if window == "per_day" else day.replace(day=1)


def window_end(window: str, now: datetime) -> datetime:
    start = window_start(window, now)
    if window == "per_day":
        return datetime.fromtimestamp(start.timestamp() + 86400, UTC)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def rate_rules(rt: Runtime, identity: Identity) -> list[RateRule]:
    limits = rt.app.config.limits
    if not limits.rate_limited:
        return []
    rules: list[RateRule] = []
    for kind in kinds_of(identity):
        for counts, per_scope in (("requests", limits.requests_per_minute), ("tokens", limits.tokens_per_minute)):
            limit = per_scope.of(kind)
            if limit is not None:
                rules.append(RateRule(kind, counts, limit))
    return rules


def who(identity: Identity, kind: ScopeKind) -> str:
    return f"team {identity.team_id}" if kind == "team" else f"user {identity}"


def _budget_message(identity: Identity, kind: ScopeKind, window: str, spent: float, limit: float,
                    now: datetime) -> str:  # fmt: skip
    resets = window_end(window, now).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{who(identity, kind)} spent ${spent:.2f} of its ${limit:.2f} {NAMES[window]} budget; it resets {resets}"


def _rate_message(identity: Identity, rules: list[RateRule], wait: float) -> str:
    """The refusal in words, with the wait in whole seconds as HTTP's Retry-After gives it: the CLI has no
    header to read it from."""
    said = "; ".join(f"{who(identity, r.kind)}: {r.limit:g} {r.counts} per minute" for r in rules)
    return f"too many requests: a rate limit was reached ({said}); try again in {max(1, math.ceil(wait))} s"
