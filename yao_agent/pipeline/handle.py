"""A run in flight: its task, its events, and the way to cancel it.

`Runs.start` (yao_agent/service/runs.py) makes handles, its `Process` keeps the live ones; a handle knows only its run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from yao_agent.base.aio import finish_despite_cancel
from yao_agent.events import Event
from yao_agent.pipeline.close import stream_end
from yao_agent.pipeline.state import RunState
from yao_agent.vocabulary import EndStatus, TerminalReason

if TYPE_CHECKING:
    from yao_agent.shapes import ApprovalOut, ClientWaitOut, MessageOut, RunOut, UsageOut


@dataclass(frozen=True)
class RunResult:
    """A finished run as the non-streaming API returns it (`to_api`): how it ended, as its `stream_end`
    says, and its new messages."""

    run_id: str
    chat_id: str
    status: EndStatus
    reason: TerminalReason
    messages: list[MessageOut]
    usage: UsageOut
    next: Any = None
    error: Any = None
    output: Any = None  # the final answer's JSON value, when the run has an output schema
    approvals: list[ApprovalOut] | None = None  # the calls waiting for a person, when the run ends `waiting`
    client_calls: list[ClientWaitOut] | None = None  # the calls waiting for the client (reason `client_tools`)

    def to_api(self) -> RunOut:
        out: RunOut = {"run_id": self.run_id, "chat_id": self.chat_id, "status": self.status, "reason": self.reason,
                       "messages": self.messages, "usage": self.usage}  # fmt: skip
        if self.next is not None:
            out["next"] = self.next
        if self.error is not None:
            out["error"] = self.error
        if self.output is not None:
            out["output"] = self.output
        if self.approvals is not None:
            out["approvals"] = self.approvals
        if self.client_calls is not None:
            out["client_calls"] = self.client_calls
        return out


class RunHandle:
    """One accepted run: read its events (once), cancel it, wait for it, then take its result."""

    def __init__(self, state: RunState, task: asyncio.Task[None]) -> None:
        self.state = state
        self.task = task

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def chat_id(self) -> str:
        return self.state.chat_id

    def cancel(self) -> None:
        """Stop the run; it ends `cancelled`, stores what it had, and still sends `stream_end`."""
        self.state.cancel_requested = True  # seen at its start if it has not started yet
        if self.state.begun and not self.task.done():
            self.task.cancel()

    async def wait(self) -> None:
        """Until the run (and its flush) is over; re-raises a bug the run hit."""
        await finish_despite_cancel(asyncio.shield(self.task))

    async def events(self) -> AsyncGenerator[Event]:
        finished = False
        try:
            async for event in self.state.out:
                yield event
            finished = True
        finally:
            await self._reader_gone(finished)

    async def batches(self) -> AsyncGenerator[list[Event]]:
        """The same events, as the lists that were waiting each time the reader came back for more."""
        finished = False
        try:
            async for batch in self.state.out.batches():
                yield batch
            finished = True
        finally:
            await self._reader_gone(finished)

    async def _reader_gone(self, finished: bool) -> None:
        if not finished:  # the reader left early (a closed connection, Ctrl-C): cancel the run
            self.state.out.abandon()
            self.cancel()
        await self.wait()

    def result(self) -> RunResult:
        end = stream_end(self.state)  # the run's end, built once: what its stream's last event said
        return RunResult(
            run_id=end.run_id, chat_id=self.state.run.chat_id, status=end.status, reason=end.reason,
            messages=[m.to_api() for m in self.state.new_messages], usage=end.usage, next=end.next, error=end.error,
            output=end.output, approvals=end.approvals, client_calls=end.client_calls,
        )  # fmt: skip
