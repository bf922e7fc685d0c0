"""Stage 5, history: the chat's last messages, the input's overlap with them dropped, the rest stored.

Clients often resend the conversation. The longest suffix of the history that equals a prefix of the
input (role and content, multimodal content by value) is dropped from the input; only the remaining
clean input is stored — before any model is called (write-ahead), so a crash never loses it. After a run
that waited for the client's own tools, the history is compared as that client has it
(`messages.as_client_saw`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from yao_agent.errors import HistoryUnavailable
from yao_agent.messages import from_provider, overlap
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import Loaded

log = logging.getLogger("yao_agent.run")
__all__ = ["load", "overlap"]


async def load(rt: Runtime, state: RunState) -> None:
    """Load history, dedupe the input against it and write the clean input ahead — in one transaction.

    The store is given the whole input and applies the dedupe (`messages.overlap`) to the history it
    reads in that transaction. If the history cannot be read, the run goes on without it (a warning is
    logged) and the input is written ahead alone.
    """
    now = rt.clock()
    given = [from_provider(m, rt.ids.new("msg"), state.run_id, now) for m in state.input]
    if state.input_unreadable:  # images no connector of the chain reads (connector.py): kept, never sent
        given = [replace(m, hidden=True) for m in given]
    rewind = state.ctx.request.rewind if state.ctx.parent is None else None  # (regenerate, edit: the root's)
    try:
        loaded = await rt.store.load_and_start(state.identity, state.run, rt.app.config.history_size, given, rewind)
    except HistoryUnavailable as exc:  # only the read failed, and nothing was written
        log.warning("history of chat %s could not be loaded, continuing without it: %s", state.chat_id, exc)
        await rt.store.start_run(state.identity, state.run, given, rewind)
        loaded = Loaded([], [], given)
    state.history = loaded.history
    state.summary = next((m for m in loaded.history[:1] if m.role == "summary"), None)
    state.written = loaded.written
    state.conversation = [*loaded.sent, *state.input[len(given) - len(loaded.written) :]]
    state.stored = True
