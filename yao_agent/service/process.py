"""This process's share of an app's runs: the runs in flight here, and what keeps them one per chat.

It holds the `Runtime` current now, the admission that gives each chat one active run, the lease that
does so across the processes sharing a PostgreSQL store (a `LocalLease` where one process serves the
store), and the handles of the runs accepted and not ended yet. The services (runs.py, chats.py,
tenancy.py) share one `Process` and read its runtime when called, so they all serve the same app.

The app can change while it serves (`adopt`, from the server's reloader): a run takes the `Runtime`
current when it starts and keeps it to its end, so runs in flight finish on the app version they
started with. A server that is stopping (`drain`) starts no more runs and gives those in flight time
to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

from yao_agent import settings
from yao_agent.dsl.specs import App
from yao_agent.errors import NoActiveRun, UsageError
from yao_agent.identity import OPERATOR, Identity
from yao_agent.messages import parse_input
from yao_agent.observe import metrics
from yao_agent.pipeline.admission import Admission
from yao_agent.pipeline.handle import RunHandle
from yao_agent.pipeline.runtime import Runtime, owner_is_dead, tool_manager
from yao_agent.pipeline.state import RunState
from yao_agent.store.leases import TTL_S, Lease, lease_for
from yao_agent.tools import Tools

log = logging.getLogger("yao_agent.service.process")


class Process:
    """The runs of one app in flight in this process, and the runtime they run on."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.admission = Admission(rt.clock)
        self.active: dict[str, RunHandle] = {}  # by run id: accepted, and not ended yet (queued ones too)
        self.draining = False  # stopping: no run starts any more
        self.loaded_at = time.time()  # when the app now served was loaded
        self._shared = False  # the store's lease is taken (`share_chats`)
        self._retiring: set[asyncio.Task[None]] = set()  # MCP servers of an earlier app version, stopping
        self._sweeping: asyncio.Task[None] | None = None

    @property
    def app(self) -> App:
        return self.rt.app

    @property
    def lease(self) -> Lease:
        return self.admission.lease

    # -- the runs in flight ------------------------------------------------------------------------

    def track(self, handle: RunHandle) -> None:
        """Count a run just started among those in flight here until its task ends."""
        run_id = handle.run_id
        self.active[run_id] = handle
        handle.task.add_done_callback(lambda _: self._ended(run_id))
        self._count()

    def _ended(self, run_id: str) -> None:
        self.active.pop(run_id, None)
        self._count()

    def _count(self) -> None:
        """Tell the metrics how many runs run and wait here: each chat's first request runs, the rest queue.
        (Counted when a run starts and ends: the moments a queued one moves up are among them.)"""
        queued = sum(len(gate.tickets) - 1 for gate in self.admission.gates.values() if gate.tickets)
        metrics.load(len(self.active) - queued, queued)

    def running(self, identity: Identity, chat_id: str) -> bool:
        """Whether a run of the caller's on this chat is active or waiting in this process (even before it
        is stored). Only the caller's own count, so that a busy answer never tells who else has a chat of that id."""
        return any(
            h.state.chat_id == chat_id and h.state.identity == identity and not h.task.done()  # (done: leaving)
            for h in self.active.values()
        )

    def append_here(self, identity: Identity, chat_id: str, given: list[dict[str, Any]]) -> str | None:
        """Add user messages to the caller's run of this chat active here: its run id; None when no run of
        theirs is active here. NoActiveRun for a run that is ending (it would never answer them)."""
        state = self.admission.active_state(chat_id)
        if state is None or state.identity != identity:
            return None
        return self._append_to(state, chat_id, given)

    def appended_elsewhere(self, chat_id: str, identity: Identity, messages: Any) -> str:
        """Another process hands over messages for the caller's run of this chat, which runs here."""
        state = self.admission.active_state(chat_id)
        if state is None or state.identity != identity:
            raise NoActiveRun(f"chat '{chat_id}' has no active run to append to")
        return self._append_to(state, chat_id, user_messages(messages))

    def _append_to(self, state: RunState, chat_id: str, given: list[dict[str, Any]]) -> str:
        if state.run.status != "running" or state.cancel_requested or self.admission.active_cancelled(chat_id):
            raise NoActiveRun(
                f"chat '{chat_id}': its run {state.run_id} is ending and takes no more messages; "
                "send them as a new request (it runs next)"
            )
        state.appended.extend(given)
        return state.run_id

    def cancel_all(self) -> None:
        """Cancel every run in flight here; each still flushes and sends its `stream_end` (a shutdown)."""
        for handle in list(self.active.values()):
            handle.cancel()

    async def drain(self, grace_s: float) -> tuple[int, int]:
        """Start no more runs; give those in flight (and queued) `grace_s` seconds to end, then cancel the
        rest, each stored as cancelled. Returns (how many ended by themselves, how many were cancelled)."""
        self.draining = True
        handles = list(self.active.values())
        if handles:
            await asyncio.wait([h.task for h in handles], timeout=grace_s)
        late = [h for h in handles if not h.task.done()]
        for handle in late:
            handle.cancel()
        for handle in late:
            with contextlib.suppress(Exception):
                await handle.wait()
        return len(handles) - len(late), len(late)

    # -- the app served ----------------------------------------------------------------------------

    def adopt(self, app: App) -> None:
        """Serve `app` from now on: runs that start from now take it; runs in flight keep theirs. Its MCP
        servers are the old ones when they are configured alike (no restart); else new ones start on
        demand, and the old ones stop once the runs that may use them have ended."""
        old = self.rt
        tools = old.tools
        if app.mcps != old.app.mcps:
            tools = tool_manager(app, old.environ, old.store)
            self._retire(old.tools, [h.task for h in self.active.values()])
        # The knowledge service is made again for the new app: its collections may have changed.
        self.rt = replace(old, app=app, tools=tools, knowledge=None)
        self.loaded_at = time.time()

    def _retire(self, tools: Tools, users: list[asyncio.Task[None]]) -> None:
        async def close_when_unused() -> None:
            if users:
                await asyncio.wait(users)
            await tools.aclose()

        task = asyncio.create_task(close_when_unused(), name="retire MCP servers")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def prepare(self, assistant_id: str, identity: Identity) -> None:
        """Load what an assistant's runs need (engines, MCP servers) now, so the first run does not wait."""
        await self.rt.prepare(assistant_id, identity)

    # -- the processes sharing the store -----------------------------------------------------------

    async def share_chats(self) -> None:
        """Hold chats with the store's lease: on PostgreSQL, one shared with the other processes, whose
        cancels and appends it hears (several servers), and look now and then for runs they left."""
        if self._shared:
            return
        ttl = settings.lease_ttl_s(TTL_S)  # how long a dead process holds a chat
        lease = lease_for(self.rt.store.db, self.rt.owner, self.admission.cancel_before, clock=self.rt.clock,
                          ttl_s=ttl, on_lost=self.admission.lost, on_append=self.appended_elsewhere)  # fmt: skip
        await lease.start()
        self.admission.lease, self._shared = lease, True
        if lease.sweep_s is not None:
            self._sweeping = asyncio.create_task(self._sweep(lease, lease.sweep_s), name="interrupted runs")

    async def _sweep(self, lease: Lease, every_s: float) -> None:
        """Now and then, mark the runs of processes that died `interrupted` (resumable): a server killed
        while others go on would otherwise leave its runs `running` until a new run takes their chat."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.rt.store.recover_interrupted(OPERATOR, lambda o, beat: owner_is_dead(o, beat, lease.now()))
            except Exception:
                log.exception("could not look for the runs of processes that died")

    async def recover(self) -> list[str]:
        """Mark the runs left `running` by processes that are gone `interrupted` (resumable); their ids."""
        return await self.rt.store.recover_interrupted(OPERATOR, owner_is_dead)

    async def aclose(self) -> None:
        """Cancel what still runs (each run flushes), then let go of the chats and close the runtime."""
        handles = list(self.active.values())
        for handle in handles:
            handle.cancel()
        for handle in handles:
            with contextlib.suppress(Exception):
                await handle.wait()
        if self._sweeping is not None:
            self._sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeping
        try:
            await self.lease.aclose()
            for retiring in list(self._retiring):
                with contextlib.suppress(Exception):
                    await retiring
        finally:
            await self.rt.aclose()  # the runtime and its store, even when the lease failed to close


def user_messages(messages: object) -> list[dict[str, Any]]:
    """Messages to append to a run: OpenAI-shaped, and all the user's."""
    given = parse_input(messages, where="messages")
    if any(m["role"] != "user" for m in given):
        raise UsageError("messages: only user messages can be appended to a run")
    return given
