"""The events a run streams (CONTRACT §5). One frozen dataclass per `type`; `Event` is their union.

Every event carries `run_id`. `to_dict` gives the wire form: `type` first, optional fields left out
when unset, and `Fallback.from_connector` spelled `from` as the contract has it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from yao_agent.vocabulary import EndStatus, MessageStatus, TerminalReason

if TYPE_CHECKING:  # (not at run time: every command imports this module, and shapes costs ~10 ms to load)
    from yao_agent.shapes import ApprovalOut, ClientWaitOut, ReferenceOut, UsageOut

Kind = str  # text | reasoning | tool_call | error | a hook's own kind


@dataclass(frozen=True, slots=True)
class StreamStart:
    run_id: str
    chat_id: str
    assistant_id: str
    trace_id: str
    app_version: str = ""  # the app's files the run started with (CONTRACT §8.4)
    type: Literal["stream_start"] = "stream_start"


@dataclass(frozen=True, slots=True)
class MessageStart:
    """A message begins. `continues`: a resumed run's text that goes on from a reply cut off before (the
    stored message of that id, status incomplete): its deltas carry only the new text, to be appended to
    the cut one as shown; its `message_end` has the whole text."""

    run_id: str
    message_id: str
    kind: Kind
    thread_id: str | None = None
    continues: str | None = None
    type: Literal["message_start"] = "message_start"


@dataclass(frozen=True, slots=True)
class MessageDelta:
    """A piece of a message: `text` for text-like kinds; for tool calls, a fragment of `arguments`."""

    run_id: str
    message_id: str
    kind: Kind
    text: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    thread_id: str | None = None
    type: Literal["message_delta"] = "message_delta"


@dataclass(frozen=True, slots=True)
class MessageEnd:
    """A message is complete (or cut off: `status` incomplete). `content` is the full text or call."""

    run_id: str
    message_id: str
    kind: Kind
    content: Any
    status: MessageStatus = "completed"
    thread_id: str | None = None
    type: Literal["message_end"] = "message_end"


@dataclass(frozen=True, slots=True)
class ToolResult:
    run_id: str
    tool_call_id: str
    server: str
    tool: str
    result: Any
    error: str | None
    attempt: int
    thread_id: str | None = None
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class FallbackEvent:
    run_id: str
    from_connector: str
    to: str
    reason: str
    type: Literal["fallback"] = "fallback"


@dataclass(frozen=True, slots=True)
class Compaction:
    """Earlier turns were summarised to keep the request inside the model's context window: the summary
    is the stored message `summary_message_id`, written by `connector` (CONTRACT §4 item 5)."""

    run_id: str
    summary_message_id: str
    messages_summarised: int
    tokens_before: int
    tokens_after: int
    connector: str
    type: Literal["compaction"] = "compaction"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waits for a person's approval (CONTRACT §4.8): one per such call, before the run ends
    `waiting`; decided over `POST /api/chats/{id}/approvals` or `yao-agent approve`."""

    run_id: str
    tool_call_id: str
    server: str
    tool: str
    arguments: Any
    thread_id: str | None = None
    type: Literal["approval_request"] = "approval_request"


@dataclass(frozen=True, slots=True)
class References:
    """What the search step found (CONTRACT §9.1), sent before the first text: the numbered references the
    model is given and cites as `[n]`."""

    run_id: str
    references: list[ReferenceOut]
    type: Literal["references"] = "references"


@dataclass(frozen=True, slots=True)
class Guardrail:
    """A guardrail check hit (CONTRACT §9.5): at which stage, which check, and whether it masked or blocked;
    `reason` says how many of what, never the text it matched."""

    run_id: str
    stage: str  # input | output | tool_input | tool_output
    check: str  # pii | deny | max_chars | json_schema | classifier | hook
    action: str  # mask | block
    reason: str | None = None
    type: Literal["guardrail"] = "guardrail"


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Always the last event of a root run, exactly once, after everything is stored."""

    run_id: str
    status: EndStatus
    reason: TerminalReason
    usage: UsageOut
    duration_ms: int
    error: Any = None
    next: Any = None
    output: Any = None  # the final answer's value when the run has an output schema (CONTRACT §4 item 7)
    approvals: list[ApprovalOut] | None = None  # the calls waiting for a person, when the run ends `waiting`
    client_calls: list[ClientWaitOut] | None = None  # the calls waiting for the client, when it ends `client_tools`
    type: Literal["stream_end"] = "stream_end"


Event = (
    StreamStart
    | MessageStart
    | MessageDelta
    | MessageEnd
    | ToolResult
    | FallbackEvent
    | Compaction
    | ApprovalRequest
    | References
    | Guardrail
    | StreamEnd
)

_RENAMED = {"from_connector": "from"}


@cache
def _layout(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """(attribute, wire name, omit when None) per field, `type` first."""
    names = [f.name for f in fields(cls)]
    ordered = ["type", *(n for n in names if n != "type")]
    optional = {f.name for f in fields(cls) if f.default is None}
    return tuple((n, _RENAMED.get(n, n), n in optional) for n in ordered)


def to_dict(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attribute, wire, omit_none in _layout(type(event)):
        value = getattr(event, attribute)
        if value is None and omit_none:
            continue
        out[wire] = value
    return out


# One encoder for every event: `json.dumps` with settings of its own builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
_string = _ENCODER.encode  # a str's JSON: what the encoder writes for it inside an object


def to_json(event: Event) -> str:
    if type(event) is MessageDelta and event.text is not None and plain_text(event):
        # Most of a stream: a piece of text, written straight into the shape `to_dict` gives it.
        return f"{text_head(event)}{_string(event.text)}}}"
    return _ENCODER.encode(to_dict(event))


def text_head(event: MessageDelta) -> str:
    """A plain text delta's JSON up to its text: the same for every piece of one message."""
    return (f'{{"type":"message_delta","run_id":{_string(event.run_id)},"message_id":'
            f'{_string(event.message_id)},"kind":{_string(event.kind)},"text":')  # fmt: skip


def text_json(event: MessageDelta, head: str) -> str:
    """A plain text delta's JSON (as `to_json` writes it), its `text_head` given."""
    return f"{head}{_string(event.text)}}}"


def plain_text(event: MessageDelta) -> bool:
    """A delta whose only optional field is its text (not a tool call's fragment, not a child run's)."""
    return event.tool_call_id is None and event.name is None and event.arguments is None and event.thread_id is None
