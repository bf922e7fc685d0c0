"""Stage 4, connector: resolve the assistant's (or the Create hook's) connector for this caller."""

from __future__ import annotations

from yao_agent.connectors import resolve_connectors
from yao_agent.connectors.capabilities import has_images
from yao_agent.errors import ModelError
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def resolve(rt: Runtime, state: RunState) -> None:
    chosen = state.options.connector  # by the Create hook: never resolved from the environment
    ref = chosen or state.assistant.connector
    found = await resolve_connectors(str(ref), rt.app, state.identity, rt.store, rt.environ, from_app=not chosen)
    state.chain = found.connectors
    refuse_unreadable(state)


def refuse_unreadable(state: RunState) -> None:
    """Images for a chain that cannot read them fail the run here, before its input is stored; stored
    hidden, the input cannot make every later turn of the chat fail the same way."""
    if not has_images(state.input) or any(c.capabilities.vision and not c.local for c in state.chain):
        return
    state.input_unreadable = True
    first = state.chain[0].id
    why = f"connector {first} cannot read images (its capabilities.vision is false)"  # as stream_call says it
    raise ModelError(why, kind="bad_request", connector=first)
