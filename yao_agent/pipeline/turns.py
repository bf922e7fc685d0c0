"""Stages 6–9 of one run (or child run): the Create hook, then model turns until nothing asks for more.

    Create hook → [ LLM → tools → Next hook / tool loop / standard ] → ... → done

Every model call counts against `limits.max_turns`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.errors import ToolError
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import delegate, guards, hook_create, llm, next_hook, prompts
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def converse(rt: Runtime, state: RunState) -> None:
    point = state.request.resume if state.parent is None else None
    if point is not None and point.steps and point.steps[0].type == "hook_next":
        # resume a Next hook that failed after the model replied: only the hook runs again
        if not await after_reply(rt, state, point.steps[0].input["args"]):
            return
    else:
        handed_to = await hook_create.run(rt, state)  # 6. Create hook
        if handed_to is not None:
            await delegate.hand_over(rt, state, handed_to)  # the child answers instead of our model
            return
    while True:
        reply = await model_turn(rt, state)  # 7. LLM
        results = await tool_round(rt, state, reply) if reply.tool_calls else []  # 8. tools
        if not await after_reply(rt, state, next_hook.arguments(state, reply, results)):  # 9. Next / loop / standard
            return


async def model_turn(rt: Runtime, state: RunState) -> ChatMessage:
    guards.before_model_call(state, rt.app.config.limits.max_turns)
    messages = [*prompts.system_messages(rt, state), *state.conversation]
    reply = await llm.call(rt, state, messages, options=prompts.call_options(state))
    state.conversation.append(reply.to_provider())
    return reply


async def tool_round(rt: Runtime, state: RunState, reply: ChatMessage) -> list[dict[str, Any]]:
    names = ", ".join(call.name for call in reply.tool_calls)
    raise ToolError(f"the model called {names}, but assistant '{state.assistant.id}' has no tools")


async def after_reply(rt: Runtime, state: RunState, given: list[Any]) -> bool:
    """Whether the model should speak again."""
    ran, answer = await next_hook.decide(rt, state, given)
    if ran:
        return await _follow_next(rt, state, answer)
    return False  # the tool loop joins here (tools issue)


async def _follow_next(rt: Runtime, state: RunState, answer: Mapping[str, Any] | None) -> bool:
    if answer is None:
        return False
    if answer.get("data") is not None:
        state.next = answer["data"]
    target = answer.get("delegate")
    if isinstance(target, Mapping):
        await delegate.hand_over(rt, state, target)  # pyright: ignore[reportUnknownArgumentType]
        return False
    more: Sequence[dict[str, Any]] | None = answer.get("continue")
    if more is not None:
        state.conversation.extend(more)
        return True
    return False
