"""Budgets before every model call, in the store (CONTRACT §8.2): a call holds what it may cost while it
runs, and is not made when the scope's spend plus what the calls in flight hold reaches a budget.

`take` checks and holds in one transaction. On PostgreSQL that transaction first takes an advisory lock
on the caller's budget (their team's; their own without a team: a user's scope lies within their
team's, so one lock serialises both), and reads spend and holds in one statement, one snapshot: two
processes never both see room for the last call. SQLite's write lock does the same for one file.

`give_back` ends a hold when its call ends, and writes the call's usage ledger row in the same
transaction: what a call cost is durable the moment it is known, so a run killed later still counts.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Float, bindparam, case, delete, func, literal_column, select, text, union_all

from yao_agent.identity import Identity
from yao_agent.store import ledger
from yao_agent.store.engine import Database
from yao_agent.store.ledger import ScopeKind
from yao_agent.store.quota import Limits, Own, owns
from yao_agent.store.records import RunRecord, StepRecord
from yao_agent.store.schema import budget_holds, spend_days
from yao_agent.store.tx import Sql, Tx

Scope = tuple[ScopeKind, str]
_D, _H = spend_days.c, budget_holds.c


_SPENT = (
    select(_D.scope_kind, func.sum(case((_D.day >= bindparam("today"), _D.cost_usd), else_=0.0)).label("day"),
           func.sum(_D.cost_usd).label("month"), literal_column("0.0", Float).label("held"))
    .where((_D.scope_kind == "team") & (_D.scope_id == bindparam("team"))
           | (_D.scope_kind == "user") & (_D.scope_id == bindparam("user")), _D.day >= bindparam("first"))
    .group_by(_D.scope_kind)
)  # fmt: skip
_HELD = (
    select(_H.scope_kind, literal_column("0.0", Float), literal_column("0.0", Float), func.sum(_H.cost_usd))
    .where((_H.scope_kind == "team") & (_H.scope_id == bindparam("team"))
           | (_H.scope_kind == "user") & (_H.scope_id == bindparam("user")),
           _H.expires_at > bindparam("now", type_=Float))
    .group_by(_H.scope_kind)
)  # fmt: skip
# A hold and its giving back wait for no disk flush on PostgreSQL (they are seen by every other session
# at once all the same): a hold is gone with a crash of the database anyway, and the ledger row written
# as a call ends is flushed by the step's journal commit that follows it (the log is written in order),
# so only a crash of the database server itself, within that moment, could lose it. A flush measured
# 3-4 ms here, against well under one for the rest of each transaction.
NO_FLUSH = Sql({"postgresql": text("SELECT set_config('synchronous_commit', 'off', true)")})
LOCK_BUDGET = Sql(
    {"postgresql": text("SELECT set_config('synchronous_commit', 'off', true), pg_advisory_xact_lock(:key)")}
)
SUMS = Sql(union_all(_SPENT, _HELD))  # per scope: spent today, spent this month, held by calls in flight
HOLD = Sql(budget_holds.insert())
GIVE_BACK = Sql(
    delete(budget_holds).where(
        _H.scope_kind == bindparam("kind"),
        _H.scope_id == bindparam("owner"),
        (_H.id == bindparam("id")) | (_H.expires_at <= bindparam("now", type_=Float)),  # and what crashed calls left
    )
)


@dataclass(frozen=True, slots=True)
class Hold:
    """What one model call holds while it runs: at most `cost_usd`, until it ends or `expires_at`."""

    id: str  # the call's `llm` step
    run_id: str
    cost_usd: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Reached:
    """A budget the scope's spend and holds reached: the call is not made."""

    kind: ScopeKind
    window: str
    limit: float
    spent: float
    held: float


@dataclass(frozen=True, slots=True)
class Taken:
    """What `take` found: the budgets reached (the call is refused), else the scopes it holds in (none
    when no budget holds the caller any more)."""

    reached: tuple[Reached, ...] = ()
    scopes: tuple[Scope, ...] = ()


