"""Stage 7, LLM: stream one model reply, forwarding text, reasoning and tool-call deltas as they arrive.

The reply becomes one assistant message. If the call breaks off (an error after the first token, or
a cancel), what was shown is closed with status `incomplete` and stored so — never as a finished
reply, so it is never sent back to a model.

A reply the provider ends with `finish_reason: length` (its output limit) is continued: the model is
sent the conversation, what it said so far (as an assistant message) and a short request to go on
exactly where it stopped, at most `limits.max_output_continuations` times. Each continuation is an
`llm` step of its own (transition `output_recovery`) and counts against `limits.max_turns`; when no
turn or continuation is left, the reply stands as it is. The pieces stream as one message per kind
(same message ids) and are stored as one assistant message.

A tool call the limit cut off cannot be finished reliably (a provider does not continue inside a
call's arguments): it is dropped — ended `incomplete` for the client, never stored or run. Calls made
whole before it stand, and the reply ends with them (an assistant message with calls cannot be
continued before their results). Without any, the continuation asks the model to make the call again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.connectors import CallOptions, FailedTry, Fallback, ModelRequest, stream_call
from yao_agent.connectors.assemble import Assembled, PartialCall
from yao_agent.connectors.deltas import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.request import NO_OPTIONS
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import GuardrailBlocked, ModelError, OverBudget
from yao_agent.events import FallbackEvent, MessageDelta, MessageEnd, MessageStart
from yao_agent.messages import ChatMessage, ToolCall, is_json_object, storable_call_id, text_of
from yao_agent.metering.usage import call_usage
from yao_agent.pipeline import guard, journal, quota, search, trail
from yao_agent.pipeline.guard import OutputGuard
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord
from yao_agent.store.step_inputs import ModelCall
from yao_agent.vocabulary import Transition

_GO_ON = (  # what both continuations ask after saying why the reply was cut
    " Continue exactly where you stopped, without repeating anything: what you write next is appended to your"
    " reply as it is."
)
CONTINUE_PROMPT = "Your reply was cut off by the output limit." + _GO_ON
CUT_CALL_NOTE = " The tool call you were writing was cut off and discarded: make that call again, in full."
# A resume of a run whose reply broke off (cancelled, dropped, failed) asks the same way (pipeline/cut.py).
RESUME_PROMPT = "Your reply was cut off before it was finished." + _GO_ON


@dataclass
class LiveReply:
    """One streamed reply — all its pieces, when the output limit cut it and it was continued: their
    deltas folded together, and the message ids the client sees."""

    state: RunState
    new_id: Any
    thread_id: str | None = None
    got: Assembled = field(default_factory=Assembled)  # every piece so far
    piece: Assembled = field(default_factory=Assembled)  # the current piece's finish and usage
    ids: dict[str, str] = field(default_factory=dict[str, str])  # "text" / "reasoning" / "call:<index>"
    own_id: str | None = None  # the stored message's id, once a step has named it
    guard: OutputGuard | None = None  # the output guardrails: what is sent and kept of the text (guard.py)
    # A resumed reply that goes on from a cut one (pipeline/cut.py): that one's id and text. The client has
    # shown the text already, so only what follows it is sent; the stored message and `message_end` have both.
    continues: str | None = None
    prefix: str = ""

    async def add(self, delta: Delta) -> None:
        call = self.got.add(delta)
        if isinstance(delta, Finish | Usage):
            self.piece.add(delta)
        if isinstance(delta, TextDelta | ReasoningDelta) and delta.text:
            kind = "text" if isinstance(delta, TextDelta) else "reasoning"
            if self.guard is None:
                await self._text(kind, delta.text)
            else:
                for shown, text in await self.guard.feed(kind, delta.text):
                    await self._text(shown, text)
        elif isinstance(delta, ToolCallDelta) and call is not None:
            await self._call_delta(delta, call)

    async def _text(self, kind: str, text: str) -> None:
        message_id = self.ids.get(kind) or await self._open(kind, kind)  # (most deltas: already open)
        await self.state.emit(MessageDelta(self.state.run_id, message_id, kind, text=text, thread_id=self.thread_id))

    async def _guarded(self, complete: bool) -> tuple[str, str]:
        """The text and reasoning as sent and kept: what the guard still held goes out first (or, for an
        answer cut short, is dropped)."""
        if self.guard is None:
            return self.got.content, self.got.reasoning_text
        for kind in ("reasoning", "text"):
            rest = await self.guard.finish(kind, complete)
            if rest:
                await self._text(kind, rest)
        await self.guard.report()
        return self.guard.shown("text"), self.guard.shown("reasoning")

    def message_id(self) -> str:
        """The stored message's id: the text message's, so the client and the store agree. Fixed once
        asked for, since each piece's step names it."""
        if self.own_id is None:
            fresh: str = self.ids.get("text") or self.new_id("msg")
            self.own_id = fresh
            return fresh
        return self.own_id

    def next_piece(self) -> None:
        self.piece = Assembled()

    async def _open(self, key: str, kind: str) -> str:
        message_id = self.ids.get(key)
        if message_id is None:
            # Text first seen in a continuation takes the id an earlier piece's step already named.
            fresh = self.own_id if key == "text" and self.own_id is not None else self.new_id("msg")
            message_id = self.ids[key] = fresh
            continues = self.continues if key == "text" else None
            await self.state.emit(MessageStart(self.state.run_id, message_id, kind, self.thread_id, continues))
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

    async def drop_cut_call(self) -> bool:
        """Drop the tool call the output limit cut off, if this piece ended so inside one; True if it did.

        Providers write a reply's calls one after another, so only the last can be cut; it is cut when its
        arguments are not (yet) a whole JSON object. Its stream message ends `incomplete`."""
        if self.piece.finish != "length" or not self.got.calls:
            return False
        index = max(self.got.calls)
        cut = self.got.calls[index]
        if is_json_object(cut.arguments):
            return False  # the limit struck just after the call was whole: it stands
        del self.got.calls[index]
        written = ToolCall.written(cut.id, cut.name, cut.arguments).to_dict()
        await self.state.emit(MessageEnd(self.state.run_id, self.ids.pop(f"call:{index}"), "tool_call", written,
                                         "incomplete", self.thread_id))  # fmt: skip
        return True

    async def close(self, status: Literal["completed", "incomplete"]) -> ChatMessage:
        """End every message the client saw and build the stored assistant message."""
        got, run_id = self.got, self.state.run_id
        content, reasoning = await self._guarded(status == "completed")
        if self.continues is not None and status == "completed" and "text" not in self.ids:
            await self._open("text", "text")  # nothing new was said: the cut reply is whole as it is, and says so
        continues = self.continues if "text" in self.ids else None
        content = self.prefix + content if continues is not None else content
        if "reasoning" in self.ids:
            await self.state.emit(MessageEnd(run_id, self.ids["reasoning"], "reasoning", reasoning, status,
                                             self.thread_id))  # fmt: skip
        if "text" in self.ids:
            await self.state.emit(MessageEnd(run_id, self.ids["text"], "text", content, status, self.thread_id))
        calls = tuple(ToolCall.written(c.id, c.name, c.arguments) for c in got.tool_calls)
        for index, call in zip(sorted(got.calls), calls, strict=True):
            await self.state.emit(MessageEnd(run_id, self.ids[f"call:{index}"], "tool_call", call.to_dict(), status,
                                             self.thread_id))  # fmt: skip
        return ChatMessage(
            id=self.message_id(), role="assistant", content=content or None,
            run_id=run_id, tool_calls=calls if status == "completed" else (), reasoning=reasoning or None,
            status=status, thread_id=self.thread_id, created_at=0.0, continues=continues,
        )  # fmt: skip


