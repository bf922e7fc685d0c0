"""What each kind of step is given, typed once: the pipeline writes it, the journal stores it, a resume
(and the approvals, the traces, the metrics) reads it back.

A step keeps its input while a resume may need to run it again; a hook step keeps it for good, as the
record of what the hook saw. It is stored as JSON (`steps.input`) in the shapes below — the shapes it
had before it was typed, so a row stored then reads as one stored now:

- `llm`: the request — `{messages, tools, options, connectors}` (a summary call: no `tools`); a run
  killed after a complete reply: `{resume: "answered", message_id}`, nothing is asked again;
- `tool`: the round's calls — `{calls: [{id, name, arguments}], attempt, require_approval?}`;
- `hook_create`, `hook_next`: `{function, args}`, or `{truncated: true, json_chars | reason}` when it
  was too large to keep;
- `delegate`: `{assistant_id, messages, via, from_thread}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.messages import ToolCall
from yao_agent.vocabulary import StepType

ANSWERED = "answered"  # the stored mark of an `Answered` input
NO_JSON = "no JSON form"  # why a `Truncated` input kept no size
Via = Literal["delegate", "call"]  # how a child run was asked for: a hand-over, or a hook's ctx.call


@dataclass(frozen=True, slots=True)
class ModelCall:
    """An `llm` step's: the request it made (a failed call is made again from it)."""

    messages: Sequence[Mapping[str, Any]]
    options: Mapping[str, Any]  # as the call sent them
    connectors: tuple[str, ...]  # the chain that was to answer it
    tools: Sequence[Mapping[str, Any]] | None = None  # None: a summary call, which offers none

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages}
        if self.tools is not None:
            out["tools"] = list(self.tools)
        return out | {"options": dict(self.options), "connectors": list(self.connectors)}


@dataclass(frozen=True, slots=True)
class Answered:
    """The `llm` step an interrupted run resumes at when its last reply was complete: it is the answer."""

    message_id: str

    def to_json(self) -> dict[str, Any]:
        return {"resume": ANSWERED, "message_id": self.message_id}


@dataclass(frozen=True, slots=True)
class ToolRound:
    """A `tool` step's: the calls of a round (those still to run, while it runs), and its execution."""

    calls: tuple[ToolCall, ...]
    attempt: int = 1  # which execution of the round (a failed one goes back to the model: max_tool_retries)
    require_approval: tuple[str, ...] = ()  # a Create hook's policy, kept with a waiting round (approvals)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"calls": [c.to_step() for c in self.calls], "attempt": self.attempt}
        return out | ({"require_approval": list(self.require_approval)} if self.require_approval else {})

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.calls]


@dataclass(frozen=True, slots=True)
class HookCall:
    """A hook step's: the function called and its arguments, as the hook got them."""

    function: str
    args: Sequence[Any]

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "args": list(self.args)}


@dataclass(frozen=True, slots=True)
class Truncated:
    """What a completed hook step keeps of an input (or answer) too large to record: its size in characters
    of JSON; None: it had no JSON form."""

    json_chars: int | None = None

    def to_json(self) -> dict[str, Any]:
        said = {"json_chars": self.json_chars} if self.json_chars is not None else {"reason": NO_JSON}
        return {"truncated": True} | said


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A `delegate` step's: which assistant, with which messages (None: the conversation so far), asked
    how and from which thread — so a resume finds the step a run stopped at inside a child."""

    assistant_id: str
    messages: Sequence[Mapping[str, Any]] | None
    via: Via
    from_thread: str | None

    def to_json(self) -> dict[str, Any]:
        messages = list(self.messages) if self.messages is not None else None
        return {"assistant_id": self.assistant_id, "messages": messages, "via": self.via,
                "from_thread": self.from_thread}  # fmt: skip


StepInput = ModelCall | Answered | ToolRound | HookCall | Truncated | ChildRun


def to_json(given: StepInput | None) -> Any:
    """The input as stored."""
    return given.to_json() if given is not None else None


def read(kind: StepType, stored: Any) -> StepInput | None:
    """A stored input, typed as its step's kind has it (None for none)."""
    if stored is None:
        return None
    data = as_mapping(stored)
    if kind == "llm":
        return Answered(str(data.get("message_id"))) if data.get("resume") == ANSWERED else _model_call(data)
    if kind == "tool":
        return _tool_round(data)
    if kind == "delegate":
        via: Via = "call" if data.get("via") == "call" else "delegate"
        owner = data.get("from_thread")
        return ChildRun(str(data.get("assistant_id")), _messages(data.get("messages")), via,
                        owner if isinstance(owner, str) else None)  # fmt: skip
    if data.get("truncated") is True:
        size = data.get("json_chars")
        return Truncated(size if isinstance(size, int) else None)
    return HookCall(str(data.get("function") or ""), as_list(data.get("args")))


def _model_call(data: Mapping[str, Any]) -> ModelCall:
    tools = data.get("tools")
    return ModelCall(
        messages=_messages(data.get("messages")) or [], options=dict(as_mapping(data.get("options"))),
        connectors=tuple(str(c) for c in as_list(data.get("connectors"))),
        tools=[dict(as_mapping(t)) for t in as_list(tools)] if tools is not None else None,
    )  # fmt: skip


def _tool_round(data: Mapping[str, Any]) -> ToolRound:
    calls = [as_mapping(c) for c in as_list(data.get("calls"))]
    attempt = data.get("attempt", 1)
    return ToolRound(
        tuple(ToolCall.written(str(c.get("id")), str(c.get("name")), str(c.get("arguments") or "")) for c in calls),
        attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 1,
        tuple(str(n) for n in as_list(data.get("require_approval"))),
    )


def _messages(given: Any) -> list[dict[str, Any]] | None:
    return [dict(as_mapping(m)) for m in as_list(given)] if given is not None else None
