"""Stages 6–9 of one run (or child run): the Create hook, then model turns until nothing asks for more.

    Create hook → [ LLM → tools (with retries) → Next hook | tool loop | standard ] → ... → done

Every model call counts against `limits.max_turns`; repeated identical tool calls stop the run
(`loop_detected`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.pipeline import delegate, guards, hook_create, llm, next_hook, prompts, tool_round
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord

LAST_WORD = (
    "You have used the tools as many times as this assistant allows. Do not call tools now: answer the "
    "user from the tool results gathered so far, and say what is still missing, if anything."
)


async def converse(rt: Runtime, state: RunState, resume_at: StepRecord | None = None) -> None:
    """The stages; a resumed run (or a child of one, at `resume_at`) starts at the step it stopped at."""
    step = delegate.resume_target(state.request.resume) if state.parent is None else resume_at
    if step is not None and step.thread_id != state.thread_id:
        await delegate.resume_child(rt, state, step)  # it stopped inside a child: only that child resumes
        return
    if step is not None and step.type in ("hook_next", "tool") and step.input is not None:
        if not await _resume_step(rt, state, step.type, step.input):
            return
    else:
        handed_to = await hook_create.run(rt, state)  # 6. Create hook
        if handed_to is not None:
            await delegate.hand_over(rt, state, handed_to)  # the child answers instead of our model
            return
    while True:
        reply = await model_turn(rt, state)  # 7. LLM
        done = await tool_round.run(rt, state, reply, model_turn) if reply.tool_calls else None  # 8. tools
        if done is not None and done.answered_in_text and not _appended(state):
            return  # asked to fix a tool call, the model answered instead: that answer ends the run
        final, results = (done.reply, done.results) if done is not None else (reply, [])  # after any retry
        more = await after_reply(rt, state, final, results)  # 9. Next hook / tool loop / standard
        if not more and not _appended(state):
            return  # (a message appended while the model spoke gets its answer before the run ends)


async def model_turn(
    rt: Runtime, state: RunState, extra: Sequence[dict[str, Any]] = (), *, with_tools: bool = True
) -> ChatMessage:
    guards.before_model_call(state, rt.app.config.limits.max_turns)
    fold_appended(rt, state)
    offer = await tool_round.offered(rt, state)
    tools = [t.to_openai() for t in offer.tools] if with_tools else []
    notes = tool_round.unavailable_note(offer)
    messages = [*prompts.system_messages(rt, state), *notes, *state.conversation, *extra]
    reply = await llm.call(rt, state, messages, tools, options=prompts.call_options(state))
    state.conversation.append(reply.to_provider())
    return reply


def _appended(state: RunState) -> bool:
    return state.parent is None and bool(state.appended)


def fold_appended(rt: Runtime, state: RunState) -> None:
    """Messages appended to the chat while this run was busy join its next model call, in order."""
    if state.parent is not None or not state.appended:
        return
    waiting, state.appended = state.appended, []
    for message in waiting:
        stored = ChatMessage(id=rt.ids.new("msg"), role="user", content=message["content"], run_id=state.run_id,
                             created_at=rt.clock())  # fmt: skip
        state.buffer.add(stored)
        state.conversation.append(stored.to_provider())


async def after_reply(rt: Runtime, state: RunState, reply: ChatMessage, results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the model should speak again: a Next hook's answer decides; without one (or when it
    returns null or only `data`), the tool loop does."""
    guards.check_loop(state)
    _, answer = await next_hook.decide(rt, state, next_hook.arguments(state, reply, results))
    decided = await _follow_next(rt, state, answer)
    return decided if decided is not None else await _tool_loop(rt, state, results)


async def _tool_loop(rt: Runtime, state: RunState, results: Sequence[Mapping[str, Any]]) -> bool:
    if not results or not state.assistant.mcp.tool_loop:
        return False
    if state.tool_turns < state.assistant.mcp.max_turns:
        state.tool_turns += 1
        return True  # feed the results back: the model answers, or calls more tools
    await model_turn(rt, state, [{"role": "system", "content": LAST_WORD}], with_tools=False)
    return False


async def _follow_next(rt: Runtime, state: RunState, answer: Mapping[str, Any] | None) -> bool | None:
    """What a Next hook's answer decides: True, speak again; False, the run ends; None, it left it to the
    tool loop (null, or only `data`: a hook that only observes never changes what the run does)."""
    if answer is None:
        return None
    if answer.get("data") is not None:
        state.next = answer["data"]
    if answer.get("stop"):
        return False  # ended on purpose, also with tool results waiting for an answer
    target = answer.get("delegate")
    if isinstance(target, Mapping):
        await delegate.hand_over(rt, state, target)  # pyright: ignore[reportUnknownArgumentType]
        return False
    more: Sequence[dict[str, Any]] | None = answer.get("continue")
    if more is not None:
        state.conversation.extend(more)
        return True
    return None


async def _resume_step(rt: Runtime, state: RunState, kind: str, given: Any) -> bool:
    """Run the step a run stopped at again, with what it was given; whether the model speaks next."""
    if kind == "hook_next":  # a Next hook failed after the model replied: only the hook runs again
        payload, _ = given["args"]
        _, answer = await next_hook.decide(rt, state, given["args"])
        decided = await _follow_next(rt, state, answer)
        return decided if decided is not None else await _tool_loop(rt, state, payload.get("tools") or [])
    # The calls run again; each new result takes the place of the one stored for it when the run stopped.
    calls = tuple(ToolCall.written(c["id"], c["name"], c["arguments"]) for c in given["calls"])
    ids = {c.id for c in calls}
    stored = {m.tool_call_id: m.id for m in state.root.history if m.role == "tool" and m.tool_call_id in ids}
    state.conversation = [m for m in state.conversation if not (m["role"] == "tool" and m.get("tool_call_id") in ids)]
    reply = ChatMessage(rt.ids.new("msg"), "assistant", None, run_id=state.run_id, tool_calls=calls)
    done = await tool_round.run(rt, state, reply, model_turn, replacing=stored)
    return not done.answered_in_text and await after_reply(rt, state, done.reply, done.results)
