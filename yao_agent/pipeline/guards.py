"""Guards on every run: how many model calls, how long, and the errors that end a run on their account."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from yao_agent.base.jsonvalue import strict_loads
from yao_agent.errors import LoopDetected, MaxTurns
from yao_agent.pipeline.state import RunState

LOOP_WINDOW = 10  # tool steps looked at
LOOP_THRESHOLD = 5  # one signature more often than this among them is a loop


def before_model_call(state: RunState, limit: int) -> None:
    """A run may call models at most `limits.max_turns` times."""
    if state.turns >= limit:
        raise MaxTurns(f"the run reached its limit of {limit} model calls (limits.max_turns)")


def step_signature(calls: Iterable[tuple[str, str, Any, str | None]]) -> str:
    """One tool step's signature: SHA-256 over each call's name, input and output.

    Arguments are compared as JSON values (a model rewriting the same call with its keys in another
    order, or other spacing, is still repeating itself), and so are the calls of a parallel step, in
    any order.
    """
    parts = sorted(
        _canonical([name, _json_value(arguments), result, error]) for name, arguments, result, error in calls
    )
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _json_value(arguments: str) -> Any:
    if not arguments.strip():
        return {}  # no arguments means an empty object, as the tool sees it
    try:
        return strict_loads(arguments)
    except ValueError:
        return arguments  # invalid JSON: only the same text is the same input


def repeats_in_window(steps: Sequence[str], window: int = LOOP_WINDOW, threshold: int = LOOP_THRESHOLD) -> str | None:
    """The step signature that appears more than `threshold` times among the last `window` steps, if any.

    A pure predicate over the run's tool steps (one `step_signature` each): the same calls giving the
    same answers again and again are a model going round in circles.
    """
    recent = Counter(steps[-window:])
    for signature, count in recent.most_common(1):
        if count > threshold:
            return signature
    return None


def check_loop(state: RunState) -> None:
    if repeats_in_window(state.signatures) is not None:
        raise LoopDetected(
            f"the model repeated the same tool calls with the same results more than {LOOP_THRESHOLD} times "
            f"in its last {LOOP_WINDOW} tool steps"
        )