async def call(
    rt: Runtime,
    state: RunState,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    options: CallOptions = NO_OPTIONS,
    why: Transition = "first",
    continues: ChatMessage | None = None,
) -> ChatMessage:
    """One model reply: streamed to the client and stored in the buffer, each model call it took recorded
    as an `llm` step with the transition that asked for it (`why`, then `output_recovery`). `continues`: the
    cut reply this one goes on from (a resume's: `messages` end with it and RESUME_PROMPT, pipeline/cut.py)."""
    request = ModelRequest(messages=list(messages), tools=list(tools), options=options)
    reply = LiveReply(state, rt.ids.new, state.thread_id, guard=guard.OutputGuard.of(rt, state))
    if continues is not None:
        reply.continues, reply.prefix = continues.id, text_of(continues.content)
    made = [await _piece(rt, state, request, reply, why)]
    dropped = await reply.drop_cut_call()
    for _ in range(rt.app.config.limits.max_output_continuations):
        if not _continues(rt, state, reply):
            break
        reply.next_piece()
        made.append(await _piece(rt, state, _continuation(request, reply, dropped), reply, "output_recovery"))
        dropped = await reply.drop_cut_call()
    try:
        message = await reply.close("completed")
    except GuardrailBlocked:  # the rest of the answer was blocked: what was sent before it stands, cut
        await _keep_partial(rt, state, reply)
        raise
    message.created_at = rt.clock()
    message.hidden = state.hidden
    answered = as_mapping(made[-1].output)  # who answered its last piece: the message's author
    message.connector, message.model = answered.get("connector"), answered.get("model")
    message.cited = search.cite(state, text_of(message.content)) if message.content else None
    state.buffer.add(message)
    # The step journal: never requested again (the tries it went past go with it).
    await journal.commit(rt, state, [message], [*trail.pending_tries(state.buffer), *made])
    return message


