"""Compaction: the turns before the last few, summarised into one stored `summary` message (CONTRACT §4
item 5, step 2).

Everything before the last `keep` user turns goes to the summariser (`context.summarize_with`, else
the assistant's connectors) as a transcript, with a prompt asking for what a successor needs to go on
with the unfinished task: the goal, what was done, what was found, what is left. The cut falls just
before a user message, so a tool call is never parted from its result. The summary is stored as a
message of role `summary` whose `summarises` names the first and last stored message it covers; those
stay stored and shown in `history`, and later runs load the latest summary and what follows it. A
conversation that already starts with a summary has it summarised again, with what followed it.

The summariser's call is recorded as an `llm` step without a transition (it answers no turn, and it
does not count against `limits.max_turns`); its tokens count in the run's usage. Nothing it says is
streamed: the client is told of the compaction by a `compaction` event (sent by pipeline/context.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors import CallOptions, ModelRequest, resolve_connectors
from yao_agent.messages import SUMMARY_HEADING, ChatMessage, canonical, text_of
from yao_agent.pipeline import aside, connector
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.pipeline.window import Window, cut_results, window_of

SUMMARY_PROMPT = """\
You write the hand-over notes of a conversation between a user and an AI assistant (with the tools it \
called). Another assistant will continue the unfinished work from your notes alone: the messages you \
read will not be shown to it again. Write, in the language of the conversation and in at most \
{words} words:

Goal: what the user wants, with every requirement, constraint and preference they stated.
Done: what has been done so far, including which tools were called and what for.
Found: the facts, results, numbers, names, identifiers, paths and decisions the work produced — \
everything the successor must not have to find out again.
Left: what remains to do, open questions, and what the user is waiting for.