def take(tx: Tx, identity: Identity, defaults: Mapping[ScopeKind, Limits], days: Mapping[str, str], hold: Hold,
         now: float) -> Taken:  # fmt: skip
    """Check the caller's budgets (`defaults`: app.yml's, per kind; `days`: window → its first day) against
    spend and holds; when none is reached, hold the call in each scope that has a budget."""
    if tx.dialect == "postgresql":
        kind: ScopeKind = "team" if identity.team_id is not None else "user"
        tx.execute(LOCK_BUDGET, {"key": lock_key(ledger.scope_of(identity, kind))})
    budgets = _budgets(owns(tx, identity), defaults)
    if not budgets:
        return Taken()
    sums = _sums(tx, identity, days, now)
    reached = tuple(
        Reached(kind, window, limit, spent, held)
        for kind, windows in budgets.items()
        for window, limit in windows.items()
        if (spent := sums.get((kind, window), 0.0)) + (held := sums.get((kind, "held"), 0.0)) >= limit
    )
    if reached:
        return Taken(reached=reached)
    scopes = tuple(ledger.scope_of(identity, kind) for kind in budgets)
    if hold.cost_usd > 0:
        rows = [{"scope_kind": k, "scope_id": o, "id": hold.id, "run_id": hold.run_id, "cost_usd": hold.cost_usd,
                 "expires_at": hold.expires_at} for k, o in scopes]  # fmt: skip
        tx.executemany(HOLD, rows)
    return Taken(scopes=scopes)


def give_back(tx: Tx, scopes: Sequence[Scope], hold_id: str, run: RunRecord, steps: Sequence[StepRecord],
              now: float) -> None:  # fmt: skip
    """End the call's hold (and any a crashed process left past its expiry), and write its ledger row."""
    if tx.dialect == "postgresql":
        tx.execute(NO_FLUSH)
    tx.executemany(GIVE_BACK, [{"kind": k, "owner": o, "id": hold_id, "now": now} for k, o in scopes])
    ledger.record(tx, run, steps)


def lock_key(scope: Scope) -> int:
    """A signed 64-bit key for PostgreSQL's advisory lock on one scope's budget."""
    kind, owner = scope
    return zlib.crc32(f"yao-agent:budget:{kind}:{owner}".encode()) - (1 << 31)


def _budgets(own: Mapping[str, Own], defaults: Mapping[ScopeKind, Limits]) -> dict[ScopeKind, dict[str, float]]:
    """The budgets that bind each scope, in the windows that have one."""
    found: dict[ScopeKind, dict[str, float]] = {}
    for kind, default in defaults.items():
        mine = own.get(kind, Own())
        windows = {w: limit for w, d in default.items() if (limit := mine.budget(w, d)) is not None}
        if windows:
            found[kind] = windows
    return found


def _sums(tx: Tx, identity: Identity, days: Mapping[str, str], now: float) -> dict[tuple[str, str], float]:
    """(kind, window) → spent in the window, and (kind, "held") → what calls in flight hold."""
    params = {"team": identity.team_id or "", "user": ledger.scope_of(identity, "user")[1], "now": now,
              "today": days["per_day"], "first": days["per_month"]}  # fmt: skip
    sums: dict[tuple[str, str], float] = {}
    for kind, day, month, held in tx.tuples(SUMS, params):
        for key, value in (("per_day", day), ("per_month", month), ("held", held)):
            sums[(kind, key)] = sums.get((kind, key), 0.0) + float(value or 0.0)
    return sums


class HoldStore:
    """The holds half of `SqlStore`."""

    db: Database

    async def take_hold(self, identity: Identity, defaults: Mapping[ScopeKind, Limits], days: Mapping[str, str],
                        hold: Hold, now: float) -> Taken:  # fmt: skip
        """Check the caller's budgets before a model call and hold what it may cost (see `take`)."""
        return await self.db.write_tx(lambda tx: take(tx, identity, defaults, days, hold, now))

    async def give_back(self, scopes: Sequence[Scope], hold_id: str, run: RunRecord, steps: Sequence[StepRecord],
                        now: float) -> None:  # fmt: skip
        """End a call's hold and write its usage ledger row (see `give_back`)."""
        await self.db.write_tx(lambda tx: give_back(tx, scopes, hold_id, run, steps, now))
