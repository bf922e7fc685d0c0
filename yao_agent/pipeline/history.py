"""Stage 5, history: the chat's last messages, the input's overlap with them dropped, the rest stored.

Clients often resend the conversation. The longest suffix of the history that equals a prefix of the
input (role and content, multimodal content by value) is dropped from the input; only the remaining
clean input is stored — before any model is called (write-ahead), so a crash never loses it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.errors import HistoryUnavailable
from yao_agent.messages import ChatMessage, canonical, from_provider, provider_messages
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState

log = logging.getLogger("yao_agent.run")


def overlap(history: Sequence[Mapping[str, Any]], given: Sequence[Mapping[str, Any]]) -> int:
    """How many leading input messages repeat the end of the history."""
    tail = [canonical(m) for m in history[-len(given) :]] if given else []
    head = [canonical(m) for m in given]
    for size in range(min(len(tail), len(head)), 0, -1):
        if tail[-size:] == head[:size]:
            return size
    return 0


async def load(rt: Runtime, state: RunState) -> None:
    """Load history, dedupe the input against it and write the clean input ahead — in one transaction.

    If the history cannot be read, the run goes on without it (a warning is logged) and the input is
    written ahead alone.
    """
    now = rt.clock()

    def clean(past: list[ChatMessage]) -> list[ChatMessage]:
        state.history = past
        known = provider_messages(past)
        fresh = state.input[overlap(known, state.input) :]
        state.written = [from_provider(m, rt.ids.new("msg"), state.run_id, now) for m in fresh]
        state.conversation = [*known, *fresh]
        return state.written

    try:
        await rt.store.load_and_start(state.identity, state.run, rt.app.config.history_size, clean)
    except HistoryUnavailable as exc:  # only the read failed, and nothing was written
        log.warning("history of chat %s could not be loaded, continuing without it: %s", state.chat_id, exc)
        await rt.store.start_run(state.identity, state.run, clean([]))
    state.stored = True
