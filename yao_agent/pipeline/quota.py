"""Budgets and rate limits (CONTRACT §8.2): at a run's start (stage 1), and before every model call.

At the start, after permission and before anything is created, a run is refused (a `Refused` error,
HTTP 429) while its team's or user's spend in a window is at or over a budget, or a rate limit is
reached. Budgets: app.yml's `budgets` per kind of scope, under the operator's ceilings and a team
admin's budget (`store.quota.Own`: the lower binds); spend is the usage ledger's, in calendar windows
(UTC). Rate limits: runs started, and model tokens used, in the last minute, counted in the database so
every process sharing it counts the same (store/quota.py).

Before every model call of a run held by a budget — its children's, summaries, continuations and
retries included — the call holds what it may cost (`most`) while it runs, and is not made when spend
plus what the calls in flight hold is at or over a budget: the run ends `budget_exceeded` (OverBudget),
resumable once the budget allows. As the call ends its hold is given back and its cost written, at
once (store/holds.py). A run that no budget held at its start makes no such round trip at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from yao_agent.base.aio import finish_despite_cancel
from yao_agent.connectors import CallOptions, ModelRequest
from yao_agent.connectors.resolve import KnownRoles, reads_roles
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import BudgetExceeded, OverBudget, RateLimited
from yao_agent.identity import Identity
from yao_agent.metering.pricing import price_of
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.admission import RoleTable
from yao_agent.store.holds import Hold, Reached, Scope
from yao_agent.store.ledger import ScopeKind, day_of
from yao_agent.store.quota import Limits, RateRule, Spending
from yao_agent.store.records import StepRecord

log = logging.getLogger("yao_agent.run")
WINDOWS = ("per_day", "per_month")
NAMES = {"per_day": "daily", "per_month": "monthly"}
OUTPUT_TOKENS = 4096  # what a call may write when neither it nor its connector says (max_tokens)
CHARS_PER_TOKEN = 4  # a call's input, estimated for its hold without a tokenizer


async def check(rt: Runtime, identity: Identity, run_id: str, roles: tuple[str, str] | None = None) -> Checked:
    """Refuse the run if a budget is spent or a rate limit reached; else count it against the limits.
    Whether a budget holds the run (then each of its model calls is checked too: `RunState.budgeted`),
    and the role settings of the scope `roles` names (read with the checks, for stage 4).
    All read in one transaction (on PostgreSQL, two statements: store/admission.py)."""
    now = datetime.fromtimestamp(rt.clock(), UTC)
    starts = {window: window_start(window, now).timestamp() for window in WINDOWS}
    rules = rate_rules(rt, identity)
    found = await rt.store.start_checks(identity, defaults_of(rt, identity), starts, rules, run_id, roles)
    _refuse_spent(identity, found.spending, now)  # a budget's refusal comes first: that run was not counted
    if found.rate is not None:
        wait, rule = found.rate
        raise RateLimited(_rate_message(identity, rule, wait), retry_after=wait)
    return Checked(any(found.spending.values()), found.roles)


async def admit(rt: Runtime, state: RunState) -> None:
    """Stage 1 for the run `state` is (`check`), reading with it the role settings its connector resolves
    through, unless the assistant names a connector outright: stage 4 then asks the store nothing."""
    scope = state.identity.settings_scope if reads_roles(str(state.assistant.connector or "")) else None
    checked = await check(rt, state.identity, state.run_id, scope)
    state.budgeted = checked.budgeted
    if scope is not None and checked.roles is not None:
        state.roles = KnownRoles(scope, checked.roles, rt.store)


@dataclass(frozen=True, slots=True)
class Checked:
    """A run the checks let start: whether a budget holds it, and the role settings read for it."""

    budgeted: bool
    roles: RoleTable | None = None


def kinds_of(identity: Identity) -> tuple[ScopeKind, ...]:
    return ("team", "user") if identity.team_id is not None else ("user",)


def defaults_of(rt: Runtime, identity: Identity) -> dict[ScopeKind, Limits]:
    """app.yml's budgets for each scope of the caller, per window."""
    budgets = rt.app.config.budgets
    return {kind: {"per_day": budgets.of(kind).per_day, "per_month": budgets.of(kind).per_month}
            for kind in kinds_of(identity)}  # fmt: skip


def _refuse_spent(identity: Identity, spending: Spending, now: datetime) -> None:
    """Refuse a run whose scope's spend is at or over a budget."""
    reached = [Reached(kind, window, limit, spent, 0.0) for kind, windows in spending.items()
               for window, (limit, spent) in windows.items() if spent >= limit]  # fmt: skip
    if reached:
        worst, resets = _latest(reached, now)
        message = _budget_message(identity, worst, resets)
        raise BudgetExceeded(message, retry_after=max(1.0, resets.timestamp() - now.timestamp()))


