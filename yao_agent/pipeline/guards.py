"""Guards on every run: how many model calls, how long, and the errors that end a run on their account."""

from __future__ import annotations

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
