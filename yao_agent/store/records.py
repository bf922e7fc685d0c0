"""What the store keeps about chats, runs and steps, as plain typed records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.messages import ChatMessage, iso_time
from yao_agent.store.step_inputs import StepInput
from yao_agent.vocabulary import RunStatus, StepStatus, StepType, TerminalReason, Transition

if TYPE_CHECKING:
    from yao_agent.shapes import ApprovalOut, ChatOut, DecisionOut, ResumePointOut, RunStepOut, RunViewOut, StepOut


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
    last_status: RunStatus
    last_run_id: str | None
    message_count: int

    def to_api(self) -> ChatOut:
        return {
            "chat_id": self.id,
            "assistant_id": self.assistant_id,
            "title": self.title,
            "updated_at": iso_time(self.updated_at),
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
    """One stage of a run. `input` is kept only when a resume may need to run the step again (and by a hook
    step, as the record of what the hook saw): store/step_inputs.py."""

    id: str
    run_id: str
    seq: int
    type: StepType
    status: StepStatus
    started_at: float
    thread_id: str | None = None
    input: StepInput | None = None
    output: Any = None
    error: Any = None
    ended_at: float | None = None
    transition: Transition | None = None  # an `llm` step's: why it was made
    billed: bool = False  # an `llm` step's usage ledger row is written already (a budgeted call's, as it ended)

    def to_api(self) -> StepOut:
        out: StepOut = {"type": self.type, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        return out


ApprovalStatus = Literal["pending", "approved", "denied"]


@dataclass(frozen=True, slots=True)
class LeaseRelease:
    """A run's lease of its chat, to let go (store/notices.py) in the transaction that stores the run."""

    chat_id: str
    run_id: str


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

    def request(self) -> ApprovalOut:
        """How a pending call is shown (`GET …/approvals`, `stream_end.approvals`)."""
        return {"tool_call_id": self.tool_call_id, "server": self.server, "tool": self.tool,
                "arguments": self.arguments}  # fmt: skip

    def decision(self) -> DecisionOut:
        """How a decided call is shown with its result in the history (a decided call has who and when)."""
        out: DecisionOut = {"approved": self.status == "approved", "by": self.decided_by or "",
                            "at": iso_time(self.decided_at or 0.0)}  # fmt: skip
        if self.reason:
            out["reason"] = self.reason
        return out


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

    def to_api(self) -> ResumePointOut:
        status = self.run.status
        assert status != "completed" and status != "running", "a run that completed or runs has no resume point"
        out: ResumePointOut = {"run_id": self.run.id, "status": status, "reason": self.run.reason,
                               "steps": [s.to_api() for s in self.steps]}  # fmt: skip
        if self.run.error is not None:
            out["error"] = self.run.error
        return out


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as `GET /api/chats/{id}/runs/{run_id}` shows it: its outcome and every step, in order."""

    run: RunRecord
    steps: tuple[StepRecord, ...]

    def to_api(self) -> RunViewOut:
        run = self.run
        out: RunViewOut = {"run_id": run.id, "chat_id": run.chat_id, "assistant_id": run.assistant_id,
                           "status": run.status, "reason": run.reason, "usage": run.usage,
                           "resumed_from": run.resumed_from, "started_at": iso_time(run.started_at),
                           "ended_at": iso(run.ended_at), "duration_ms": run.duration_ms,
                           "app_version": run.app_version,
                           "steps": [_step_view(step) for step in self.steps]}  # fmt: skip
        if run.error is not None:
            out["error"] = run.error
        return out


def _step_view(step: StepRecord) -> RunStepOut:
    """A step's type, status, transition and timing; an `llm` step's connector, model and tokens (from
    its output, or for a try the call went past, its error) and the links of its chain it passed, each
    with why (it failed: a try of its own; it was skipped while cooling down); never what it was given
    (a resumable step keeps its whole input)."""
    ended = step.ended_at
    took = None if ended is None else max(0, round((ended - step.started_at) * 1000))
    # with the durations: where a run's time went, gaps included
    out: RunStepOut = {"seq": step.seq, "type": step.type, "status": step.status,
                       "started_at": iso_time(step.started_at), "duration_ms": took}  # fmt: skip
    if step.transition is not None:
        out["transition"] = step.transition
    if step.thread_id is not None:
        out["thread_id"] = step.thread_id
    made = as_mapping(step.output)  # stored JSON: an llm step's is an object
    for key in ANSWERED:
        if made.get(key) is not None:
            out[key] = made[key]
    if "connector" not in out:  # a try the call went past (pipeline/trail.py) names who failed in its error
        tried = as_mapping(step.error)
        for key in WHO:
            if tried.get(key) is not None:
                out[key] = tried[key]
    if step.error is not None:
        out["error"] = step.error
    return out


# What an llm step's output shows of the call, and what a failed try's error names.
ANSWERED: tuple[Literal["connector", "model", "usage", "fallbacks"], ...] = ("connector", "model", "usage", "fallbacks")
WHO: tuple[Literal["connector", "model"], ...] = ("connector", "model")


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a run's write-ahead read and wrote in its one transaction (`load_and_start`)."""

    history: list[ChatMessage]  # the chat's last messages (from its latest summary on), oldest first
    sent: list[dict[str, Any]]  # the same as a model is sent them (see messages.provider_messages)
    written: list[ChatMessage]  # the input less what repeated the history's end: what was stored


@dataclass(frozen=True, slots=True)
class Rewind:
    """Where a run takes its chat up again, making what follows an earlier version (answer versions:
    regenerate and edit). Applied in the run's write-ahead transaction, once the chat is the run's, so a
    refused or queued request replaces nothing.

    `message_id` None: after the chat's last current user message (a regeneration: that message is answered
    again); else from that user message on, itself included (an edit: the run's input takes its place)."""

    message_id: str | None = None
