"""Stage 4, connector: resolve the assistant's (or the Create hook's) connector for this caller."""

from __future__ import annotations

from yao_agent.connectors import RoleSettings, resolve_connectors
from yao_agent.connectors.capabilities import cannot_read_images, has_images
from yao_agent.errors import ModelError
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


async def resolve(rt: Runtime, state: RunState) -> None:
    chosen = state.options.connector  # by the Create hook: never resolved from the environment
    ref = chosen or state.assistant.connector
    found = await resolve_connectors(str(ref), rt.app, state.identity, settings(rt, state), rt.environ,
                                     from_app=not chosen)  # fmt: skip
    state.chain = found.connectors
    refuse_unreadable(state)


def settings(rt: Runtime, state: RunState) -> RoleSettings:
    """Where the run's role lookups go: the settings read with its stage-1 checks, else the store."""
    return state.root.roles or rt.store


def refuse_unreadable(state: RunState) -> None:
    """Images for a chain that cannot read them fail the run here, before its input is stored; stored
    hidden, the input cannot make every later turn of the chat fail the same way."""
    if not has_images(state.input) or any(c.capabilities.vision and not c.local for c in state.chain):
        return
    state.input_unreadable = True
    first = state.chain[0]
    raise ModelError(cannot_read_images(first), kind="bad_request", connector=first.id)
