"""Stage 4, connector: resolve the assistant's (or the Create hook's) connector for this caller."""

from __future__ import annotations

from yao_agent.connectors import resolve_connectors
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def resolve(rt: Runtime, state: RunState) -> None:
    chosen = state.options.connector  # by the Create hook: never resolved from the environment
    ref = chosen or state.assistant.connector
    found = await resolve_connectors(str(ref), rt.app, state.identity, rt.store, rt.environ, from_app=not chosen)
    state.chain = found.connectors
