"""What a run decided, kept with it so its resume continues the same run (CONTRACT §4, "A resume
continues the same run's state").

A resume — after an error, a cancel, an approval or a `kill -9` — is a new run record of the same chat.
Without this, it would start with a fresh turn budget, an empty loop-detector window, no retries or
`ctx.call`s spent, and none of the Create hook's choices (its `require_approval` among them): a crash
would lift every guard. So the root run's counters and choices are written with each journal commit
(and with the flush), as `runs.carry`, and a resume starts from the carry of the run it continues.

The carry is plain JSON with a version, typed here and nowhere else; a run stored before carries
existed (no carry) resumes as it did then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, cast

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.pipeline.guards import LOOP_WINDOW
from yao_agent.pipeline.options import RunOptions
from yao_agent.pipeline.state import RunState

if TYPE_CHECKING:
    from yao_agent.shapes import ReferenceOut

VERSION = 1
MAX_CREATE_MESSAGES_CHARS = 256 * 1024  # a Create hook's rewritten messages kept for a resume, at most


@dataclass(frozen=True, slots=True)
class Carry:
    """The root run's counters and the choices made for it, as a resume needs them."""

    turns: int = 0  # model calls made (limits.max_turns)
    tool_turns: int = 0  # model turns that answered tool results (mcp.max_turns)
    tool_attempt: int = 0  # failed executions of the current tool round (limits.max_tool_retries)
    output_retries: int = 0  # answers sent back for not fitting the output schema
    signatures: tuple[str, ...] = ()  # the loop detector's window
    hook_calls: int = 0  # ctx.call made by the run's hooks
    hook_sent_bytes: int = 0  # ctx.send bytes
    created: bool = False  # the Create hook ran: what it chose is in `options`, `metadata`, `locale`
    options: RunOptions = field(default_factory=RunOptions)  # the run's options
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])
    locale: str = "en"
    create_messages: list[dict[str, Any]] | None = None  # the conversation Create rewrote, if it did
    searched: bool = False  # the search step ran: a resume gives the model the same references
    references: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    forced: bool = False  # a model call had the client's tool_choice forcing a call (client_tools.py)


def snapshot(state: RunState) -> dict[str, Any]:
    """The carry of the root run `state` belongs to, as stored."""
    root = state.root
    # The conversation Create wrote is what a resume starts from only until the first reply: after it, the
    # stored chat (with that reply, its tool calls and results) is the conversation, as it always was.
    replied = any(m.role == "assistant" for m in root.buffer.messages)
    carry = Carry(
        turns=root.turns, tool_turns=root.tool_turns, tool_attempt=root.tool_attempt,
        output_retries=root.output_retries, signatures=tuple(root.signatures[-LOOP_WINDOW:]),
        hook_calls=root.spend.calls, hook_sent_bytes=root.spend.sent_bytes, created=root.created,
        options=root.options, metadata=dict(root.metadata), locale=root.locale,
        create_messages=None if replied else root.create_messages,
        searched=root.searched, references=[dict(r) for r in root.references], forced=root.forced,
    )  # fmt: skip
    fields_of = {f.name: getattr(carry, f.name) for f in fields(carry)}
    return {"version": VERSION} | fields_of | {"options": carry.options.to_json()}


def read(stored: Any) -> Carry | None:
    """The carry a stored run kept; None for a run stored without one (or by a newer version)."""
    data = as_mapping(stored)
    if data.get("version") != VERSION:
        return None
    messages = data.get("create_messages")
    return Carry(
        turns=_count(data, "turns"), tool_turns=_count(data, "tool_turns"), tool_attempt=_count(data, "tool_attempt"),
        output_retries=_count(data, "output_retries"),
        signatures=tuple(str(s) for s in as_list(data.get("signatures"))),
        hook_calls=_count(data, "hook_calls"), hook_sent_bytes=_count(data, "hook_sent_bytes"),
        created=data.get("created") is True, options=RunOptions.from_json(as_mapping(data.get("options"))),
        metadata=dict(as_mapping(data.get("metadata"))), locale=str(data.get("locale") or "en"),
        create_messages=[dict(as_mapping(m)) for m in as_list(messages)] or None,
        searched=data.get("searched") is True,
        references=[dict(as_mapping(r)) for r in as_list(data.get("references"))],
        forced=data.get("forced") is True,
    )  # fmt: skip


def restore(state: RunState) -> Carry | None:
    """A resumed root run takes over the state of the run it continues; the carry it took, if any."""
    point = state.request.resume
    if state.parent is not None or point is None:
        return None
    carry = read(point.run.carry)
    if carry is None:
        return None
    state.turns, state.tool_turns, state.tool_attempt = carry.turns, carry.tool_turns, carry.tool_attempt
    state.output_retries, state.signatures = carry.output_retries, list(carry.signatures)
    state.spend.calls, state.spend.sent_bytes = carry.hook_calls, carry.hook_sent_bytes
    state.created, state.create_messages = carry.created, carry.create_messages
    state.searched, state.references = carry.searched, cast("list[ReferenceOut]", list(carry.references))
    state.options = carry.options.over(state.options)  # what this request says itself wins
    # A tool_choice that forces a call does so once per request that gives it: the one carried over is spent.
    state.forced = carry.forced and state.request.tool_choice in (None, "auto", "none")
    state.metadata = dict(carry.metadata) | state.metadata
    if state.request.locale == "en":  # the request's default: the run's own locale holds
        state.locale = carry.locale
    return carry


def keep_create_messages(state: RunState, messages: Sequence[Mapping[str, Any]] | None) -> None:
    """Remember the conversation a Create hook wrote, when it is small enough to keep for a resume that
    starts before the first reply (otherwise that resume asks the hook again)."""
    if messages is None:
        return
    size = sum(len(str(m.get("content") or "")) for m in messages)
    state.root.create_messages = [dict(m) for m in messages] if size <= MAX_CREATE_MESSAGES_CHARS else None


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
