"""The model's context window as a run sees it: its budget, its tokenizer, and the lightest way to keep a
request inside it — tool results cut for the model (CONTRACT §4 item 5, step 1).

The budget is `max_input_tokens - reserve_output_tokens` (the assistant's `context`; the window
defaults to the smallest `capabilities.max_input_tokens` of the connectors that may answer, since any
link of a fallback chain may). With no window known there is no budget.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from yao_agent.dsl.specs import ConnectorSpec, ContextSettings
from yao_agent.messages import text_of
from yao_agent.metering.tokens import ESTIMATE, TokenCounter, counter_for
from yao_agent.pipeline.state import RunState

CUT_NOTE = "[… cut: showed {shown} of {total} tokens; the full result is stored]"


@dataclass(frozen=True, slots=True)
class Window:
    settings: ContextSettings
    counter: TokenCounter
    size: int | None  # max_input_tokens; None: not known
    budget: int | None  # what a request may take: the size less the reply's reserve

    @property
    def compact_at(self) -> float | None:
        """The request size at which earlier turns are summarised."""
        return None if self.budget is None else self.settings.compact_at * self.budget


def window_of(state: RunState, chain: Sequence[ConnectorSpec] | None = None) -> Window:
    """The window of a request to `chain` (default: the run's connectors). With none known, nothing is
    counted before a provider refuses a request, and then the estimate serves: no tokenizer is loaded."""
    chain = state.chain if chain is None else chain
    settings = state.assistant.context
    known = [c.capabilities.max_input_tokens for c in chain if c.capabilities.max_input_tokens is not None]
    size = settings.max_input_tokens or (min(known) if known else None)
    if size is None:
        return Window(settings, ESTIMATE, None, None)
    return Window(settings, counter_for(c.model for c in chain), size, size - settings.reserve_output_tokens)


def cut_results(messages: Sequence[dict[str, Any]], counter: TokenCounter, limit: int) -> list[dict[str, Any]]:
    """The messages with each tool result over `limit` tokens cut to its head and a note saying so. Only
    the request is changed: the stored result stays whole."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            text = text_of(message.get("content"))
            if counter.text(text) > limit:
                message = {**message, "content": cut_text(counter, text, limit)}
        out.append(message)
    return out


@functools.lru_cache(maxsize=512)  # the same results are cut again for every later call of a run
def cut_text(counter: TokenCounter, text: str, limit: int) -> str:
    """`text` in at most about `limit` tokens: its head, then CUT_NOTE."""
    total = counter.text(text)
    room = max(limit - counter.text(CUT_NOTE.format(shown=limit, total=total)) - 1, 0)
    head = counter.head(text, room)
    return f"{head}\n{CUT_NOTE.format(shown=counter.text(head), total=total)}"
