"""The usage ledger (CONTRACT §8.2): a row per model call, written with the call's `llm` step, and what
budgets, rate limits and usage reports read of it.

A scope is a team (`("team", team_id)`) or one user of a team (`("user", "team/user")`, or the user id
alone for a caller without a team): see `scope_of`. Ids never hold a `/`, so no two scopes share a key
(`user@team` would: `@` is allowed in both ids); people are shown `user@team` (`shown`).

Budgets read spend from `spend_days`, a total per scope and day kept with every ledger write, so a
run's start reads at most a month of days however many calls the month had.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import ColumnElement, Float, Integer, bindparam, case, func, literal, select
from sqlalchemy.sql import ClauseElement

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.identity import Identity
from yao_agent.store.records import RunRecord, StepRecord
from yao_agent.store.schema import spend_days, usage_ledger
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql, Tx

if TYPE_CHECKING:
    from yao_agent.shapes import UsageRowOut, UsageTotalOut

ScopeKind = Literal["team", "user"]
GROUPS = ("day", "assistant", "connector", "user", "team")
Group = Literal["day", "assistant", "connector", "user", "team"]
Whose = Literal["all", "team", "user"]  # what a report covers: the deployment, a team, or one user of it

INSERT = Sql(usage_ledger.insert())
_C = usage_ledger.c
_TEAM = _C.team_id == bindparam("team_id")
_USER = (_C.user_id == bindparam("user_id")) & _TEAM
_SINCE = _C.at >= bindparam("since", type_=Float)
_D = spend_days.c
SPENT = Sql(
    select(func.coalesce(func.sum(_D.cost_usd), 0.0)).where(
        _D.scope_kind == bindparam("kind"), _D.scope_id == bindparam("owner"), _D.day >= bindparam("first")
    )
)


def _add_spend(dialect: str) -> ClauseElement:
    """Add a call's cost to its scope's day (each database spells an upsert its own way)."""
    insert = conflict_insert(dialect, spend_days)
    return insert.on_conflict_do_update(
        index_elements=["scope_kind", "scope_id", "day"], set_={"cost_usd": _D.cost_usd + insert.excluded.cost_usd}
    )


ADD_SPEND = Sql(Spelled(_add_spend), columns=[c.key for c in spend_days.c])
_TOKENS = func.coalesce(func.sum(_C.input_tokens + _C.output_tokens), 0)
TOKENS_BY_TEAM = Sql(select(_TOKENS).where(_TEAM, _SINCE))
TOKENS_BY_USER = Sql(select(_TOKENS).where(_USER, _SINCE))


def scope_of(identity: Identity, kind: ScopeKind) -> tuple[ScopeKind, str]:
    """The caller's team, or the caller as one user (of their team)."""
    if kind == "team":
        if identity.team_id is None:
            raise ValueError("a caller without a team has no team scope")
        return "team", identity.team_id
    return "user", f"{identity.team_id}/{identity.user_id}" if identity.team_id else identity.user_id


def shown(scope_id: str) -> str:
    """A scope's key as people read it: `user@team` for a user of a team."""
    team, _, user = scope_id.rpartition("/")
    return f"{user}@{team}" if team else scope_id


def record(tx: Tx, run: RunRecord, done: Sequence[StepRecord]) -> None:
    """The ledger rows of the model calls among `done` (steps being written with them, or a call as it
    ends: a step billed so is not billed again)."""
    rows = [row for step in done if not step.billed and (row := _row(run, step)) is not None]
    if not rows:
        return
    tx.executemany(INSERT, rows)
    who = Identity(run.user_id, run.team_id)
    kinds: tuple[ScopeKind, ...] = ("team", "user") if run.team_id else ("user",)
    days: dict[tuple[ScopeKind, str, str], float] = {}
    for row in rows:
        for kind in kinds if row["cost_usd"] else ():
            key = (*scope_of(who, kind), row["day"])
            days[key] = days.get(key, 0.0) + float(row["cost_usd"])
    # In one order (team, then user): two runs of a team adding at once never wait on each other's rows.
    for (kind, owner, day), cost in sorted(days.items()):
        tx.execute(ADD_SPEND, {"scope_kind": kind, "scope_id": owner, "day": day, "cost_usd": cost})


def _row(run: RunRecord, step: StepRecord) -> dict[str, Any] | None:
    made = as_mapping(step.output)
    if step.type != "llm" or not made.get("connector"):
        return None  # not a model call, or one no connector answered
    used = as_mapping(made.get("usage"))
    at = step.ended_at or step.started_at
    return {"step_id": step.id, "run_id": run.id, "chat_id": run.chat_id, "user_id": run.user_id,
            "team_id": run.team_id or "", "assistant_id": str(made.get("assistant") or run.assistant_id),
            "connector": str(made["connector"]), "model": str(made.get("model") or ""),
            "input_tokens": int(used.get("input_tokens") or 0), "output_tokens": int(used.get("output_tokens") or 0),
            "cost_usd": used.get("cost_usd") if used else None, "day": day_of(at), "at": at}  # fmt: skip


