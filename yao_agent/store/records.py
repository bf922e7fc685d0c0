"""What the store keeps about chats, runs and steps, as plain typed records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

from yao_agent.messages import ChatMessage, iso_time
from yao_agent.vocabulary import RunStatus, StepStatus, StepType, TerminalReason, Transition


def iso(ts: float | None) -> str | None:
    return iso_time(ts) if ts is not None else None


@dataclass(frozen=True, slots=True)
class RoleSetting:
    """A role mapped to connectors for one team or user (app.yml's `roles` are the app-wide ones)."""

    scope_kind: str
    scope_id: str
    role: str
    connectors: tuple[str, ...]
    updated_at: float


@dataclass(frozen=True, slots=True)
class ChatRecord:
    id: str
    user_id: str
    team_id: str | None
    assistant_id: str
    title: str
    created_at: float
    updated_at: float
    last_status: str
    last_run_id: str | None
    message_count: int

    def to_api(self) -> dict[str, Any]:
        return {
            "chat_id": self.id,
            "assistant_id": self.assistant_id,
            "title": self.title,
            "updated_at": iso(self.updated_at),
            "last_status": self.last_status,
        }


@dataclass(slots=True)
class RunRecord:
    id: str
    chat_id: str
    user_id: str
    team_id: str | None
    assistant_id: str
    trace_id: str
    owner: str
    started_at: float
    status: RunStatus = "running"
    reason: TerminalReason | None = None
    error: Any = None
    usage: dict[str, Any] = field(default_factory=dict[str, Any])
    next: Any = None
    resumed_from: str | None = None
    ended_at: float | None = None
    duration_ms: int | None = None
    app_version: str | None = None  # the app's files it started with (`App.version`)
    carry: Any = None  # what the run decided, for its resume (pipeline/carry.py); JSON


@dataclass(slots=True)
class StepRecord:
    """One stage of a run. `input` is kept only when a resume may need to run the step again."""

    id: str
    run_id: str
    seq: int
    type: StepType
    status: StepStatus
    started_at: float
    thread_id: str | None = None
    input: Any = None
    output: Any = None
    error: Any = None
    ended_at: float | None = None
    transition: Transition | None = None  # an `llm` step's: why it was made
    billed: bool = False  # an `llm` step's usage ledger row is written already (a budgeted call's, as it ended)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        return out


ApprovalStatus = Literal["pending", "approved", "denied"]


@dataclass(frozen=True, slots=True)
class Approval:
    """A tool call that waited for a person (CONTRACT §4.8), and what was decided: by whom, when, why."""

    run_id: str  # the run that stopped, `waiting`, for it
    tool_call_id: str
    server: str
    tool: str
    arguments: Any
    thread_id: str | None = None
    status: ApprovalStatus = "pending"
    reason: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    message_id: str | None = None  # the call's result in the chat (its stand-in until the call runs)

    def request(self) -> dict[str, Any]:
        """How a pending call is shown (`GET …/approvals`, `stream_end.approvals`)."""
        return {"tool_call_id": self.tool_call_id, "server": self.server, "tool": self.tool,
                "arguments": self.arguments}  # fmt: skip

    def decision(self) -> dict[str, Any]:
        """How a decided call is shown with its result in the history."""
        out: dict[str, Any] = {"approved": self.status == "approved", "by": self.decided_by,
                               "at": iso(self.decided_at)}  # fmt: skip
        return out | ({"reason": self.reason} if self.reason else {})


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a run that did not complete stopped: its unfinished steps, with what they were given; a run
    that waits for approvals has them (decided or not)."""

    run: RunRecord
    steps: tuple[StepRecord, ...]
    approvals: tuple[Approval, ...] = ()

    @property
    def pending(self) -> tuple[Approval, ...]:
        return tuple(a for a in self.approvals if a.status == "pending")

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run.id, "status": self.run.status, "reason": self.run.reason}
        if self.run.error is not None:
            out["error"] = self.run.error
        out["steps"] = [s.to_api() for s in self.steps]
        return out


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as `GET /api/chats/{id}/runs/{run_id}` shows it: its outcome and every step, in order."""

    run: RunRecord
    steps: tuple[StepRecord, ...]

    def to_api(self) -> dict[str, Any]:
        run = self.run
        out: dict[str, Any] = {"run_id": run.id, "chat_id": run.chat_id, "assistant_id": run.assistant_id,
                               "status": run.status, "reason": run.reason}  # fmt: skip
        if run.error is not None:
            out["error"] = run.error
        out |= {"usage": run.usage, "resumed_from": run.resumed_from, "started_at": iso(run.started_at),
                "ended_at": iso(run.ended_at), "duration_ms": run.duration_ms,
                "app_version": run.app_version}  # fmt: skip
        out["steps"] = [_step_view(step) for step in self.steps]
        return out


def _step_view(step: StepRecord) -> dict[str, Any]:
    """A step's type, status, transition and timing; an `llm` step's connector, model and tokens (from
    its output, or for a try the call went past, its error) and the links of its chain it passed, each
    with why (it failed: a try of its own; it was skipped while cooling down); never what it was given
    (a resumable step keeps its whole input)."""
    out: dict[str, Any] = {"seq": step.seq, "type": step.type, "status": step.status}
    if step.transition is not None:
        out["transition"] = step.transition
    if step.thread_id is not None:
        out["thread_id"] = step.thread_id
    output: object = step.output  # stored JSON: an llm step's is an object
    made = cast("dict[str, Any]", output) if isinstance(output, dict) else {}
    out |= {key: made[key] for key in ("connector", "model", "usage", "fallbacks") if made.get(key) is not None}
    failed: object = step.error  # a try the call went past (pipeline/trail.py) names who failed in its error
    if "connector" not in out and isinstance(failed, dict):
        tried = cast("dict[str, Any]", failed)
        out |= {key: tried[key] for key in ("connector", "model") if tried.get(key) is not None}
    if step.error is not None:
        out["error"] = step.error
    ended = step.ended_at
    out["started_at"] = iso(step.started_at)  # with the durations: where a run's time went, gaps included
    out["duration_ms"] = None if ended is None else max(0, round((ended - step.started_at) * 1000))
    return out


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a run's write-ahead read and wrote in its one transaction (`load_and_start`)."""

    history: list[ChatMessage]  # the chat's last messages (from its latest summary on), oldest first
    sent: list[dict[str, Any]]  # the same as a model is sent them (see messages.provider_messages)
    written: list[ChatMessage]  # the input less what repeated the history's end: what was stored
