"""Child runs: a hook hands the conversation to another assistant (`delegate`) or asks one (`ctx.call`).

A child runs the same stages as a nested stack: its messages carry its `thread_id`, it writes into
the root run's buffer (the root flushes once), and it never sends `stream_start`/`stream_end`.
Depth is bounded by `limits.max_delegate_depth`, which also stops delegation cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from yao_agent.errors import DelegateError, NotFound, UsageError
from yao_agent.messages import ChatMessage, parse_input
from yao_agent.pipeline import connector
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def hand_over(rt: Runtime, state: RunState, target: Mapping[str, Any]) -> None:
    """`delegate`: the child's reply is this turn's reply (and the conversation continues with it)."""
    child = await run_child(rt, state, str(target.get("assistant_id")), target.get("messages"), hidden=state.hidden)
    reply = _last_reply(child)
    if reply is not None:
        state.conversation.append(reply.to_provider())
    if child.next is not None:
        state.next = child.next  # the child answered, so its Next data is the run's


async def call_child(rt: Runtime, state: RunState, assistant_id: str, messages: Any) -> dict[str, Any]:
    """`ctx.call`: ask another assistant; its turns are kept (hidden from later model calls)."""
    child = await run_child(rt, state, assistant_id, messages, hidden=True)
    reply = _last_reply(child)
    return {
        "assistant_id": assistant_id,
        "thread_id": child.thread_id,
        "content": reply.content if reply is not None else None,
        "message_id": reply.id if reply is not None else None,
        "next": child.next,
    }


async def run_child(rt: Runtime, parent: RunState, assistant_id: str, messages: Any, *, hidden: bool) -> RunState:
    limit = rt.app.config.limits.max_delegate_depth
    if parent.depth + 1 > limit:
        chain = " → ".join(s.assistant.id for s in _lineage(parent)) + f" → {assistant_id}"
        raise DelegateError(f"delegation deeper than {limit} (limits.max_delegate_depth): {chain}")
    try:
        spec = rt.app.assistant(assistant_id)
    except NotFound as exc:
        raise DelegateError(str(exc)) from None
    if not spec.access.allows(parent.identity.user_id, parent.identity.team_id):
        raise DelegateError(f"assistant '{assistant_id}' is not available to {parent.identity}")
    try:
        given = parse_input(messages, where="delegate messages") if messages is not None else None
    except UsageError as exc:
        raise DelegateError(str(exc)) from None
    thread_id = rt.ids.new("thread")
    step = parent.buffer.begin("delegate", {"assistant_id": assistant_id, "messages": given}, thread_id)
    child = RunState(
        request=parent.request, identity=parent.identity, assistant=spec, run=parent.run, out=parent.out,
        buffer=parent.buffer, started_mono=parent.started_mono, input=[], stored=True,
        conversation=given if given is not None else list(parent.conversation), metadata=dict(parent.metadata),
        locale=parent.locale, thread_id=thread_id, depth=parent.depth + 1, hidden=hidden, parent=parent,
    )  # fmt: skip
    await connector.resolve(rt, child)
    from yao_agent.pipeline.turns import converse  # the child runs the same stages

    await converse(rt, child)
    reply = _last_reply(child)
    parent.buffer.end(step, "completed", output={"thread_id": thread_id, "reply": reply.id if reply else None})
    return child


def _lineage(state: RunState) -> list[RunState]:
    chain: list[RunState] = []
    current: RunState | None = state
    while current is not None:
        chain.append(current)
        current = current.parent
    return chain[::-1]


def _last_reply(child: RunState) -> ChatMessage | None:
    for message in reversed(child.buffer.messages):
        if message.thread_id == child.thread_id and message.role == "assistant" and message.status == "completed":
            return message
    return None