def day_of(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _who(identity: Identity, kind: ScopeKind) -> dict[str, str]:
    return {"team_id": identity.team_id or "", "user_id": identity.user_id} if kind == "user" else {
        "team_id": identity.team_id or ""}  # fmt: skip


def spent(tx: Tx, identity: Identity, kind: ScopeKind, since: float) -> float:
    """USD of known prices the scope spent from the day of `since` (a window's start: budgets' windows
    are whole days)."""
    _, owner = scope_of(identity, kind)
    return float(tx.scalar(SPENT, {"kind": kind, "owner": owner, "first": day_of(since)}) or 0.0)


def tokens_since(tx: Tx, identity: Identity, kind: ScopeKind, since: float) -> int:
    """Model tokens (in + out) the scope used since `since`."""
    sql = TOKENS_BY_TEAM if kind == "team" else TOKENS_BY_USER
    return int(tx.scalar(sql, {**_who(identity, kind), "since": since}) or 0)


def _measures() -> list[ColumnElement[Any]]:
    """What a report sums per group (and over all of it, for its total)."""
    unpriced = func.sum(case((_C.cost_usd.is_(None), _C.input_tokens + _C.output_tokens), else_=literal(0)))
    return [func.count(func.distinct(_C.run_id)).label("runs"), func.sum(_C.input_tokens).label("input_tokens"),
            func.sum(_C.output_tokens).label("output_tokens"),
            func.coalesce(func.sum(_C.cost_usd), 0.0).label("cost_usd"),
            func.coalesce(unpriced, 0).cast(Integer).label("unpriced_tokens")]  # fmt: skip


def _where(whose: Whose) -> list[ColumnElement[bool]]:
    where = [_C.day >= bindparam("first"), _C.day <= bindparam("last")]
    if whose != "all":
        where.append(_C.team_id == bindparam("team_id"))
    if whose == "user":
        where.append(_C.user_id == bindparam("user_id"))
    return where


def _report(by: Group, whose: Whose) -> Sql:
    key: ColumnElement[Any] = {"day": _C.day, "assistant": _C.assistant_id, "connector": _C.connector,
                               "user": _C.user_id, "team": _C.team_id}[by]  # fmt: skip
    return Sql(select(key.label("key"), *_measures()).where(*_where(whose)).group_by(key).order_by(key))


WHOSE: tuple[Whose, ...] = ("all", "team", "user")
REPORTS = {(by, whose): _report(by, whose) for by in GROUPS for whose in WHOSE}
# A report's total is summed apart, not from its rows: a run that used two connectors, or crossed
# midnight, is one run of the total but a run of each of its rows.
TOTALS = {whose: Sql(select(*_measures()).where(*_where(whose))) for whose in WHOSE}


def report(tx: Tx, team_id: str | None, user_id: str | None, first: str, last: str, by: Group) -> list[UsageRowOut]:
    """Usage of a team (or of one of its users; `team_id` None: of the whole deployment) from day `first`
    to `last` (inclusive), grouped `by` (by team, the users without one are the row keyed "")."""
    rows = tx.all(REPORTS[(by, _whose(team_id, user_id))], _params(team_id, user_id, first, last))
    return [{"key": r.key, **_sums(r)} for r in rows]


def total(tx: Tx, team_id: str | None, user_id: str | None, first: str, last: str) -> UsageTotalOut:
    """What `report` counts, over the whole span: its total (each run counted once)."""
    return _sums(tx.all(TOTALS[_whose(team_id, user_id)], _params(team_id, user_id, first, last))[0])


def _whose(team_id: str | None, user_id: str | None) -> Whose:
    return "all" if team_id is None else "team" if user_id is None else "user"


def _params(team_id: str | None, user_id: str | None, first: str, last: str) -> dict[str, str]:
    given = {"team_id": team_id, "user_id": user_id, "first": first, "last": last}
    return {k: v for k, v in given.items() if v is not None}  # (team "": the users without one)


def _sums(r: Any) -> UsageTotalOut:
    return {"runs": int(r.runs), "input_tokens": int(r.input_tokens or 0), "output_tokens": int(r.output_tokens or 0),
            "cost_usd": round(float(r.cost_usd or 0.0), 6), "unpriced_tokens": int(r.unpriced_tokens or 0)}  # fmt: skip