If the conversation begins with an earlier summary, fold it in. Say only what the conversation shows."""
EARLIER = "[summary of the conversation before this part]"
LEFT_OUT = "[… {count} messages left out here: the summariser's window could not hold them …]"


@dataclass(frozen=True, slots=True)
class Compacted:
    summary: ChatMessage
    messages_summarised: int  # the stored messages folded in by this compaction (an earlier summary aside)
    connector: str  # who wrote it


@dataclass(frozen=True, slots=True)
class _Covered:
    first: str
    last: str
    count: int


async def compact(rt: Runtime, state: RunState, window: Window, keep: int) -> Compacted | None:
    """Summarise the conversation before its last `keep` user turns; None when there is nothing to
    summarise (too few turns, or nothing stored before them)."""
    conversation = state.conversation
    cut = split_point(conversation, keep)
    if cut is None:
        return None
    covered = _covered(state, conversation[cut:])
    if covered is None:
        return None
    summary_id = rt.ids.new("msg")
    text, connector = await _summarise(rt, state, window, conversation[:cut], summary_id)
    if not text.strip():
        return None  # nothing to stand in for those turns: they stay
    summary = ChatMessage(id=summary_id, role="summary", content=text.strip(), run_id=state.run_id,
                          created_at=rt.clock(), summarises=(covered.first, covered.last))  # fmt: skip
    state.buffer.add(summary)
    state.summary = summary
    state.conversation = [summary.to_provider(), *conversation[cut:]]
    return Compacted(summary, covered.count, connector)


def is_summary(message: dict[str, Any]) -> bool:
    """Whether a provider message is a stored summary as models are sent it (ChatMessage.to_provider)."""
    content = message.get("content")
    return message.get("role") == "system" and isinstance(content, str) and content.startswith(SUMMARY_HEADING)


def split_point(conversation: Sequence[dict[str, Any]], keep: int) -> int | None:
    """Where the last `keep` user turns begin, if anything but a summary comes before them."""
    users = [i for i, m in enumerate(conversation) if m.get("role") == "user"]
    if not users or keep < 1:
        return None
    cut = users[-keep] if len(users) >= keep else users[0]
    start = 1 if conversation and is_summary(conversation[0]) else 0
    return cut if cut > start else None


def _covered(state: RunState, kept: Sequence[dict[str, Any]]) -> _Covered | None:
    """The stored messages before the first kept user turn: its first and last ids (from the start of an
    earlier summary's range, whose messages it takes in), and how many are new to a summary."""
    root = state.root
    stored = [
        m for m in (*root.history, *root.written, *root.buffer.messages) if m.role != "summary" and not m.replaces
    ]
    users = [m for m in kept if m.get("role") == "user"]
    positions = [i for i, m in enumerate(stored) if m.role == "user" and not m.withheld]
    wanted = canonical(users[0])
    at = positions[-len(users)] if len(positions) >= len(users) else None
    if at is None or canonical(stored[at].to_provider()) != wanted:  # a hook added or rewrote user turns
        at = next((i for i in reversed(positions) if canonical(stored[i].to_provider()) == wanted), None)
    earlier = state.summary.summarises if state.summary is not None else None
    ids = [m.id for m in stored]
    start = ids.index(earlier[1]) + 1 if earlier is not None and earlier[1] in ids else 0
    if not at or at <= start:
        return None
    return _Covered(earlier[0] if earlier is not None else stored[0].id, stored[at - 1].id, at - start)


async def _summarise(
    rt: Runtime, state: RunState, window: Window, older: Sequence[dict[str, Any]], summary_id: str
) -> tuple[str, str]:
    """The summariser's text, and its connector's id."""
    chain = state.chain
    if state.assistant.context.summarize_with is not None:
        found = await resolve_connectors(state.assistant.context.summarize_with, rt.app, state.identity,
                                         connector.settings(rt, state), rt.environ)  # fmt: skip
        chain = found.connectors
    own = window_of(state, chain)
    reply = max(256, min(4096, window.budget // 4)) if window.budget is not None else 1024
    prompt = {"role": "system", "content": SUMMARY_PROMPT.format(words=int(reply * 0.6))}
    room = None if own.budget is None else own.budget - own.counter.message(prompt) - reply
    lines = transcript(older, own, room)
    request = ModelRequest(messages=[prompt, {"role": "user", "content": lines}], options=CallOptions(max_tokens=reply))
    return await aside.call(rt, state, chain, request, {"summary_message_id": summary_id})


def transcript(older: Sequence[dict[str, Any]], window: Window, room: int | None) -> str:
    """The messages as one text the summariser reads (a request with tool calls would need their tools),
    tool results cut as for the model; with `room`, the middle is left out until it fits."""
    entries = [_entry(m) for m in cut_results(list(older), window.counter, window.settings.tool_result_max_tokens)]
    if room is not None:
        entries = _within(entries, window, room)
    return "\n\n".join(entries)


def _entry(message: dict[str, Any]) -> str:
    role = message.get("role")
    content = message.get("content")
    text = text_of(content) + "".join(
        f"\n[{as_mapping(p).get('type')}]" for p in as_list(content) if as_mapping(p).get("type") != "text"
    )
    if is_summary(message):
        return f"{EARLIER}\n{text.removeprefix(SUMMARY_HEADING)}"
    if role == "tool":
        return f"[tool result of {message.get('tool_call_id')}]\n{text}"
    calls = [as_mapping(as_mapping(c).get("function")) for c in as_list(message.get("tool_calls"))]
    said = "".join(f"\n[calls {f.get('name')} with {f.get('arguments')}]" for f in calls)
    return "\n".join(part for part in (f"[{role}]", text, said.lstrip("\n")) if part)


def _within(entries: list[str], window: Window, room: int) -> list[str]:
    """The first and last entries that fit in `room` tokens (half each), and a note on those left out:
    the beginning holds the goal, the end where the work stands."""
    sizes = [window.counter.text(e) + 2 for e in entries]
    if sum(sizes) <= room:
        return entries
    head = tail = 0
    used = 0
    while head < len(entries) and used + sizes[head] <= room // 2:
        used += sizes[head]
        head += 1
    while tail < len(entries) - head and used + sizes[-1 - tail] <= room:
        used += sizes[-1 - tail]
        tail += 1
    left_out = LEFT_OUT.format(count=len(entries) - head - tail)
    return [*entries[:head], left_out, *entries[len(entries) - tail :]]
