"""A model call a run makes aside from its conversation — a compaction's summary, the search step's intent
check: recorded as an `llm` step without a transition (it answers no turn, and does not count against
`limits.max_turns`), held to the run's budgets like every call, its tokens counted in the run's usage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.connectors import FailedTry, Fallback, ModelRequest, stream_call
from yao_agent.connectors.assemble import Assembled
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.events import FallbackEvent
from yao_agent.metering.usage import call_usage
from yao_agent.pipeline import quota, trail
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.step_inputs import ModelCall


async def call(
    rt: Runtime, state: RunState, chain: Sequence[ConnectorSpec], request: ModelRequest, said: Mapping[str, Any]
) -> tuple[str, str]:
    """One model call aside from the conversation, recorded as an `llm` step with `said` in its output;
    nothing of it is streamed. Its text, and the id of the connector that answered."""
    given = ModelCall(request.messages, request.options.to_json(), tuple(c.id for c in chain))
    step = state.buffer.begin("llm", given, state.thread_id)
    held = await quota.before_call(rt, state, step, request, chain)  # a budget reached: the run ends so
    got, hops = Assembled(), list[dict[str, str]]()  # hops: the links passed (metrics count them)
    answering = chain[0] if chain else None
    try:
        async for event in stream_call(chain, request, engines=rt.engines, policy=rt.retry, sleep=rt.sleep,
                                       environ=rt.environ, cooldowns=rt.cooldowns):  # fmt: skip
            if isinstance(event, FailedTry):  # kept as a step of its own: where the time went
                step = trail.failed_try(state.buffer, step, event, chain)
            elif isinstance(event, Fallback):
                answering = next((c for c in chain if c.id == event.to_connector), answering)
                hops.append({"from": event.from_connector, "to": event.to_connector, "reason": event.reason})
                await state.emit(FallbackEvent(state.run_id, event.from_connector, event.to_connector, event.reason))
            else:
                got.add(event)
    except BaseException as exc:
        cancelled = isinstance(exc, asyncio.CancelledError)
        error = None if cancelled else {"message": str(exc) if isinstance(exc, ModelError) else type(exc).__name__}
        used = call_usage(got.usage, answering) or trail.cut_usage(got, request, answering)
        spent = {"connector": answering.id, "model": answering.model, "assistant": state.assistant.id,
                 "usage": used} if used is not None and answering is not None else {}  # fmt: skip
        spent |= {"fallbacks": hops} if hops else {}
        state.buffer.end(step, "cancelled" if cancelled else "failed", error=error, output=spent or None)
        state.root.usage.add(used)
        await quota.after_call(rt, state, held, step)
        raise
    made: dict[str, Any] = {**said, "finish": got.finish}
    made |= {"fallbacks": hops} if hops else {}
    used = call_usage(got.usage, answering)
    if answering is not None:
        made |= {"connector": answering.id, "model": answering.model, "assistant": state.assistant.id}
        made |= {"usage": used} if used is not None else {}
    state.root.usage.add(used)  # its tokens are the run's
    state.buffer.end(step, "completed", output=made)
    await quota.after_call(rt, state, held, step)
    return got.content, answering.id if answering is not None else ""
