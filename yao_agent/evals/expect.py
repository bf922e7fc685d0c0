"""What a case's run showed (`Observed`), and each expectation checked against it (`check`).

Each check says in words what failed, for the report's row: the expectation as written and what was seen
instead. A `judge` is graded by the judge the caller gives (judge.py); the rest are pure.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from yao_agent.base import safe_regex, structured
from yao_agent.base.jsonvalue import as_mapping

# The judge: (rubric, the case's input, the answer) → a verdict with its reason and cost.
Judge = Callable[[str, str, str], Awaitable["Verdict"]]
SHOWN = 60  # characters of an answer a failure quotes


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Any  # the parsed JSON arguments (the text itself when it was no JSON)


@dataclass(frozen=True, slots=True)
class Observed:
    """One run of a case: its answer (the last assistant text), the tools it called, what it cost and took."""

    run_id: str
    status: str
    reason: str
    answer: str
    tool_calls: Sequence[ToolCall] = ()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    said: str = ""  # why not (or the judge's reason)
    cost_usd: float | None = None  # what grading it cost (a judge's call)
    details: Mapping[str, Any] = field(default_factory=dict[str, Any])


def name_of(expectation: Mapping[str, Any]) -> str:
    """The expectation as the report names it: `contains: 30 days`."""
    key, value = next(iter(expectation.items()))
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return f"{key}: {_cut(shown)}"


async def check(expectation: Mapping[str, Any], seen: Observed, question: str, judge: Judge | None) -> Verdict:
    key, value = next(iter(expectation.items()))
    if key == "judge":
        if judge is None:  # (validate refuses such a file: an eval run from elsewhere may still lack one)
            return Verdict(False, "no judge_with to grade it")
        return await judge(value, question, seen.answer)
    return CHECKS[key](value, seen)


def _contains(text: str, seen: Observed) -> Verdict:
    found = text.casefold() in seen.answer.casefold()
    return Verdict(found, "" if found else f"the answer does not say it: {_quoted(seen.answer)}")


def _not_contains(text: str, seen: Observed) -> Verdict:
    found = text.casefold() in seen.answer.casefold()
    return Verdict(not found, f"the answer says it: {_quoted(seen.answer)}" if found else "")


def _regex(pattern: str, seen: Observed) -> Verdict:
    found = safe_regex.compile(pattern).search(seen.answer)
    return Verdict(found, "" if found else f"no match in the answer: {_quoted(seen.answer)}")


def _json_schema(schema: Mapping[str, Any], seen: Observed) -> Verdict:
    try:
        structured.check_answer(schema, structured.parse_answer(seen.answer))
    except (structured.AnswerProblem, structured.SchemaUnusable) as exc:
        return Verdict(False, str(exc))
    return Verdict(True)


def _tool_called(wanted: Mapping[str, Any], seen: Observed) -> Verdict:
    named = [c for c in seen.tool_calls if c.name == wanted["name"]]
    args = wanted.get("args")
    if named and (args is None or any(_holds(c.arguments, args) for c in named)):
        return Verdict(True)
    called = ", ".join(sorted({c.name for c in seen.tool_calls})) or "none"
    if not named:
        return Verdict(False, f"{wanted['name']} was not called (called: {called})")
    given = "; ".join(_cut(json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)) for c in named)
    return Verdict(False, f"{wanted['name']} was called with other arguments: {given}")


def _holds(arguments: Any, wanted: Mapping[str, Any]) -> bool:
    given = as_mapping(arguments)
    return isinstance(arguments, dict) and all(k in given and given[k] == v for k, v in wanted.items())


def _max_cost(limit: float, seen: Observed) -> Verdict:
    if seen.cost_usd is None:
        return Verdict(False, "the run's cost is not known (a connector without a price)")
    ok = seen.cost_usd <= limit
    return Verdict(ok, "" if ok else f"it cost ${seen.cost_usd:.6f}")


def _max_latency(limit: float, seen: Observed) -> Verdict:
    ok = seen.latency_ms <= limit
    return Verdict(ok, "" if ok else f"it took {seen.latency_ms:.0f} ms")


CHECKS: dict[str, Callable[[Any, Observed], Verdict]] = {
    "contains": _contains,
    "not_contains": _not_contains,
    "regex": _regex,
    "json_schema": _json_schema,
    "tool_called": _tool_called,
    "max_cost_usd": _max_cost,
    "max_latency_ms": _max_latency,
}


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN else flat[: SHOWN - 1] + "…"


def _quoted(text: str) -> str:
    return f'"{_cut(text)}"' if text else "(no answer)"
