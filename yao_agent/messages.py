"""Chat messages as stored and shown, and their conversion to and from provider (OpenAI-shaped) messages.

Two rules are enforced here, for every provider: a reply cut off mid-stream (`incomplete`) is never
sent back to a model as if it were finished, and every assistant tool call is followed by exactly one
tool result with its id (a result is synthesized if the store lacks one), so any stored chat is valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from yao_agent.base.jsonvalue import NotPlainJson, as_list, as_mapping, strict_loads
from yao_agent.errors import UsageError
from yao_agent.vocabulary import MessageStatus, Role

if TYPE_CHECKING:
    from yao_agent.shapes import DecisionOut, MessageOut, ReferenceOut, ToolCallOut

Content = str | list[dict[str, Any]] | None
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")  # what a request may send
# How a summary reaches a model: providers know no `summary` role (see ChatMessage.to_provider).
SUMMARY_HEADING = "Summary of the earlier conversation:\n\n"
MISSING_RESULT = "failed: no result was recorded for this tool call"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object as text: what the model wrote, or "{}" when that was not one
    # What the model wrote when it was not a JSON object: the call is answered with an error quoting it,
    # but it is never stored or sent to a provider again (strict providers refuse such a history).
    invalid: str | None = None

    @classmethod
    def written(cls, call_id: str, name: str, arguments: str) -> ToolCall:
        """A call as a model (or a stored chat) has it, with arguments any provider accepts back."""
        if not arguments.strip():
            return cls(call_id, name, "{}")  # no arguments: an empty object, as the tool sees it
        if is_json_object(arguments):
            return cls(call_id, name, arguments)
        return cls(call_id, name, "{}", invalid=arguments)

    def to_dict(self) -> ToolCallOut:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def to_step(self) -> dict[str, str]:
        """The call as a step keeps it for the run's continuation: with what the model wrote, so a resumed
        or approved round answers an invalid call with its error again instead of running it with `{}`."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments if self.invalid is None else self.invalid}

    def to_provider(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Cited:
    """An assistant message's references (what its run's search found, numbered) and the numbers its text
    cites: those matching a reference (`citations`) and those matching none (`unknown`)."""

    references: tuple[Mapping[str, Any], ...]
    citations: tuple[int, ...]
    unknown: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """As the store keeps it."""
        return {"references": [dict(r) for r in self.references], "citations": list(self.citations),
                "unknown": list(self.unknown)}  # fmt: skip

    @classmethod
    def from_json(cls, stored: object) -> Cited | None:
        """What the store kept (None: nothing, or not this shape)."""
        if not isinstance(stored, Mapping):
            return None
        kept = cast(Mapping[str, Any], stored)
        listed = as_list(kept.get("references"))
        references = tuple(cast(Mapping[str, Any], r) for r in listed if isinstance(r, Mapping))
        numbers = [tuple(n for n in as_list(kept.get(k)) if type(n) is int) for k in ("citations", "unknown")]
        return cls(references, numbers[0], numbers[1])


@dataclass(slots=True)
class ChatMessage:
    id: str
    role: Role
    content: Content
    run_id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    status: MessageStatus = "completed"
    thread_id: str | None = None
    created_at: float = 0.0
    seq: int = 0  # position in the chat, given when stored
    hidden: bool = False  # a hook's ctx.call turn: kept and shown in history, never sent to a model again
    # A resumed tool call's result: it takes the place (id and position) of the result stored for the
    # call before, so the chat keeps exactly one result per call, right after the call.
    replaces: bool = False
    summarises: tuple[str, str] | None = None  # a summary's first and last message ids
    approval: DecisionOut | None = None  # shown, not stored here: what a person decided about the call
    connector: str | None = None  # an assistant message's: the connector that answered (of a fallback chain)
    model: str | None = None  # ... and its model
    cited: Cited | None = None  # an assistant message's references and citations (knowledge search)
    replaced_by: str | None = None  # an earlier version: the run (regenerate, edit) that replaced it
    # An assistant message a resume made by continuing a reply cut off before: that reply's id. Its text is
    # the cut reply's and what followed; the cut one stays stored (incomplete), never sent to a model.
    continues: str | None = None

    @property
    def withheld(self) -> bool:
        """Never sent to a model again: a hook's hidden turn, or an earlier version of the chat (replaced)."""
        return self.hidden or self.replaced_by is not None

    def to_api(self) -> MessageOut:
        """The stored-message shape of CONTRACT §6."""
        out: MessageOut = {"message_id": self.id, "run_id": self.run_id, "role": self.role, "content": self.content,
                           "status": self.status, "created_at": iso_time(self.created_at)}  # fmt: skip
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.thread_id is not None:
            out["thread_id"] = self.thread_id
        if self.summarises is not None:
            out["summarises"] = list(self.summarises)
        if self.approval is not None:
            out["approval"] = self.approval
        if self.connector is not None:
            out["connector"], out["model"] = self.connector, self.model
        if self.continues is not None:
            out["continues"] = self.continues
        if self.cited is not None:
            out["references"] = [cast("ReferenceOut", dict(r)) for r in self.cited.references]
            out["citations"], out["unknown_citations"] = list(self.cited.citations), list(self.cited.unknown)
        if self.replaced_by is not None:
            out["replaced_by"] = self.replaced_by
        return out

    def to_provider(self) -> dict[str, Any]:
        if self.role == "summary":  # as a system message: it stands before the turns it did not cover
            return {"role": "system", "content": SUMMARY_HEADING + text_of(self.content)}
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_provider() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


def is_json_object(text: str) -> bool:
    """Whether `text` is a plain JSON object: the only arguments a tool call may carry to a provider or a
    tool (no NaN, no number beyond a double, no key given twice: readers differ on those)."""
    if not text.lstrip().startswith("{"):  # a cheap first look: anything else is no object
        return False
    try:
        return isinstance(strict_loads(text), dict)
    except ValueError:
        return False


def iso_time(ts: float) -> str:
    """A stored epoch time as the API shows times: ISO 8601, UTC."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def text_of(content: object) -> str:
    """The text of a content value: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    parts = [as_mapping(p) for p in as_list(content)]
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def provider_messages(history: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Stored messages → what a model may be sent: no incomplete replies, every call paired once.

    A call's latest result wins (a resumed tool call's result supersedes the one synthesized when
    its run stopped); a call without any gets a synthesized one; a result without its call is dropped.
    """
    out: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any] | None] = {}  # the calls of the last assistant turn → their result
    for message in history:
        if message.withheld or (message.status == "incomplete" and message.role == "assistant"):
            continue  # an incomplete reply was shown once; it is never presented to a model as an answer
        if message.role == "tool":
            if message.tool_call_id in pending:
                pending[message.tool_call_id] = message.to_provider()
            continue  # a result whose call fell out of the window (or never existed): providers reject it
        out += _close(pending)
        out.append(message.to_provider())
        if message.role == "assistant":
            pending = {c.id: None for c in message.tool_calls}
    return out + _close(pending)


def _close(pending: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    closing = [
        result or {"role": "tool", "tool_call_id": call, "content": MISSING_RESULT} for call, result in pending.items()
    ]
    pending.clear()
    return closing


def canonical(message: Mapping[str, Any]) -> str:
    """A comparable form of a provider message: role, content by value, tool-call pairing.

    A content list of one text part equals the same text as a string; other multimodal content is
    compared part by part, by value.
    """
    content = message.get("content")
    parts = as_list(content)
    if len(parts) == 1 and as_mapping(parts[0]).get("type") == "text":
        content = as_mapping(parts[0]).get("text")
    if content == "" and message.get("role") == "assistant":
        content = None  # a reply that only calls tools: clients write its empty text either way
    calls = [
        (as_mapping(c).get("id"), as_mapping(as_mapping(c).get("function")).get("name"))
        for c in as_list(message.get("tool_calls"))
    ]
    key = [message.get("role"), content, message.get("tool_call_id"), calls]
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)


def overlap(history: Sequence[Mapping[str, Any]], given: Sequence[Mapping[str, Any]]) -> int:
    """How many leading input messages repeat the end of the history (provider messages, by `canonical`).

    Clients often resend the conversation; what they resend is not a new message.
    """
    tail = [canonical(m) for m in history[-len(given) :]] if given else []
    head = [canonical(m) for m in given]
    for size in range(min(len(tail), len(head)), 0, -1):
        if tail[-size:] == head[:size]:
            return size
    return 0


def as_client_saw(history: Sequence[Mapping[str, Any]], unseen: Collection[str]) -> list[Mapping[str, Any]]:
    """The history as a client that runs tools of its own resends it: the reply that called them (`unseen`:
    calls it sent no result for) with those calls only, and none of that reply's results (the server's ran
    out of its sight; its own it never sent)."""
    if not unseen:
        return list(history)
    out: list[Mapping[str, Any]] = []
    hidden: set[object] = set()
    for message in history:
        calls = as_list(message.get("tool_calls"))
        ids = {as_mapping(c).get("id") for c in calls}
        if message.get("role") == "assistant" and ids & set(unseen):
            hidden |= ids
            message = {**message, "tool_calls": [c for c in calls if as_mapping(c).get("id") in unseen]}
        elif message.get("role") == "tool" and message.get("tool_call_id") in hidden:
            continue
        out.append(message)
    return out


def parse_input(raw: object, *, where: str = "messages") -> list[dict[str, Any]]:
    """Validate request messages (OpenAI shape) → clean dicts; a precise UsageError otherwise."""
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"{where}: expected a non-empty list of messages")
    return [_parse_one(item, f"{where}[{index}]") for index, item in enumerate(cast(list[Any], raw))]


def _parse_one(item: object, where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise UsageError(f"{where}: expected an object with role and content")
    message = cast(Mapping[str, Any], item)
    role = message.get("role")
    if role not in ROLES:
        raise UsageError(f"{where}.role: expected one of {', '.join(ROLES)}, got {role!r}")
    if isinstance(message.get("name"), str):
        check_text(message["name"], f"{where}.name")
    out: dict[str, Any] = {"role": role, "content": _content(message.get("content"), f"{where}.content", role)}
    if role == "tool":
        out["tool_call_id"] = _call_id(message.get("tool_call_id"), f"{where}.tool_call_id", "this answers")
    if role == "assistant" and message.get("tool_calls") is not None:
        out["tool_calls"] = _tool_calls(message.get("tool_calls"), f"{where}.tool_calls")
    return out


def user_content(value: object, where: str = "content") -> Content:
    """A user message's content as a request gives it (a string, or a non-empty list of typed parts), checked
    as `parse_input` checks a message's; a UsageError naming `where` otherwise."""
    return _content(value, where, "user")


