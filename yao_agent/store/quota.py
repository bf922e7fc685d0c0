"""Budgets and rate limits in the store (CONTRACT §8.2): a scope's own budget settings — the operator's
ceilings and a team admin's budget under them, kept apart (`Own`) — what it spent, and the runs it
started this minute. (What model calls in flight hold: holds.py.)

A run's admission under a rate limit is counted and recorded in one transaction. On PostgreSQL that
transaction first takes an advisory lock on the scope, so processes sharing the database admit no more
than the limit between them; SQLite's write lock does the same for the processes of one file. (On
PostgreSQL a run's start reads its budgets and is admitted in one transaction of two statements, under
the same locks: admission.py.)
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from sqlalchemy import Float, bindparam, delete, func, select, text
from sqlalchemy.sql import ClauseElement

from yao_agent.errors import PermissionDenied
from yao_agent.identity import Identity, Operator
from yao_agent.store import audit, ledger, runlog
from yao_agent.store.audit import CLI, Actor
from yao_agent.store.engine import Database
from yao_agent.store.ledger import ScopeKind
from yao_agent.store.schema import budgets, rate_events, usage_ledger
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql, Tx

if TYPE_CHECKING:
    from yao_agent.shapes import UsageRowOut, UsageTotalOut

WINDOW_S = 60.0  # rate limits count the last minute

_SCOPE = (budgets.c.scope_kind == bindparam("kind")) & (budgets.c.scope_id == bindparam("owner"))
GET_BUDGET = Sql(select(budgets.c.limits, budgets.c.ceilings).where(_SCOPE))
GET_BOTH = Sql(  # a caller's team's and own settings in one round trip: every run start reads them
    select(budgets.c.scope_kind, budgets.c.limits, budgets.c.ceilings).where(
        ((budgets.c.scope_kind == "team") & (budgets.c.scope_id == bindparam("team")))
        | ((budgets.c.scope_kind == "user") & (budgets.c.scope_id == bindparam("user")))
    )
)
LIST_BUDGETS = Sql(select(budgets).order_by(budgets.c.scope_kind, budgets.c.scope_id))


def _upsert(dialect: str) -> ClauseElement:
    insert = conflict_insert(dialect, budgets)
    return insert.on_conflict_do_update(
        index_elements=["scope_kind", "scope_id"],
        set_={"limits": insert.excluded.limits, "ceilings": insert.excluded.ceilings,
              "updated_at": insert.excluded.updated_at},
    )  # fmt: skip


SET_BUDGET = Sql(Spelled(_upsert), columns=[c.key for c in budgets.c])
_EVENTS = (rate_events.c.scope_kind == bindparam("kind")) & (rate_events.c.scope_id == bindparam("owner"))
_RECENT = rate_events.c.at > bindparam("since", type_=Float)
COUNT_RECENT = Sql(select(func.count(), func.min(rate_events.c.at)).where(_EVENTS, _RECENT))
FORGET_OLD = Sql(delete(rate_events).where(_EVENTS, rate_events.c.at <= bindparam("since", type_=Float)))
ADMIT = Sql(rate_events.insert())
LOCK_SCOPE = Sql({"postgresql": text("SELECT pg_advisory_xact_lock(:key)")})
_L = usage_ledger.c
FIRST_TOKENS_TEAM = Sql(select(func.min(_L.at)).where(_L.team_id == bindparam("team_id"), _L.at >= bindparam("since")))
FIRST_TOKENS_USER = Sql(
    select(func.min(_L.at)).where(
        _L.user_id == bindparam("user_id"), _L.team_id == bindparam("team_id"), _L.at >= bindparam("since")
    )
)


# Per scope, per window it has a budget in: (the budget, what was spent in the window so far).
Spending = dict[ScopeKind, dict[str, tuple[float, float]]]
Limits = Mapping[str, float | None]  # per window (`per_day`, `per_month`) set: USD, or None for none
NO_LIMITS: Limits = {}


@dataclass(frozen=True, slots=True)
class Own:
    """A scope's own budget settings, each only in the windows set: the operator's ceilings (over app.yml's
    defaults) and a team admin's budget (at or below the ceiling when set). The lower of the two binds: an
    admin's budget set before the operator lowered the ceiling is held to the new ceiling."""

    ceilings: Limits = field(default_factory=dict[str, float | None])
    admin: Limits = field(default_factory=dict[str, float | None])

    def ceiling(self, window: str, default: float | None) -> float | None:
        """The operator's ceiling in `window`: the scope's own, else app.yml's `default` (None: no ceiling)."""
        return self.ceilings.get(window, default)

    def budget(self, window: str, default: float | None) -> float | None:
        """The budget that binds in `window` (None: none)."""
        cap, chosen = self.ceiling(window, default), self.admin.get(window)
        if chosen is None:
            return cap
        return chosen if cap is None else min(cap, chosen)


