"""Guards on every run: how many model calls, how long, and the errors that end a run on their account."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from yao_agent.errors import RunError
from yao_agent.pipeline.state import RunState


class MaxTurns(RunError):
    reason = "max_turns"


class RunTimeout(RunError):
    reason = "timeout"


def before_model_call(state: RunState, limit: int) -> None:
    """A run may call models at most `limits.max_turns` times."""
    if state.turns >= limit:
        raise MaxTurns(f"the run reached its limit of {limit} model calls (limits.max_turns)")


class LoopDetected(RunError):
    reason = "loop_detected"


def repeats_in_window(signatures: Sequence[str], window: int = 10, threshold: int = 5) -> str | None:
    """The signature that appears more than `threshold` times among the last `window`, if any.

    A pure predicate over the run's tool history (each signature hashes a call's name, input and output):
    the same call giving the same answer again and again is a model going round in circles.
    """
    recent = Counter(signatures[-window:])
    for signature, count in recent.most_common(1):
        if count > threshold:
            return signature
    return None


def check_loop(state: RunState) -> None:
    if repeats_in_window(state.signatures) is not None:
        raise LoopDetected(
            "the model repeated the same tool call with the same result more than 5 times in its last 10"
        )