def _content(value: object, where: str, role: str) -> Content:
    if isinstance(value, str):
        return check_text(value, where)
    if value is None and role == "assistant":
        return None
    if not isinstance(value, list) or not value:
        raise UsageError(f"{where}: expected a string or a non-empty list of content parts")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(cast(list[Any], value)):
        data = as_mapping(part)
        kind = data.get("type")
        if not isinstance(kind, str) or not kind:
            raise UsageError(f"{where}[{index}]: expected a content part with a type (text, image_url, ...)")
        if kind == "text" and not isinstance(data.get("text"), str):
            raise UsageError(f"{where}[{index}].text: expected a string")
        check_text(data, f"{where}[{index}]")
        parts.append(dict(data))
    return parts


def _tool_calls(value: object, where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, call in enumerate(as_list(value)):
        data = as_mapping(call)
        function = as_mapping(data.get("function"))
        name, arguments = function.get("name"), function.get("arguments", "")
        if not isinstance(data.get("id"), str) or not isinstance(name, str) or not isinstance(arguments, str):
            raise UsageError(f"{where}[{index}]: expected {{id, type: function, function: {{name, arguments}}}}")
        call_id = _call_id(data["id"], f"{where}[{index}].id", "(a non-empty string)")
        check_text(name, f"{where}[{index}].function.name")
        arguments = _arguments(arguments, f"{where}[{index}].function.arguments")
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    return out


def _arguments(text: str, where: str) -> str:
    """A call's arguments as given in a request: a JSON object as text ("" meaning none), or a UsageError.

    A chat holding other arguments would be refused by strict providers on every later turn."""
    if not text.strip():
        return "{}"
    check_text(text, where)  # first: a lone surrogate cannot even be quoted back in the message below
    if not is_json_object(text):
        why = ""
        try:
            strict_loads(text)
        except NotPlainJson as exc:
            why = f" ({exc})"
        except ValueError:
            pass
        raise UsageError(f"{where}: expected a JSON object as text, got {text[:80]!r}{why}")
    return text


# A lone surrogate ("\ud800" in JSON) decodes to a str that no UTF-8 encoder accepts: not the store, not a response.
_SURROGATE = re.compile("[\\ud800-\\udfff]")
_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f]")
MAX_CALL_ID = 128  # the store's column for tool_call_id, and what providers accept


