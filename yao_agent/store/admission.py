"""A run's stage-1 checks on PostgreSQL (CONTRACT §8.2) in one transaction of two statements, where
SQLite keeps quota.py's (`budget_state`, then `admit`: local, they cost no round trip). Without a rate
limit PostgreSQL keeps them too: `budget_state` alone is then one small read, measured at 0.2 ms of
wall time against 0.6 ms for the statement below.

The first statement takes the advisory lock of each scope a rate limit counts (as `quota._admit` does,
in the same order and with the same keys, so both ways exclude each other) and lets the transaction
commit without waiting for the disk: a rate event lost with a crash of the database server only lets
one more run start in that minute. Taken apart from the second, since a statement reads the snapshot
of its start: one that waited for a lock inside it would not see the runs its holder admitted.

With the checks, the same transaction reads the role settings of the scope the run's connector resolves
through (`roles`): stage 4 then asks no transaction of its own (connectors/resolve.py `KnownRoles`).

The second reads everything the checks decide on — both scopes' own budget settings, their spend today
and this month (from `spend_days`: at most a month of rows, however many calls), their runs and model
tokens of the last minute — and records the run against the rate limits when none is reached. A run a
budget refuses is not counted either: the transaction is then rolled back (`_Refused`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import text

from yao_agent.identity import Identity
from yao_agent.store import ledger, runlog
from yao_agent.store.ledger import ScopeKind
from yao_agent.store.quota import WINDOW_S, Limits, Own, QuotaStore, RateRule, Spending, lock_key, until
from yao_agent.store.tx import Sql, Tx

RoleTable = dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Admission:
    """What a run's stage-1 checks read: per scope its budgets and spend, the rate limit reached (None: the
    run was counted, or a budget refuses it and it was not), and the role settings asked for."""

    spending: Spending
    rate: tuple[float, RateRule] | None = None
    roles: RoleTable | None = None


_NO_FLUSH = "set_config('synchronous_commit', 'off', true)"
LOCKS = {
    count: Sql(
        {
            "postgresql": text(
                ", ".join([f"SELECT {_NO_FLUSH}"] + [f"pg_advisory_xact_lock(:k{n})" for n in range(count)])
            )
        }
    )
    for count in (1, 2)
}  # fmt: skip  (a select list is evaluated left to right: the locks are taken in the keys' order)
_TEAM = "scope_kind = 'team' AND scope_id = :team AND :has_team"
_USER = "scope_kind = 'user' AND scope_id = :user"
_TOKENS = "SELECT coalesce(sum(input_tokens + output_tokens), 0) AS n, min(at) AS first FROM usage_ledger"
_REQ_TEAM, _REQ_USER = "CAST(:req_team AS float8)", "CAST(:req_user AS float8)"
_TOK_TEAM, _TOK_USER = "CAST(:tok_team AS float8)", "CAST(:tok_user AS float8)"
CHECKS = Sql({"postgresql": text(f"""
WITH own AS (
  SELECT scope_kind, limits, ceilings FROM budgets WHERE ({_TEAM}) OR ({_USER})
), spend AS (
  SELECT scope_kind, coalesce(sum(cost_usd) FILTER (WHERE day >= :month), 0.0) AS month,
         coalesce(sum(cost_usd) FILTER (WHERE day >= :today), 0.0) AS today
  FROM spend_days WHERE (({_TEAM}) OR ({_USER})) AND day >= least(:month, :today) GROUP BY scope_kind
), runs AS (
  SELECT scope_kind, count(*) AS n, min(at) AS first FROM rate_events
  WHERE (({_TEAM} AND {_REQ_TEAM} IS NOT NULL) OR ({_USER} AND {_REQ_USER} IS NOT NULL)) AND at > :since
  GROUP BY scope_kind
), team_tokens AS (
  {_TOKENS} WHERE team_id = :team_id AND at >= :after AND {_TOK_TEAM} IS NOT NULL
), user_tokens AS (
  {_TOKENS} WHERE user_id = :user_id AND team_id = :team_id AND at >= :after AND {_TOK_USER} IS NOT NULL
), counted AS (
  SELECT coalesce((SELECT n FROM runs WHERE scope_kind = 'team'), 0) AS team_runs,
         (SELECT first FROM runs WHERE scope_kind = 'team') AS team_runs_first,
         coalesce((SELECT n FROM runs WHERE scope_kind = 'user'), 0) AS user_runs,
         (SELECT first FROM runs WHERE scope_kind = 'user') AS user_runs_first,
         (SELECT n FROM team_tokens) AS team_tokens, (SELECT first FROM team_tokens) AS team_tokens_first,
         (SELECT n FROM user_tokens) AS user_tokens, (SELECT first FROM user_tokens) AS user_tokens_first
), under AS (
  SELECT NOT (coalesce(team_runs >= {_REQ_TEAM}, false) OR coalesce(team_tokens >= {_TOK_TEAM}, false)
              OR coalesce(user_runs >= {_REQ_USER}, false) OR coalesce(user_tokens >= {_TOK_USER}, false)) AS yes
  FROM counted
), gone AS (
  DELETE FROM rate_events WHERE (({_TEAM} AND :rec_team) OR ({_USER} AND :rec_user)) AND at <= :since
    AND (SELECT yes FROM under)
), added AS (
  INSERT INTO rate_events (scope_kind, scope_id, run_id, at)
  SELECT v.kind, v.owner, :run_id, :now FROM (VALUES ('team', :team, :rec_team), ('user', :user, :rec_user))
    AS v(kind, owner, rec) WHERE v.rec AND (SELECT yes FROM under)
  RETURNING 1
)
SELECT (SELECT limits FROM own WHERE scope_kind = 'team'), (SELECT ceilings FROM own WHERE scope_kind = 'team'),
       (SELECT limits FROM own WHERE scope_kind = 'user'), (SELECT ceilings FROM own WHERE scope_kind = 'user'),
       (SELECT month FROM spend WHERE scope_kind = 'team'), (SELECT today FROM spend WHERE scope_kind = 'team'),
       (SELECT month FROM spend WHERE scope_kind = 'user'), (SELECT today FROM spend WHERE scope_kind = 'user'),
       counted.*, (SELECT count(*) FROM added)
