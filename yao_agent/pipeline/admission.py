"""Stage 2, admission: one active run per chat; the others queue, are rejected, or interrupt it.

Every accepted request gets a sequence number. Whether it is already cancelled, must wait, or may run
is decided without yielding to the event loop (so nothing can slip in between), and its cancel
handle is registered in that same step. A cancel raises the chat's watermark to the newest sequence
number: the active run and every request accepted at or below the mark end `cancelled` (each with
its own `stream_end`); a request accepted after the cancel is untouched. The mark is forgotten when
no accepted request remains.

Across processes (PostgreSQL), a lease row in the database keeps one active run per chat, and a
cancel (or an `interrupt`) is broadcast to the other processes (see `store/leases.py`; a store one
process serves has a `LocalLease`, which holds nothing and tells nobody), stamped with
the database's clock; requests are stamped with it too when accepted, so which requests a cancel
reaches does not depend on how far apart the hosts' clocks are. A run whose
lease was lost (taken by another process after renewals failed) is cancelled here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from yao_agent.base.aio import uncancel, wait_despite_cancel
from yao_agent.errors import ChatBusy
from yao_agent.store.leases import Lease, LocalLease
from yao_agent.store.records import LeaseRelease
from yao_agent.vocabulary import OnBusy

if TYPE_CHECKING:
    from yao_agent.pipeline.state import RunState

log = logging.getLogger("yao_agent.admission")


@dataclass(eq=False)
class Ticket:
    chat_id: str
    seq: int
    accepted_at: float
    state: RunState
    cancel: Callable[[], None] = lambda: None
    cancelled: bool = False
    interrupts: bool = False  # on_busy: interrupt (the other processes are told to cancel too)
    holds_lease: bool = False  # the chat's lease is this run's (acquired, not yet let go)
    turn: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class ChatGate:
    """The requests accepted for one chat in this process, in order; the first one is active."""

    seq: int = 0
    mark: int = 0
    tickets: list[Ticket] = field(default_factory=list[Ticket])

    @property
    def active(self) -> Ticket | None:
        return self.tickets[0] if self.tickets else None


class Admission:
    def __init__(self, clock: Callable[[], float], lease: Lease | None = None) -> None:
        self.gates: dict[str, ChatGate] = {}
        self.clock = clock
        self.lease: Lease = lease if lease is not None else LocalLease(clock)

    def accept(self, state: RunState, on_busy: OnBusy) -> Ticket:
        """Take a request in: reject it, or give it a place (after cancelling the active run if asked)."""
        busy = state.chat_id in self.gates or self.lease.busy_elsewhere(state.chat_id)
        if busy and on_busy == "reject":
            raise ChatBusy(f"chat '{state.chat_id}' is busy with another run (on_busy: reject)")
        if on_busy == "interrupt":
            self.cancel(state.chat_id)
        gate = self.gates.setdefault(state.chat_id, ChatGate())  # (a gate exists while it has tickets)
        gate.seq += 1
        ticket = Ticket(state.chat_id, gate.seq, self.now(), state, interrupts=on_busy == "interrupt")
        gate.tickets.append(ticket)
        if len(gate.tickets) == 1:
            ticket.turn.set()
        return ticket

    def now(self) -> float:
        """When a request is accepted: by the clock a cancel from another process is compared with."""
        return self.lease.now()

    def cancel(self, chat_id: str, before: float | None = None) -> int:
        """Cancel the active run and every request accepted so far (or accepted before `before`)."""
        gate = self.gates.get(chat_id)
        if gate is None:
            return 0
        doomed = [t for t in gate.tickets if before is None or t.accepted_at <= before]
        if doomed:
            gate.mark = max(gate.mark, max(t.seq for t in doomed))
        for ticket in doomed:
            ticket.cancelled = True
            ticket.cancel()
        return len(doomed)

    def cancel_before(self, chat_id: str, at: float) -> int:
        """Another process cancelled the chat at `at`: what was accepted here by then is cancelled (how many)."""
        return self.cancel(chat_id, before=at)

    def lost(self, chat_id: str, run_id: str) -> None:
        """The lease of a running run is gone (another process may run on the chat): stop that run."""
        gate = self.gates.get(chat_id)
        for ticket in gate.tickets if gate is not None else []:
            if ticket.state.run_id == run_id:
                ticket.cancelled = True
                ticket.cancel()

    def is_cancelled(self, ticket: Ticket) -> bool:
        gate = self.gates.get(ticket.chat_id)
        return ticket.cancelled or (gate is not None and ticket.seq <= gate.mark)

    def finish(self, ticket: Ticket) -> None:
        gate = self.gates.get(ticket.chat_id)
        if gate is None or ticket not in gate.tickets:
            return
        gate.tickets.remove(ticket)
        if gate.tickets:
            gate.tickets[0].turn.set()
        else:
            del self.gates[ticket.chat_id]  # the watermark goes with it: nothing is left to cancel

    async def held_elsewhere(self, chat_id: str) -> bool:
        return await self.lease.held_elsewhere(chat_id)

    def active_cancelled(self, chat_id: str) -> bool:
        gate = self.gates.get(chat_id)
        return gate is not None and gate.active is not None and self.is_cancelled(gate.active)

    def active_state(self, chat_id: str) -> RunState | None:
        gate = self.gates.get(chat_id)
        return gate.active.state if gate is not None and gate.active is not None else None

    @asynccontextmanager
    async def enter(self, ticket: Ticket) -> AsyncGenerator[bool]:
        """Hold the chat for this request: yields whether it was cancelled before its turn came.

        A cancelled request still waits for its turn, so that what it stores (its input and its
        cancelled run) lands in the chat's order, never inside another run's messages. However the
        run ends — even cancelled again while it lets go — the chat is let go, so the next request
        always gets its turn.
        """
        try:
            cancelled = await self._interrupt_elsewhere(ticket)
            cancelled = await wait_despite_cancel(ticket.turn.wait()) or cancelled
            if not (cancelled or self.is_cancelled(ticket)):
                try:
                    await self.lease.acquire(ticket.chat_id, ticket.state.run_id)
                    ticket.holds_lease = True
                except asyncio.CancelledError:
                    uncancel()  # (a cancelled acquire holds nothing)
                    cancelled = True
            yield cancelled or self.is_cancelled(ticket)
        finally:
            try:
                if ticket.holds_lease:
                    await self._release(self.lease, ticket)
            finally:
                self.finish(ticket)

    def letting_go(self, ticket: Ticket) -> LeaseRelease | None:
        """The chat's lease let go in the transaction that stores the run (its flush: one transaction less
        per run), where a lease is held in the store; `let_go` once that transaction committed, else
        `enter` lets go on its own as it ends."""
        return self.lease.releasing(ticket.chat_id, ticket.state.run_id) if ticket.holds_lease else None

    @staticmethod
    def let_go(ticket: Ticket) -> None:
        ticket.holds_lease = False

    async def _interrupt_elsewhere(self, ticket: Ticket) -> bool:
        """`interrupt`: the other processes cancel what they accepted for the chat before this request."""
        if not ticket.interrupts:
            return False
        try:
            return await wait_despite_cancel(self.lease.cancel_everywhere(ticket.chat_id, ticket.accepted_at))
        except Exception:
            log.exception("could not tell the other processes to cancel chat %s", ticket.chat_id)
            return False

    async def _release(self, lease: Lease, ticket: Ticket) -> None:
        """Let go of the lease to the end: a cancel now (a client leaving, a repeated cancel) is absorbed."""
        try:
            await wait_despite_cancel(lease.release(ticket.chat_id, ticket.state.run_id))
        except Exception:
            log.exception("could not release chat %s (its lease expires by itself)", ticket.chat_id)