def _continues(rt: Runtime, state: RunState, reply: LiveReply) -> bool:
    """Whether the reply is continued: the limit cut it, no tool call of it stands (an assistant message
    with calls is not continued before their results), and the run has a model call left — a
    continuation is one, and past `max_turns` the cut reply is still an answer, so it stands rather
    than the run failing."""
    return reply.piece.finish == "length" and not reply.got.calls and state.turns < rt.app.config.limits.max_turns


def _continuation(request: ModelRequest, reply: LiveReply, dropped: bool) -> ModelRequest:
    """The request that continues a cut reply: the same conversation, what was said so far, and a user
    message asking to go on (a user turn after an assistant one is what every OpenAI-compatible server
    and chat template accepts; a system message mid-conversation is not)."""
    said = reply.got.content
    partial = [{"role": "assistant", "content": said}] if said else []  # some providers refuse an empty one
    ask = {"role": "user", "content": CONTINUE_PROMPT + (CUT_CALL_NOTE if dropped else "")}
    # A structured-output constraint would make the model start a new JSON value, not finish this one;
    # the whole reply is still what gets validated.
    options = request.options.without("response_format")
    return ModelRequest(messages=[*request.messages, *partial, ask], tools=request.tools, options=options)


async def _piece(rt: Runtime, state: RunState, request: ModelRequest, reply: LiveReply, why: Transition) -> StepRecord:
    """One model call of the reply, streamed into it and recorded as an `llm` step (and each try it went
    past as one of its own: pipeline/trail.py)."""
    given = ModelCall(request.messages, request.options.to_json(), tuple(c.id for c in state.chain), request.tools)
    step = state.buffer.begin("llm", given, state.thread_id)
    step.transition = why
    try:
        held = await quota.before_call(rt, state, step, request)
    except OverBudget:  # the call is not made and the run ends budget_exceeded: what was said stands, cut
        cut = _fragment(reply, await _keep_partial(rt, state, reply))
        step.output = {"fragment": cut} if cut is not None else step.output
        raise
    state.turns += 1
    answering = state.chain[0] if state.chain else None
    asked, first_token = rt.monotonic(), None
    since = (len(reply.got.text), len(reply.got.reasoning))  # what earlier pieces said
    hops: list[dict[str, str]] = []  # the fallbacks this call took: the step keeps them (metrics count them)
    try:
        async for event in stream_call(state.chain, request, engines=rt.engines, policy=rt.retry, sleep=rt.sleep,
                                       environ=rt.environ, cooldowns=rt.cooldowns):  # fmt: skip
            if isinstance(event, FailedTry):
                step = trail.failed_try(state.buffer, step, event, state.chain)
            elif isinstance(event, Fallback):
                answering = next((c for c in state.chain if c.id == event.to_connector), answering)
                hops.append({"from": event.from_connector, "to": event.to_connector, "reason": event.reason})
                await state.emit(FallbackEvent(state.run_id, event.from_connector, event.to_connector, event.reason))
            else:
                if first_token is None:
                    first_token = rt.monotonic()  # time to first token: what a person waits before text moves
                await reply.add(event)
    except BaseException as exc:  # whatever stopped it, what the client saw is kept (as incomplete)
        kept = await _keep_partial(rt, state, reply)
        cancelled = isinstance(exc, asyncio.CancelledError)
        error = None if cancelled else {"message": str(exc) if isinstance(exc, ModelError) else type(exc).__name__}
        # Cut off mid-reply, a provider rarely sent its usage (it comes last): what was sent and said is counted.
        used = call_usage(reply.piece.usage, answering) or trail.cut_usage(reply.got, request, answering, since)
        spent = _broke_off(state, answering, used, hops, _fragment(reply, kept))
        state.buffer.end(step, "cancelled" if cancelled else "failed", error=error, output=spent)
        state.root.usage.add(used)  # a child's calls are the run's calls
        await quota.after_call(rt, state, held, step)
        raise
    made = _made(state, reply, answering)
    if first_token is not None:
        made["first_token_ms"] = round((first_token - asked) * 1000, 1)
    if hops:
        made["fallbacks"] = hops
    state.root.usage.add(made.get("usage"))
    state.buffer.end(step, "completed", output=made)
    await quota.after_call(rt, state, held, step)
    return step