@dataclass(frozen=True, slots=True)
class Held:
    """A model call's hold: the scopes it holds in, until it ends."""

    id: str
    scopes: tuple[Scope, ...]


async def before_call(rt: Runtime, state: RunState, step: StepRecord, request: ModelRequest,
                      chain: Sequence[ConnectorSpec] | None = None) -> Held | None:  # fmt: skip
    """Before the model call `step` makes (to `chain`, by default the run's): hold what it may cost, or
    (a budget reached) fail the step and raise OverBudget: the run ends `budget_exceeded`. None when no
    budget holds the run (no round trip then)."""
    root = state.root
    if not root.budgeted:
        return None
    at = rt.clock()
    now = datetime.fromtimestamp(at, UTC)
    answering = state.chain if chain is None else chain
    hold = Hold(step.id, root.run_id, most(answering, request), at + rt.app.config.limits.timeout_s)
    days = {window: day_of(window_start(window, now).timestamp()) for window in WINDOWS}
    taken = await rt.store.take_hold(state.identity, defaults_of(rt, state.identity), days, hold, at)
    if taken.reached:
        worst, resets = _latest(list(taken.reached), now)
        error = OverBudget(_budget_message(state.identity, worst, resets, stopped=True), resets_at=resets.timestamp())
        state.buffer.end(step, "failed", error={"message": error.message})  # where a resume asks the model again
        raise error
    return Held(step.id, taken.scopes) if taken.scopes else None


async def after_call(rt: Runtime, state: RunState, held: Held | None, step: StepRecord) -> None:
    """As the call ends (its step ended, however): give its hold back and write what it cost. Seen through
    a cancel (raised after); a failure leaves both to the run's flush and the hold's expiry."""
    if held is None:
        return

    async def give_back() -> None:
        await rt.store.give_back(held.scopes, held.id, state.root.run, [step], rt.clock())
        step.billed = True  # at once: a cancel raised after must not have the flush write its cost again

    try:
        await finish_despite_cancel(give_back())
    except Exception:
        log.warning("run %s: a model call's cost could not be written as it ended; the run's flush writes it",
                    state.run_id, exc_info=True)  # fmt: skip


def most(chain: Sequence[ConnectorSpec], request: ModelRequest) -> float:
    """What a call may cost at most: its input (estimated) and its `max_tokens` out, at the dearest price
    of the connectors that may answer it; 0 when none has a known price."""
    input_tokens = _input_tokens(request.messages)
    costs = [price.of(input_tokens, _output_tokens(c, request.options)) for c in chain
             if (price := price_of(c)) is not None]  # fmt: skip
    return max(costs, default=0.0)


def _output_tokens(connector: ConnectorSpec, options: CallOptions) -> int:
    own = CallOptions.of(connector.options)
    said = (options.max_completion_tokens, own.max_completion_tokens, options.max_tokens, own.max_tokens)
    asked = next((v for v in said if isinstance(v, int) and not isinstance(v, bool)), None)
    cap = connector.capabilities.max_output_tokens
    if asked is None:
        return cap or OUTPUT_TOKENS
    return asked if cap is None else min(asked, cap)


def _input_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(str(part.get("text") or "")) for part in content if isinstance(part, dict))  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType, reportUnknownVariableType]
        for call in message.get("tool_calls") or ():
            chars += len(str(call.get("function", {}).get("arguments") or ""))
    return chars // CHARS_PER_TOKEN + 1


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


def _latest(reached: list[Reached], now: datetime) -> tuple[Reached, datetime]:
    """The budget reached that resets last (the first said, of those alike), and when: until then the run
    cannot go on."""
    ends = [window_end(r.window, now) for r in reached]
    last = max(ends)
    return reached[ends.index(last)], last


def _budget_message(identity: Identity, reached: Reached, resets: datetime, *, stopped: bool = False) -> str:
    held = f" and calls in flight hold ${reached.held:.2f} more" if reached.held > 0 else ""
    said = f"{who(identity, reached.kind)} spent ${reached.spent:.2f} of its ${reached.limit:.2f} " \
           f"{NAMES[reached.window]} budget{held}"  # fmt: skip
    stop = "; the model was not called" if stopped else ""
    return f"{said}{stop}; it resets {resets.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _rate_message(identity: Identity, rule: RateRule, wait: float) -> str:
    """The refusal in words, naming the one limit reached, with the wait in whole seconds as HTTP's
    Retry-After gives it: the CLI has no header to read it from."""
    reached = f"{who(identity, rule.kind)}: {rule.limit:g} {rule.counts} per minute"
    return f"too many requests: a rate limit was reached ({reached}); try again in {max(1, math.ceil(wait))} s"