@dataclass(frozen=True, slots=True)
class BudgetSetting:
    """A scope's own settings as stored: the operator's ceilings and a team admin's budget."""

    scope_kind: str
    scope_id: str
    limits: Limits  # the team admin's
    updated_at: float
    ceilings: Limits = field(default_factory=dict[str, float | None])  # the operator's


@dataclass(frozen=True, slots=True)
class RateRule:
    """One rate limit to apply at a run's start: a scope, what is counted, and how much a minute."""

    kind: ScopeKind
    counts: str  # "requests" | "tokens"
    limit: float


class QuotaStore:
    """The quota half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    async def budget_state(
        self, identity: Identity, defaults: Mapping[ScopeKind, Limits], since: Mapping[str, float]
    ) -> Spending:
        """Each scope's budget (app.yml's `defaults` per kind, under the scope's own ceilings and admin's
        budget: `Own.budget`), and what it spent since the start of each window it has a budget in
        (`since`: window → its start); read in one transaction, and no spend is summed for a scope without
        budgets."""
        spending, _ = await self.db.read_tx(partial(self.budget_work, identity, defaults, since, None))
        return spending

    @staticmethod
    def budget_work(
        identity: Identity,
        defaults: Mapping[ScopeKind, Limits],
        since: Mapping[str, float],
        roles: tuple[str, str] | None,
        tx: Tx,
    ) -> tuple[Spending, dict[str, tuple[str, ...]] | None]:
        """`budget_state`'s reads, and the role settings of the scope `roles` names (None: not read)."""
        found: Spending = {}
        own = owns(tx, identity)
        for kind, default in defaults.items():
            mine = own.get(kind, Own())
            budget = {window: mine.budget(window, limit) for window, limit in default.items()}
            found[kind] = {w: (limit, ledger.spent(tx, identity, kind, since[w])) for w, limit in budget.items()
                           if limit is not None}  # fmt: skip
        return found, runlog.scope_roles(tx, roles) if roles is not None else None

    async def own_budgets(self, identity: Identity, kinds: Sequence[ScopeKind]) -> dict[ScopeKind, Own]:
        return await self.db.read_tx(lambda tx: {kind: _own(tx, identity, kind) for kind in kinds})

    async def spent(self, identity: Identity, kind: ScopeKind, since: float) -> float:
        return await self.db.read_tx(lambda tx: ledger.spent(tx, identity, kind, since))

    async def spending(
        self, identity: Identity, kinds: Sequence[ScopeKind], since: Mapping[str, float]
    ) -> dict[ScopeKind, tuple[Own, dict[str, float]]]:
        """Per scope: its own budget settings, and what it spent since the start of each window (`since`:
        window → its start), whether or not it has a budget there; read in one transaction."""

        def work(tx: Tx) -> dict[ScopeKind, tuple[Own, dict[str, float]]]:
            return {kind: (_own(tx, identity, kind),
                           {window: ledger.spent(tx, identity, kind, start) for window, start in since.items()})
                    for kind in kinds}  # fmt: skip

        return await self.db.read_tx(work)

    async def usage_report(
        self, team_id: str | None, user_id: str | None, first: str, last: str, by: ledger.Group
    ) -> tuple[list[UsageRowOut], UsageTotalOut]:
        """A team's (or one of its users') usage from day `first` to `last`, grouped `by`, and its total;
        read in one transaction, so that they agree (`team_id` "": the users without a team; None: the
        whole deployment's)."""

        def work(tx: Tx) -> tuple[list[UsageRowOut], UsageTotalOut]:
            return ledger.report(tx, team_id, user_id, first, last, by), ledger.total(tx, team_id, user_id, first, last)

        return await self.db.read_tx(work)

    async def set_ceilings(self, scope: tuple[ScopeKind, str], limits: Limits, *, by: Actor = CLI) -> None:
        """The operator's: set windows of a scope's ceiling (None: no ceiling there, whatever app.yml says);
        the other windows, and a team admin's budget, stay as set."""
        await self.db.write_tx(lambda tx: _set(tx, scope, self.clock(), by, ceilings=limits))

    async def set_budget(
        self, scope: tuple[ScopeKind, str], limits: Limits, allowed: Callable[[Own], None] = lambda _: None, *,
        by: Actor = CLI,
    ) -> None:  # fmt: skip
        """A team admin's: set windows of a scope's budget (None: none of the admin's there); the others
        stay. `allowed` sees the scope's settings in the same transaction and raises to refuse the change
        (a budget above the ceiling that holds the scope)."""
        await self.db.write_tx(lambda tx: _set(tx, scope, self.clock(), by, admin=limits, allowed=allowed))

    async def list_budgets(self, operator: Operator) -> list[BudgetSetting]:
        if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied("listing every scope's budgets is an operator action")
        rows = await self.db.read_tx(lambda tx: tx.all(LIST_BUDGETS))
        return [BudgetSetting(r.scope_kind, r.scope_id, dict(r.limits), r.updated_at, dict(r.ceilings or {}))
                for r in rows]  # fmt: skip

    async def admit(self, identity: Identity, run_id: str, rules: Sequence[RateRule]) -> tuple[float, RateRule] | None:
        """Count the run against the scopes' rate limits and record it; None when admitted, else how many
        seconds until it would be, and the rule reached (nothing is recorded then)."""
        return await self.db.write_tx(lambda tx: _admit(tx, identity, run_id, rules, self.clock))


