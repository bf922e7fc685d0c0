"""Stage 3, the buffer: a run's messages and steps, held in memory and written once, at the end.

The step journal (pipeline/journal.py) commits each step as it completes; the buffer remembers what
was committed (`committed`), so the flush writes only the rest (`pending`).

The flush happens in the pipeline's `finally` — on success, error, cancellation or any unexpected
exception — and it finishes even if the task is cancelled again while it writes. A step keeps its
input only if it did not complete (that input is what a resume runs again), or if it asks to: a hook
step records what the hook was given.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from yao_agent.messages import ChatMessage
from yao_agent.store.records import StepRecord
from yao_agent.store.step_inputs import StepInput
from yao_agent.vocabulary import StepStatus, StepType, ToolCallOutcome

log = logging.getLogger("yao_agent.run")


@dataclass
class Buffer:
    run_id: str
    new_id: Callable[[str], str]
    clock: Callable[[], float]
    messages: list[ChatMessage] = field(default_factory=list[ChatMessage])
    steps: list[StepRecord] = field(default_factory=list[StepRecord])
    committed: set[str] = field(default_factory=set[str])  # ids of the messages and steps the journal wrote
    journal_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # the journal's commits, one at a time
    journal_broken: bool = False  # a commit failed: the rest waits for the flush, in order
    carried: Any = None  # the run's carry as last committed (pipeline/carry.py): written again only if changed
    # Tool calls answered without running (a stand-in result, a denial), by call id: what they are,
    # which their result's text alone does not say reliably (metrics count them so).
    unrun: dict[str, ToolCallOutcome] = field(default_factory=dict[str, ToolCallOutcome])

    def add(self, message: ChatMessage) -> ChatMessage:
        self.messages.append(message)
        return message

    def begin(self, kind: StepType, given: StepInput | None = None, thread_id: str | None = None) -> StepRecord:
        step = StepRecord(
            id=self.new_id("step"), run_id=self.run_id, seq=len(self.steps) + 1, type=kind, status="running",
            started_at=self.clock(), thread_id=thread_id, input=given,
        )  # fmt: skip
        self.steps.append(step)
        return step

    def end(
        self, step: StepRecord, status: StepStatus, *, output: Any = None, error: Any = None, keep_input: bool = False
    ) -> None:
        """`keep_input`: the step's input is part of its record (a hook's), not only what a resume needs."""
        step.status = status
        step.output = output
        step.error = error
        step.ended_at = self.clock()
        if status == "completed" and not keep_input:
            step.input = None  # nothing will run it again

    def recovered(self, step: StepRecord) -> None:
        """A failed step the run went on past (a tool call the model was asked to correct, a hook failure
        that `on_error: ignore` lets by): kept in the record with its error, never where a resume starts."""
        step.status = "recovered"

    def drop(self, step: StepRecord) -> None:
        """Forget a step that turned out not to happen (a hook file without that function)."""
        self.steps.remove(step)

    def pending(self) -> tuple[list[ChatMessage], list[StepRecord]]:
        """The messages and steps the journal has not committed: what the flush writes."""
        done = self.committed
        return [m for m in self.messages if m.id not in done], [s for s in self.steps if s.id not in done]

    def mark(self, messages: list[ChatMessage], steps: list[StepRecord]) -> None:
        self.committed.update(m.id for m in messages)
        self.committed.update(s.id for s in steps)

    def settle(self, status: StepStatus, error: Any) -> None:
        """At the end of a run that did not complete, steps still running end with the run."""
        for step in self.steps:
            if step.status == "running":
                self.end(step, status, error=error)