def storable_call_id(value: str | None) -> bool:
    """Whether a provider's tool call id can be stored and sent back as it is."""
    if not value or len(value) > MAX_CALL_ID:
        return False
    return not (_CONTROL.search(value) or _SURROGATE.search(value))


def _call_id(value: object, where: str, which: str) -> str:
    """A tool call id the store can hold and a provider accepts: 1-128 characters, no control characters."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: expected the id of the tool call {which}")
    if len(value) > MAX_CALL_ID:
        raise UsageError(f"{where}: a tool call id has at most {MAX_CALL_ID} characters (got {len(value)})")
    if _CONTROL.search(value):
        raise UsageError(f"{where}: a tool call id cannot contain control characters")
    return check_text(value, where)


def check_text(value: _T, where: str) -> _T:
    """`value` (a string, or JSON made of mappings and lists) unchanged, if no string in it holds a lone surrogate.

    Keys are checked too. The walk is iterative and a location is spelled out only for an error, so JSON
    nested as deep as the parser allows costs neither the stack nor quadratic time.
    """
    pending: list[tuple[object, _Where]] = [(value, (None, where))]
    while pending:
        item, at = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise UsageError(f"{_spelled(at)}: text contains an unpaired UTF-16 surrogate")
        elif isinstance(item, Mapping):
            for key, inner in cast(Mapping[object, object], item).items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise UsageError(f"{_spelled(at)}: a key contains an unpaired UTF-16 surrogate")
                pending.append((inner, (at, f".{key}")))
        elif isinstance(item, list | tuple):
            pending += [(inner, (at, f"[{i}]")) for i, inner in enumerate(cast(Sequence[object], item))]
    return value


_Where = tuple["_Where | None", str]  # (the parent's location, this step): a location as a linked list


def _spelled(at: _Where) -> str:
    steps: list[str] = []
    link: _Where | None = at
    while link is not None:
        link, step = link
        steps.append(step)
    return "".join(reversed(steps))


def from_provider(message: Mapping[str, Any], message_id: str, run_id: str, created_at: float) -> ChatMessage:
    """A validated input message → a ChatMessage to store."""
    calls = tuple(
        ToolCall(str(c["id"]), str(c["function"]["name"]), str(c["function"]["arguments"]))
        for c in as_list(message.get("tool_calls"))  # checked by parse_input: no call here needs `written`
    )
    return ChatMessage(
        id=message_id,
        role=message["role"],
        content=message.get("content"),
        run_id=run_id,
        tool_calls=calls,
        tool_call_id=message.get("tool_call_id"),
        created_at=created_at,
    )