def _made(state: RunState, reply: LiveReply, answering: ConnectorSpec | None) -> dict[str, Any]:
    """What an `llm` step keeps of its call: the reply's id and this call's finish, and who answered with
    how many tokens at what cost (shown by GET /api/chats/{id}/runs/{run_id}; the usage ledger's row)."""
    made: dict[str, Any] = {"message_id": reply.message_id(), "finish": reply.piece.finish}
    return made | (_spent(state, answering, call_usage(reply.piece.usage, answering)) or {})


def _broke_off(
    state: RunState, answering: ConnectorSpec | None, used: dict[str, Any] | None, hops: list[dict[str, str]],
    cut: str | None,
) -> dict[str, Any] | None:  # fmt: skip
    """What the step of a call that broke off keeps: the tokens it was billed, the fallbacks it took, and the
    cut text a resume of it continues (`fragment`: pipeline/cut.py)."""
    spent = _spent(state, answering, used) if used is not None else None
    spent = (spent or {}) | {"fallbacks": hops} if hops else spent
    return (spent or {}) | {"fragment": cut} if cut is not None else spent


def _spent(state: RunState, answering: ConnectorSpec | None, used: dict[str, Any] | None) -> dict[str, Any] | None:
    """Who answered for which assistant, and what the call used (a failed call's tokens are billed too)."""
    if answering is None:
        return None
    made: dict[str, Any] = {"connector": answering.id, "model": answering.model, "assistant": state.assistant.id}
    return made | ({"usage": used} if used is not None else {})


async def _keep_partial(rt: Runtime, state: RunState, reply: LiveReply) -> ChatMessage | None:
    """Store what the client saw of a reply that broke off, as incomplete; None when it saw nothing."""
    if not reply.ids:
        return None  # nothing reached the client
    message = await reply.close("incomplete")
    message.created_at = rt.clock()
    message.hidden = state.hidden
    return state.buffer.add(message)


def _fragment(reply: LiveReply, kept: ChatMessage | None) -> str | None:
    """The cut text a resume of this failed call continues (its step's `fragment`, pipeline/cut.py): the
    reply just kept when it has text and no tool call was begun (a call cannot be continued); when nothing
    new was shown, the cut reply this one was to continue, which still stands. None: asked again whole."""
    if kept is None:
        return reply.continues
    if reply.got.calls or not text_of(kept.content).strip():
        return None
    return kept.id
