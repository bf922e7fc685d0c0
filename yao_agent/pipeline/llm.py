"""Stage 7, LLM: stream one model call, forwarding text, reasoning and tool-call deltas as they arrive.

The reply becomes one assistant message. If the call breaks off (an error after the first token, or
a cancel), what was shown is closed with status `incomplete` and stored so — never as a finished
reply, so it is never sent back to a model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from yao_agent.connectors import Fallback, ModelRequest, stream_call
from yao_agent.connectors.assemble import Assembled, PartialCall
from yao_agent.connectors.deltas import Delta, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.events import FallbackEvent, MessageDelta, MessageEnd, MessageStart
from yao_agent.messages import ChatMessage, ToolCall, storable_call_id
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.vocabulary import Transition


@dataclass
class LiveReply:
    """One streamed reply: its deltas folded together, and the message ids the client sees."""

    state: RunState
    new_id: Any
    thread_id: str | None = None
    got: Assembled = field(default_factory=Assembled)
    ids: dict[str, str] = field(default_factory=dict[str, str])  # "text" / "reasoning" / "call:<index>"

    async def add(self, delta: Delta) -> None:
        call = self.got.add(delta)
        if isinstance(delta, TextDelta | ReasoningDelta) and delta.text:
            kind = "text" if isinstance(delta, TextDelta) else "reasoning"
            message_id = await self._open(kind, kind)
            await self.state.emit(MessageDelta(self.state.run_id, message_id, kind, text=delta.text,
                                               thread_id=self.thread_id))  # fmt: skip
        elif isinstance(delta, ToolCallDelta) and call is not None:
            await self._call_delta(delta, call)

    async def _open(self, key: str, kind: str) -> str:
        message_id = self.ids.get(key)
        if message_id is None:
            message_id = self.ids[key] = self.new_id("msg")
            await self.state.emit(MessageStart(self.state.run_id, message_id, kind, self.thread_id))
        return message_id

    async def _call_delta(self, delta: ToolCallDelta, call: PartialCall) -> None:
        if not storable_call_id(call.id):
            # Some providers send no id (or one the store cannot hold); every call needs one to be paired,
            # and the provider only needs the id to match between our call and our result.
            call.id = self.new_id("call")
        message_id = await self._open(f"call:{delta.index}", "tool_call")
        await self.state.emit(MessageDelta(
            self.state.run_id, message_id, "tool_call", tool_call_id=call.id, name=delta.name,
            arguments=delta.arguments, thread_id=self.thread_id))  # fmt: skip

    async def close(self, status: Literal["completed", "incomplete"]) -> ChatMessage:
        """End every message the client saw and build the stored assistant message."""
        got, run_id = self.got, self.state.run_id
        if "reasoning" in self.ids:
            await self.state.emit(MessageEnd(run_id, self.ids["reasoning"], "reasoning", got.reasoning_text, status,
                                             self.thread_id))  # fmt: skip
        if "text" in self.ids:
            await self.state.emit(MessageEnd(run_id, self.ids["text"], "text", got.content, status, self.thread_id))
        calls = tuple(ToolCall.written(c.id, c.name, c.arguments) for c in got.tool_calls)
        for index, call in zip(sorted(got.calls), calls, strict=True):
            await self.state.emit(MessageEnd(run_id, self.ids[f"call:{index}"], "tool_call", call.to_dict(), status,
                                             self.thread_id))  # fmt: skip
        return ChatMessage(
            id=self.ids.get("text") or self.new_id("msg"), role="assistant", content=got.content or None,
            run_id=run_id, tool_calls=calls if status == "completed" else (), reasoning=got.reasoning_text or None,
            status=status, thread_id=self.thread_id, created_at=0.0,
        )  # fmt: skip


async def call(
    rt: Runtime,
    state: RunState,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    options: dict[str, Any] | None = None,
    why: Transition = "first",
) -> ChatMessage:
    """One model call: streamed to the client, stored in the buffer, recorded as an `llm` step with the
    transition that asked for it (`why`)."""
    request = ModelRequest(messages=list(messages), tools=list(tools), options=options or {})
    step = state.buffer.begin(
        "llm",
        {
            "messages": request.messages,
            "tools": list(request.tools),
            "options": dict(request.options),
            "connectors": [c.id for c in state.chain],
        },
        state.thread_id,
    )
    step.transition = why
    reply = LiveReply(state, rt.ids.new, state.thread_id)
    state.turns += 1
    answering = state.chain[0] if state.chain else None
    try:
        async for event in stream_call(state.chain, request, engines=rt.engines, policy=rt.retry, sleep=rt.sleep,
                                       environ=rt.environ, cooldowns=rt.cooldowns):  # fmt: skip
            if isinstance(event, Fallback):
                answering = next((c for c in state.chain if c.id == event.to_connector), answering)
                await state.emit(FallbackEvent(state.run_id, event.from_connector, event.to_connector, event.reason))
            else:
                await reply.add(event)
    except BaseException as exc:  # whatever stopped it, what the client saw is kept (as incomplete)
        await _keep_partial(rt, state, reply)
        cancelled = isinstance(exc, asyncio.CancelledError)
        error = None if cancelled else {"message": str(exc) if isinstance(exc, ModelError) else type(exc).__name__}
        state.buffer.end(step, "cancelled" if cancelled else "failed", error=error)
        _count(state, reply.got.usage)
        raise
    message = await reply.close("completed")
    message.created_at = rt.clock()
    message.hidden = state.hidden
    state.buffer.add(message)
    _count(state, reply.got.usage)
    state.buffer.end(step, "completed", output=_made(message, reply.got, answering))
    return message


def _made(message: ChatMessage, got: Assembled, answering: ConnectorSpec | None) -> dict[str, Any]:
    """What an `llm` step keeps of its call: the reply's id and finish, and who answered with how many
    tokens (shown by GET /api/chats/{id}/runs/{run_id})."""
    made: dict[str, Any] = {"message_id": message.id, "finish": got.finish}
    if answering is not None:
        made |= {"connector": answering.id, "model": answering.model}
    if got.usage is not None:
        made["usage"] = got.usage.as_dict()
    return made


async def _keep_partial(rt: Runtime, state: RunState, reply: LiveReply) -> None:
    if not reply.ids:
        return  # nothing reached the client
    message = await reply.close("incomplete")
    message.created_at = rt.clock()
    message.hidden = state.hidden
    state.buffer.add(message)


def _count(state: RunState, usage: Usage | None) -> None:
    if usage is not None:
        root = state.root  # a child's tokens are the run's tokens
        root.usage = root.usage + usage