FROM counted
""")})  # fmt: skip


class _Refused(Exception):
    """A budget refuses the run after the statement recorded it: roll the recording back."""

    def __init__(self, admission: Admission) -> None:
        super().__init__("refused by a budget")
        self.admission = admission


class AdmissionStore(QuotaStore):
    """`QuotaStore` with a run's stage-1 checks in one call."""

    async def start_checks(
        self,
        identity: Identity,
        defaults: Mapping[ScopeKind, Limits],
        since: Mapping[str, float],
        rules: Sequence[RateRule],
        run_id: str,
        roles: tuple[str, str] | None = None,
    ) -> Admission:
        """The checks (budgets and spend as `budget_state`, rate limits as `admit`), and the role settings of
        the scope `roles` names, in one transaction (SQLite: in two when a rate limit is set)."""
        if self.db.dialect != "postgresql" or not rules:  # (without a rate limit, the smaller reads cost less)
            spending, table = await self.db.read_tx(partial(self.budget_work, identity, defaults, since, roles))
            if not rules or reached(spending):
                return Admission(spending, None, table)
            return Admission(spending, await self.admit(identity, run_id, rules), table)
        work = partial(_checks, identity=identity, defaults=defaults, since=since, rules=rules, run_id=run_id,
                       clock=self.clock, roles=roles)  # fmt: skip
        try:
            return await self.db.write_tx(work)
        except _Refused as refused:
            return refused.admission


def reached(spending: Spending) -> bool:
    """Whether a scope's spend is at or over one of its budgets."""
    return any(spent >= budget for windows in spending.values() for budget, spent in windows.values())


def _checks(
    tx: Tx,
    *,
    identity: Identity,
    defaults: Mapping[ScopeKind, Limits],
    since: Mapping[str, float],
    rules: Sequence[RateRule],
    run_id: str,
    clock: Callable[[], float],
    roles: tuple[str, str] | None,
) -> Admission:
    table = runlog.scope_roles(tx, roles) if roles is not None else None
    scopes = sorted({ledger.scope_of(identity, rule.kind) for rule in rules})
    tx.execute(LOCKS[len(scopes)], {f"k{n}": lock_key(*scope) for n, scope in enumerate(scopes)})
    now = clock()  # once the locks are held (quota._admit says why)
    limit = {(rule.kind, rule.counts): rule.limit for rule in rules}
    row = tx.tuples(CHECKS, _params(identity, since, limit, run_id, now))[0]
    spending = _spending(row, defaults)
    counted = {("team", "requests"): (row[8], row[9]), ("user", "requests"): (row[10], row[11]),
               ("team", "tokens"): (row[12], row[13]), ("user", "tokens"): (row[14], row[15])}  # fmt: skip
    for rule in rules:
        used, first = counted[(rule.kind, rule.counts)]
        if used >= rule.limit:
            return Admission(spending, (until(first, now), rule), table)
    if reached(spending):
        raise _Refused(Admission(spending, None, table))
    return Admission(spending, None, table)


def _params(identity: Identity, since: Mapping[str, float], limit: Mapping[tuple[str, str], float], run_id: str,
            now: float) -> dict[str, Any]:  # fmt: skip
    rec = {kind: any(k == kind for k, _ in limit) for kind in ("team", "user")}
    start = now - WINDOW_S
    return {"team": identity.team_id or "", "has_team": identity.team_id is not None,
            "user": ledger.scope_of(identity, "user")[1], "team_id": identity.team_id or "",
            "user_id": identity.user_id, "month": ledger.day_of(since["per_month"]),
            "today": ledger.day_of(since["per_day"]), "since": start, "after": math.nextafter(start, math.inf),
            "now": now, "run_id": run_id, "rec_team": rec["team"], "rec_user": rec["user"],
            "req_team": limit.get(("team", "requests")), "req_user": limit.get(("user", "requests")),
            "tok_team": limit.get(("team", "tokens")), "tok_user": limit.get(("user", "tokens"))}  # fmt: skip


def _spending(row: tuple[Any, ...], defaults: Mapping[ScopeKind, Limits]) -> Spending:
    """What `QuotaStore.budget_state` answers, from the statement's row."""
    owns = {"team": Own(dict(row[1] or {}), dict(row[0] or {})) if row[0] is not None else Own(),
            "user": Own(dict(row[3] or {}), dict(row[2] or {})) if row[2] is not None else Own()}  # fmt: skip
    spent = {"team": {"per_month": row[4] or 0.0, "per_day": row[5] or 0.0},
             "user": {"per_month": row[6] or 0.0, "per_day": row[7] or 0.0}}  # fmt: skip
    found: Spending = {}
    for kind, default in defaults.items():
        mine = owns[kind]
        budget = {window: mine.budget(window, limit) for window, limit in default.items()}
        found[kind] = {w: (b, float(spent[kind][w])) for w, b in budget.items() if b is not None}
    return found