def owns(tx: Tx, identity: Identity) -> dict[str, Own]:
    """The caller's team's and their own budget settings, by kind of scope (those that have some)."""
    params = {"team": identity.team_id or "", "user": ledger.scope_of(identity, "user")[1]}
    return {kind: Own(dict(ceilings or {}), dict(limits)) for kind, limits, ceilings in tx.tuples(GET_BOTH, params)}


def _own(tx: Tx, identity: Identity, kind: ScopeKind) -> Own:
    if kind == "team" and identity.team_id is None:
        return Own()
    _, owner = ledger.scope_of(identity, kind)
    found = tx.tuples(GET_BUDGET, {"kind": kind, "owner": owner})
    return Own(dict(found[0][1] or {}), dict(found[0][0])) if found else Own()


def _set(tx: Tx, scope: tuple[ScopeKind, str], now: float, by: Actor, *, admin: Limits = NO_LIMITS,
         ceilings: Limits = NO_LIMITS, allowed: Callable[[Own], None] = lambda _: None) -> None:  # fmt: skip
    kind, owner = scope
    found = tx.tuples(GET_BUDGET, {"kind": kind, "owner": owner})
    known = Own(dict(found[0][1] or {}), dict(found[0][0])) if found else Own()
    allowed(known)
    budget, ceiling = dict(known.admin) | dict(admin), dict(known.ceilings) | dict(ceilings)
    row = {"scope_kind": kind, "scope_id": owner, "limits": budget, "ceilings": ceiling or None, "updated_at": now}
    # The audit row records what was set: the operator's ceilings, or a team admin's budget (both, were both given).
    change = [("budget.ceiling", dict(known.ceilings), ceiling)] if ceilings else []
    change += [("budget.set", dict(known.admin), budget)] if admin or not ceilings else []
    tx.execute(SET_BUDGET, row)
    team = owner if kind == "team" else owner.rpartition("/")[0]
    for action, before, after in change:
        audit.append(tx, by, audit.Change(action, f"budget/{kind}/{owner}", team, before, after), now)


def _admit(
    tx: Tx, identity: Identity, run_id: str, rules: Sequence[RateRule], clock: Callable[[], float]
) -> tuple[float, RateRule] | None:
    scopes = sorted({ledger.scope_of(identity, rule.kind) for rule in rules})
    for kind, owner in scopes if tx.dialect == "postgresql" else ():  # SQLite: its write lock is held already
        tx.execute(LOCK_SCOPE, {"key": lock_key(kind, owner)})  # in one order: never waiting on each other
    # Read once the lock is held, so that every run counted is at or before `now`: read before the wait,
    # runs admitted during it were later, and the wait answered could exceed the minute (Retry-After: 61).
    now = clock()
    since = now - WINDOW_S
    for rule in rules:
        wait = _over(tx, identity, rule, now, since)
        if wait is not None:
            return wait, rule
    for kind, owner in scopes:
        tx.execute(FORGET_OLD, {"kind": kind, "owner": owner, "since": since})
        tx.execute(ADMIT, {"scope_kind": kind, "scope_id": owner, "run_id": run_id, "at": now})
    return None


def _over(tx: Tx, identity: Identity, rule: RateRule, now: float, since: float) -> float | None:
    """Seconds until the scope is under `rule` again; None when it is under it now."""
    kind, owner = ledger.scope_of(identity, rule.kind)
    if rule.counts == "requests":
        count, first = tx.tuples(COUNT_RECENT, {"kind": kind, "owner": owner, "since": since})[0]
        return None if count < rule.limit else until(first, now)
    # The minute is (now - 60 s, now], as for requests: a call made 60 s ago has left it, as the wait
    # answered below says. The ledger's queries count from a first moment: the float just after `since`.
    after = math.nextafter(since, math.inf)
    if ledger.tokens_since(tx, identity, kind, after) < rule.limit:
        return None
    who = {"team_id": identity.team_id or ""} | ({"user_id": identity.user_id} if kind == "user" else {})
    first = tx.scalar(FIRST_TOKENS_TEAM if kind == "team" else FIRST_TOKENS_USER, who | {"since": after})
    return until(first, now)


def until(first: float | None, now: float) -> float:
    """Seconds until what was counted first leaves the minute; at most a minute (another host's clock may
    be ahead of this one's)."""
    return min(WINDOW_S, (first or now) + WINDOW_S - now)


def lock_key(kind: str, owner: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory lock on one scope."""
    return zlib.crc32(f"yao-agent:rate:{kind}:{owner}".encode()) - (1 << 31)
