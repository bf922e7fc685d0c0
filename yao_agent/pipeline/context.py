"""Stage 5's context budget, checked before every model call (CONTRACT §4 item 5), light to heavy:

1. tool results over `tool_result_max_tokens` are cut for the model, and stored whole (window.py);
2. when the request reaches `compact_at` of the budget, the turns before the last `keep_recent_turns`
   are summarised into one stored `summary` message (compact.py), and a `compaction` event says so;
3. a request that still does not fit ends the run `context_overflow`, before the call that would fail.

A provider's own context-length error (its window is smaller than it was said to be, or its tokenizer
counts more than ours) gets one harder compaction — only the last user turn kept, tool results cut to
half — and one retry (`refit`; the caller makes the call with transition `compact_retry`). When there
is nothing left to make smaller, or the retry fails alike, the run ends `context_overflow`.

Only a root run compacts: a child run's conversation is not its chat's, and a summary of it would be
taken for the chat's by the next run. With no window known (neither the assistant's `context` nor its
connector says), a request goes as it is until a provider refuses it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from yao_agent.errors import ContextOverflow, ModelError
from yao_agent.events import Compaction
from yao_agent.pipeline.compact import Compacted, compact
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.pipeline.window import Window, cut_results, window_of

Messages = list[dict[str, Any]]
log = logging.getLogger("yao_agent.run")


async def fit(rt: Runtime, state: RunState, messages: Sequence[dict[str, Any]], tools: Sequence[Any]) -> Messages:
    """The request to send for `messages` (system prompts, then `state.conversation`, then this turn's
    extra messages): made to fit the budget, or a ContextOverflow."""
    window = window_of(state)
    if window.budget is None:
        return list(messages)
    settings = window.settings
    return await _fitted(rt, state, messages, tools, window, settings.keep_recent_turns,
                         settings.tool_result_max_tokens, always=False)  # fmt: skip


async def refit(
    rt: Runtime, state: RunState, messages: Sequence[dict[str, Any]], tools: Sequence[Any], error: ModelError
) -> Messages:
    """After the provider refused `messages` (the request `fit` gave) as too long: the request made
    smaller the harder way, for one retry; `error` again when nothing could be made smaller."""
    _recovered(state)
    window = window_of(state)
    limit = max(1, window.settings.tool_result_max_tokens // 2)
    sent = await _fitted(rt, state, messages, tools, window, 1, limit, always=True)
    if sent == list(messages):
        raise error  # the same request would be refused again
    return sent


async def _fitted(rt: Runtime, state: RunState, messages: Sequence[dict[str, Any]], tools: Sequence[Any],
                  window: Window, keep: int, limit: int, *, always: bool) -> Messages:  # fmt: skip
    """Cut tool results to `limit`; compact down to `keep` turns when the request reaches `compact_at`
    (`always`: in any case); check the budget."""
    counter = window.counter
    parts = _around(messages, state.conversation)

    def whole() -> Messages:  # the request as built, with the conversation as it is now
        return [*parts[0], *state.conversation, *parts[1]] if parts is not None else list(messages)

    sent = cut_results(whole(), counter, limit)
    size = counter.request(sent, tools)
    threshold = window.compact_at
    if parts is not None and state.parent is None and (always or (threshold is not None and size >= threshold)):
        done = await _compacted(rt, state, window, keep, fits=not always and _fits(window, size))
        if done is not None:
            before = size
            sent = cut_results(whole(), counter, limit)
            size = counter.request(sent, tools)
            await state.emit(Compaction(state.run_id, done.summary.id, done.messages_summarised, before, size,
                                        done.connector))  # fmt: skip
    if not _fits(window, size):
        raise ContextOverflow(_too_large(window, size, keep, limit))
    return sent


async def _compacted(rt: Runtime, state: RunState, window: Window, keep: int, *, fits: bool) -> Compacted | None:
    """Compact; a summariser that fails while the request still fits is no reason to fail the run: it
    goes as it is (and the failed call is one the run went past)."""
    try:
        return await compact(rt, state, window, keep)
    except ModelError as exc:
        if not fits:
            raise
        log.warning("run %s: earlier turns could not be summarised, the request goes as it is: %s", state.run_id, exc)
        _recovered(state)
        return None


def _fits(window: Window, size: int) -> bool:
    return window.budget is None or size <= window.budget


def _around(
    messages: Sequence[dict[str, Any]], conversation: Sequence[dict[str, Any]]
) -> tuple[Messages, Messages] | None:
    """What comes before and after the conversation in `messages` (it is there as it is, by identity: the
    request is built of it); None if it is not there (then nothing is compacted)."""
    if not conversation:
        return None
    first = conversation[0]
    at = next((i for i, m in enumerate(messages) if m is first), None)
    if at is None or at + len(conversation) > len(messages):
        return None
    return list(messages[:at]), list(messages[at + len(conversation) :])


def _too_large(window: Window, size: int, keep: int, limit: int) -> str:
    settings = window.settings
    return (f"the request needs {size} tokens, more than the {window.budget} the model's window leaves "
            f"(max_input_tokens {window.size} - reserve_output_tokens {settings.reserve_output_tokens}), "
            f"also with the turns before the last {keep} summarised and tool results cut to "
            f"{limit} tokens")  # fmt: skip


def _recovered(state: RunState) -> None:
    """The model call the provider refused is one the run goes on past: never where a resume starts."""
    for step in reversed(state.buffer.steps):
        if step.type == "llm":
            if step.status == "failed":
                state.buffer.recovered(step)
            return
