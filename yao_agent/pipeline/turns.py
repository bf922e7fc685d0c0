"""Stages 7–9 as a loop: call the model; run its tool calls; let the Next hook or the tool loop decide
whether the model speaks again; otherwise the reply stands."""

from __future__ import annotations

from yao_agent.errors import ToolError
from yao_agent.pipeline import guards, llm, prompts
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def converse(rt: Runtime, state: RunState) -> None:
    guards.before_model_call(state, rt.app.config.limits.max_turns)
    messages = [*prompts.system_messages(rt, state), *state.conversation]
    reply = await llm.call(rt, state, messages, options=prompts.call_options(state))
    state.conversation.append(reply.to_provider())
    if reply.tool_calls:
        names = ", ".join(call.name for call in reply.tool_calls)
        raise ToolError(f"the model called {names}, but assistant '{state.assistant.id}' has no tools")
