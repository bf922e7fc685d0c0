"""The words a run is described in, each defined once (CONTRACT §4, §5, §6).

Every module that writes or reads one of these takes its type from here, so a misspelt reason or
status is a type error, not a run that silently never matches.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# How a run ended (`stream_end.reason`, stored on the run).
TerminalReason = Literal[
    "completed",
    "cancelled",
    "max_turns",
    "timeout",
    "loop_detected",
    "model_error",
    "tool_error",
    "hook_error",
    "delegate_error",
    "context_overflow",
    "output_error",
    "approval_required",
    "client_tools",
    "budget_exceeded",
    "prompt_error",
    "guardrail",
    "internal_error",
]
# A stored run's status; `interrupted` is a run its process left `running` when it died.
RunStatus = Literal["running", "completed", "failed", "cancelled", "interrupted", "waiting"]
# The status a client is told in `stream_end` and in a run's result.
EndStatus = Literal["completed", "failed", "cancelled", "waiting"]
StepType = Literal["hook_create", "search", "llm", "tool", "hook_next", "delegate", "guardrail"]
# `recovered`: the step failed and the run went on past it (never where a resume starts); `waiting`: a
# tool round whose calls wait for a person's decision (CONTRACT §4.8).
StepStatus = Literal["running", "completed", "failed", "recovered", "cancelled", "interrupted", "waiting"]
# Why an `llm` step was made (seed 004's "how did we get here").
Transition = Literal[
    "first",
    "tool_results",
    "tool_retry",
    "hook_continue",
    "appended",
    "compact_retry",
    "output_recovery",
    "output_retry",
    "last_word",
    "approved",
]
# How a model call failed (connectors/classify.py says which are retried and which fall back).
ModelErrorKind = Literal[
    "auth",
    "bad_request",
    "context_overflow",
    "rate_limit",
    "server",
    "timeout",
    "connection",
    "config",
    "incomplete",
]
# What became of a tool call (`yao_tool_calls_total{outcome}`): it ran (`ok`, `error`), or it was answered
# without running — it waits for a person, a person denied it, the run was cancelled under it, or the
# run ended (failed, or allowed no more calls) before it ran.
ToolCallOutcome = Literal["ok", "error", "waiting", "denied", "cancelled", "not_run"]
OnBusy = Literal["queue", "reject", "interrupt"]
MessageStatus = Literal["completed", "incomplete"]
# Who wrote a stored message; `summary`: earlier turns of the chat, summarised to fit the model's window.
Role = Literal["system", "user", "assistant", "tool", "summary"]

TERMINAL_REASONS: Final = frozenset[str](get_args(TerminalReason))
TRANSITIONS: Final = frozenset[str](get_args(Transition))
UNFINISHED_STEPS: Final[tuple[StepStatus, ...]] = ("running", "failed", "cancelled", "interrupted", "waiting")


def end_status(status: RunStatus) -> EndStatus:
    """What a client is told of a stored status: a run that did not complete, wait or get cancelled failed."""
    if status in ("completed", "cancelled", "waiting"):
        return status
    return "failed"
