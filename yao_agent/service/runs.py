"""The Runs service: the one way in from the outside — what the CLI, the server and the Python API call.

It starts runs (streamed, or drained to their result), resumes, cancels and appends to them, and
answers what callers ask about assistants, chats and role settings. It holds the runs in flight in
this process: their handles, the admission that gives each chat one active run, and on PostgreSQL the
lease that does so across processes. What runs them is a `Runtime`: the dependencies, and nothing live.

Every check is made once, where it belongs: who may run which assistant on which chat, and whether the
input is well formed, by the pipeline's permission stage; whether the chat is busy, by admission; who
owns a chat, by the store. Callers hand requests over as they come, and render the answers or errors.

The app can change while it serves (`adopt`, from `reload.py`): a run takes the `Runtime` current when
it starts and keeps it to its end, so runs in flight finish on the app version they started with. A
server that is stopping (`drain`) starts no more runs and gives those in flight time to end.

Continuing a run from stored state goes one way: `resume` turns the chat's resume point into a
`RunRequest` and starts it like any other run; deciding pending approvals (`decide`) stores the
decisions, then resumes the same way, so a decision continues the run in whichever process takes it.

    runs = await Runs.open("path/to/app")
    async for event in runs.stream(RunRequest("chat", Identity("alice"), [{"role": "user", "content": "Hi"}])):
        ...
    await runs.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.dsl.specs import App, AssistantSpec
from yao_agent.errors import ChatBusy, Draining, NoActiveRun, NotFound, Refused, UsageError
from yao_agent.events import Event
from yao_agent.identity import OPERATOR, Identity
from yao_agent.messages import ChatMessage, parse_input
from yao_agent.observe import metrics
from yao_agent.pipeline import approvals, permission, quota, resume
from yao_agent.pipeline.admission import Admission
from yao_agent.pipeline.handle import RunHandle, RunResult
from yao_agent.pipeline.run import execute
from yao_agent.pipeline.runtime import Runtime, owner_is_dead
from yao_agent.pipeline.state import RunRequest, RunState
from yao_agent.service import teams
from yao_agent.store import RoleSetting
from yao_agent.store.leases import TTL_S, PgLease
from yao_agent.store.records import ChatRecord, ResumePoint, RunView
from yao_agent.tools import ToolManager

if TYPE_CHECKING:
    from yao_agent.shapes import BudgetsOut, UsageReportOut

SWEEP_S = 5.0  # how often a process looks for runs left `running` by processes that died (PostgreSQL)
log = logging.getLogger("yao_agent.service.runs")
ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # app.yml's role names, within the store's 128


class Runs:
    """The runs of one app in this process, and everything callers may ask about them."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.admission = Admission(rt.clock)
        self.active: dict[str, RunHandle] = {}  # by run id: accepted, and not ended yet (queued ones too)
        self.draining = False  # stopping: no run starts any more
        self.loaded_at = time.time()  # when the app now served was loaded
        self._retiring: set[asyncio.Task[None]] = set()  # MCP servers of an earlier app version, stopping
        self._sweeping: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, app_dir: str | Path, *, db: str | None = None, recover: bool = True) -> Runs:
        """Load the app, open its store (`db`, else $YAO_AGENT_DB, else app.yml's `store`; migrated), share
        its chats with the other processes on PostgreSQL, and mark runs of dead processes interrupted."""
        runs = cls(await Runtime.open(app_dir, db=db))
        try:
            await runs.share_chats()
            if recover:
                await runs.recover()
        except BaseException:
            await runs.aclose()
            raise
        return runs

    async def __aenter__(self) -> Runs:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    @property
    def app(self) -> App:
        return self.rt.app

    # -- runs ------------------------------------------------------------------------------------

    async def start(self, request: RunRequest) -> RunHandle:
        """Check the request (stage 1: errors are raised here, before anything exists), give it its place
        on the chat (stage 2: a busy chat may refuse it), and start it in its own task."""
        if self.draining:
            metrics.refused(Draining.code)
            raise Draining("this server is shutting down and starts no new runs; send the request again", retry_after=1)
        rt = self.rt  # the app version current now: the run keeps it to its end
        who, chat_id = request.identity, request.chat_id
        theirs = who is not None and chat_id is not None and self.running(who, chat_id)
        state = await permission.check(rt, request, chat_is_theirs=theirs)
        on_busy = request.on_busy or state.assistant.on_busy
        try:
            state.budgeted = await quota.check(rt, state.identity, state.run_id)  # budgets, rate limits (stage 1)
            if on_busy == "reject" and await self.admission.held_elsewhere(state.chat_id):
                raise ChatBusy(f"chat '{state.chat_id}' is busy with a run in another process (on_busy: reject)")
            ticket = self.admission.accept(state, on_busy)
        except Refused as exc:
            metrics.refused(exc.code)
            raise
        except ChatBusy:
            metrics.refused("chat_busy")
            raise
        task = asyncio.create_task(execute(rt, state, self.admission, ticket), name=f"run {state.run_id}")
        handle = RunHandle(state, task)
        ticket.cancel = handle.cancel  # registered before anything else can run: no cancel is ever missed
        self.active[state.run_id] = handle
        task.add_done_callback(lambda _: self._ended(state.run_id))
        self._count()
        return handle

    def _ended(self, run_id: str) -> None:
        self.active.pop(run_id, None)
        self._count()

    def _count(self) -> None:
        """Tell the metrics how many runs run and wait here: each chat's first request runs, the rest queue.
        (Counted when a run starts and ends: the moments a queued one moves up are among them.)"""
        queued = sum(len(gate.tickets) - 1 for gate in self.admission.gates.values() if gate.tickets)
        metrics.load(len(self.active) - queued, queued)

    async def stream(self, request: RunRequest) -> AsyncGenerator[Event]:
        """Start a run and yield its events. Leaving early cancels the run (which is still stored)."""
        handle = await self.start(request)
        async with aclosing(handle.events()) as events:  # closing us closes it, which cancels the run
            async for event in events:
                yield event

    async def run(self, request: RunRequest) -> RunResult:
        """Start a run and wait for its result: the same run, its stream drained."""
        handle = await self.start(request)
        async for _ in handle.events():
            pass
        return handle.result()

    async def resume(self, identity: Identity, chat_id: str) -> RunHandle:
        """Continue the chat's failed, cancelled or interrupted run from its unfinished step."""
        request = await resume.request(self.rt, identity, permission.chat_id_shape(chat_id))
        return await self.start(request)

    async def approvals(self, identity: Identity, chat_id: str) -> ResumePoint:
        """The run of the caller's chat that waits for a person, with its pending calls; NotFound if none."""
        chat_id = permission.chat_id_shape(chat_id)
        point = await resume.resume_point(self.rt, identity, chat_id)
        if point is None or not point.pending:
            raise NotFound(f"chat '{chat_id}' has no pending approvals")
        return point

    async def decide(self, identity: Identity, chat_id: str, decisions: Any) -> RunHandle:
        """Decide every call the chat's run waits for (`[{tool_call_id, approve, reason?}]`), store who
        decided what, when and why, and continue the run: approved calls run, denied ones are answered
        `denied: <reason>`. ApprovalConflict when someone (or a new message) decided first."""
        point = await self.approvals(identity, chat_id)
        verdicts = approvals.parse_decisions(decisions, point.pending, identity.user_id, self.rt.clock())
        await self.rt.store.decide_approvals(identity, point.run.chat_id, point.run.id, verdicts)
        return await self.resume(identity, point.run.chat_id)

    async def cancel(self, identity: Identity, chat_id: str) -> int:
        """Cancel the chat's active run and every request accepted before now, in every process.

        Returns how many were cancelled: here, and in the other processes that answered (see
        `PgLease.cancel_counted`), so a cancel whose run lives in another process does not say 0.
        """
        chat_id = permission.chat_id_shape(chat_id)
        state = self.admission.active_state(chat_id)
        if state is None:
            await self._chat(identity, chat_id)  # its run may live in another process
        elif state.identity != identity:
            raise NotFound(f"no chat '{chat_id}'")
        cancelled = self.admission.cancel(chat_id)
        lease = self.admission.lease
        if isinstance(lease, PgLease):
            cancelled += await lease.cancel_counted(chat_id)
        elif lease is not None:
            await lease.cancel_everywhere(chat_id)
        return cancelled

    async def append(self, identity: Identity, chat_id: str, messages: Sequence[Mapping[str, Any]]) -> str:
        """Add user messages to the chat's active run, here or (PostgreSQL) in the process running it: its
        next model call sees them. Returns its run id.

        A run that is cancelled, or already past its last model call (ending, storing), takes no more
        messages: they would never be answered, so the caller is told (and sends a new request).
        """
        chat_id = permission.chat_id_shape(chat_id)
        given = _user_messages(messages)
        state = self.admission.active_state(chat_id)
        if state is not None and state.identity == identity:
            return self._append_here(state, chat_id, given)
        await self._chat(identity, chat_id)  # (NotFound: not the caller's)
        lease = self.admission.lease
        run_id = await lease.append_elsewhere(chat_id, identity, given) if isinstance(lease, PgLease) else None
        if run_id is None:
            raise NoActiveRun(f"chat '{chat_id}' has no active run to append to")
        return run_id

    def appended_elsewhere(self, chat_id: str, identity: Identity, messages: Any) -> str:
        """Another process hands over messages for the caller's run of this chat, which runs here."""
        state = self.admission.active_state(chat_id)
        if state is None or state.identity != identity:
            raise NoActiveRun(f"chat '{chat_id}' has no active run to append to")
        return self._append_here(state, chat_id, _user_messages(messages))

    def _append_here(self, state: RunState, chat_id: str, given: list[dict[str, Any]]) -> str:
        if state.run.status != "running" or state.cancel_requested or self.admission.active_cancelled(chat_id):
            raise NoActiveRun(
                f"chat '{chat_id}': its run {state.run_id} is ending and takes no more messages; "
                "send them as a new request (it runs next)"
            )
        state.appended.extend(given)
        return state.run_id

    def running(self, identity: Identity, chat_id: str) -> bool:
        """Whether a run of the caller's on this chat is active or waiting in this process (even before it
        is stored). Only the caller's own count, so that a busy answer never tells who else has a chat of that id."""
        return any(
            h.state.chat_id == chat_id and h.state.identity == identity and not h.task.done()  # (done: leaving)
            for h in self.active.values()
        )

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

    def adopt(self, app: App) -> None:
        """Serve `app` from now on: runs that start from now take it; runs in flight keep theirs. Its MCP
        servers are the old ones when they are configured alike (no restart); else new ones start on
        demand, and the old ones stop once the runs that may use them have ended."""
        old = self.rt
        tools = old.tools
        if app.mcps != old.app.mcps:
            tools = ToolManager(app.mcps, root=app.root, environ=old.environ)
            self._retire(old.tools, [h.task for h in self.active.values()])
        self.rt = replace(old, app=app, tools=tools)
        self.loaded_at = time.time()

    def _retire(self, tools: ToolManager, users: list[asyncio.Task[None]]) -> None:
        async def close_when_unused() -> None:
            if users:
                await asyncio.wait(users)
            await tools.aclose()

        task = asyncio.create_task(close_when_unused(), name="retire MCP servers")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    # -- what callers ask ------------------------------------------------------------------------

    def assistants(self, identity: Identity) -> list[AssistantSpec]:
        """The assistants the caller may use; to anybody else an assistant does not exist."""
        return [a for a in self.app.assistants.values() if a.access.allows(identity.user_id, identity.team_id)]

    async def chats(self, identity: Identity, query: str = "") -> list[ChatRecord]:
        """The caller's chats, most recently active first; `query` keeps those whose title or messages contain it."""
        return await self.rt.store.list_chats(identity, query=query)

    async def messages(self, identity: Identity, chat_id: str) -> list[ChatMessage]:
        """The chat's stored messages, oldest first."""
        chat_id = permission.chat_id_shape(chat_id)
        await self._chat(identity, chat_id)
        return await self.rt.store.history(identity, chat_id)

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint:
        """What `resume` would continue: the chat's latest run, if it did not complete, and its unfinished steps."""
        point = await resume.resume_point(self.rt, identity, permission.chat_id_shape(chat_id))
        if point is None:
            raise NotFound(f"chat '{chat_id}' has no resume point")
        if point.pending:
            raise NotFound(f"chat '{chat_id}' has no resume point: its run waits for approvals (see its approvals)")
        return point

    async def run_view(self, identity: Identity, chat_id: str, run_id: str) -> RunView:
        """One run of the caller's chat: its status, reason, usage and steps (with their transitions)."""
        chat_id = permission.chat_id_shape(chat_id)
        found = None
        if permission.CHAT_ID.fullmatch(run_id):  # run ids have the chat ids' shape; another is no run
            found = await self.rt.store.run_view(identity, chat_id, run_id)
        if found is None:
            raise NotFound(f"chat '{chat_id}' has no run '{run_id}'")
        return found

    async def rename(self, identity: Identity, chat_id: str, title: str) -> ChatRecord:
        """Give the caller's chat a title of their own (1-200 characters of plain text on one line)."""
        return await self.rt.store.rename_chat(identity, permission.chat_id_shape(chat_id), title)

    async def delete(self, identity: Identity, chat_id: str) -> None:
        """Delete the chat and everything stored for it; ChatBusy while a run of it is active (here or, on
        PostgreSQL, in another process)."""
        chat_id = permission.chat_id_shape(chat_id)
        if self.running(identity, chat_id) or not await self.rt.store.delete_chat(identity, chat_id):
            raise ChatBusy(f"chat '{chat_id}' has a run in progress: cancel it or let it end, then delete the chat")

    async def roles(self, identity: Identity) -> list[RoleSetting]:
        """The role mappings of the caller's team (or, for a caller without a team, the caller's own)."""
        return await self.rt.store.list_roles(identity.settings_scope)

    async def set_role(self, identity: Identity, role: str, connectors: Sequence[str]) -> None:
        """Map a role for the caller's team (a team admin only: Forbidden for a member) or the caller without
        a team, to connectors the caller may use (their `access`): any other is unknown to them, in the
        words of one that does not exist."""
        if not ROLE.fullmatch(role):  # a malformed request is a 400 whoever sends it
            raise UsageError(f"invalid role name {role!r} (expected 1-128 letters, digits, _.-)")
        teams.require_admin(identity, "role mappings")  # a member hears nothing of the connectors
        allowed = self.app.connectors_for(identity.user_id, identity.team_id)
        for connector in connectors:
            if connector not in allowed:
                raise UsageError(unknown("connector", connector, allowed, HANDFUL))
        await self.rt.store.set_role(identity.settings_scope, role, list(connectors))

    async def unset_role(self, identity: Identity, role: str) -> None:
        """Remove the scope's mapping of a role (app.yml's applies again); NotFound when it maps none,
        Forbidden for a member of a team."""
        teams.require_admin(identity, "role mappings")
        kind, owner = identity.settings_scope
        if not ROLE.fullmatch(role) or not await self.rt.store.delete_role((kind, owner), role):
            raise NotFound(f"role '{role}' is not set for {kind} {owner}")

    # -- usage and budgets (CONTRACT §8.2; who sees and changes what: teams.py) -------------------

    async def usage(
        self, identity: Identity, *, first: str | None = None, last: str | None = None, by: str = "day",
        user: str | None = None,
    ) -> UsageReportOut:  # fmt: skip
        """Usage and cost from day `first` to `last` (YYYY-MM-DD, both included; default: this month so far,
        UTC) grouped `by` day, assistant, connector or user: a member's own, a team admin's whole team (or
        one member's, `user`). Forbidden for what a member may not see."""
        grouping = teams.group(by)
        scope = teams.usage_scope(identity, user, grouping)
        start, end = teams.span(first, last, self.rt.clock())
        return await teams.usage_report(self.rt.store, scope, start, end, grouping)

    async def budgets(self, identity: Identity, *, user: str | None = None) -> BudgetsOut:
        """The budgets that hold the caller's runs (a team admin: the team's, or one member's with `user`),
        with what was spent in each window and when it resets."""
        scope = teams.scope_for(identity, user, "budgets")
        return await teams.budget_view(self.rt.store, self.app.config.budgets, scope, self.rt.clock())

    async def set_budget(
        self, identity: Identity, limits: Mapping[str, float | None], *, user: str | None = None
    ) -> BudgetsOut:
        """Set windows of a budget (`per_day`, `per_month`: USD, or None for none there; the others stay):
        a team admin's team's, or one member's (`user`), at or below the operator's ceiling that holds it
        (Forbidden above it, or for none under one; and for a member, or a caller without a team).
        Answers `budgets`."""
        scope = teams.changing_budget(identity, user)
        checked = teams.check_limits(limits)
        allowed = teams.within_ceiling(scope, self.app.config.budgets, checked)
        await self.rt.store.set_budget(scope.budget_scope, checked, allowed)
        return await teams.budget_view(self.rt.store, self.app.config.budgets, scope, self.rt.clock())

    async def identity_for(self, token: str) -> Identity | None:
        """Whose API token this is; None for a token that is unknown or revoked."""
        return await self.rt.store.identity_for(token)

    async def _chat(self, identity: Identity, chat_id: str) -> None:
        if await self.rt.store.check_chat(identity, chat_id) is None:  # NotFound already if another's
            raise NotFound(f"no chat '{chat_id}'")

    # -- this process ----------------------------------------------------------------------------

    async def prepare(self, assistant_id: str, identity: Identity) -> None:
        """Load what an assistant's runs need (engines, MCP servers) now, so the first run does not wait."""
        await self.rt.prepare(assistant_id, identity)

    async def share_chats(self) -> None:
        """On PostgreSQL, hold chats with leases and hear other processes' cancels (several servers)."""
        if self.rt.store.db.dialect != "postgresql" or self.admission.lease is not None:
            return
        ttl = float(os.environ.get("YAO_AGENT_LEASE_TTL_S") or TTL_S)  # how long a dead process holds a chat
        lease = PgLease(self.rt.store.db, self.rt.owner, self.admission.cancel_before, clock=self.rt.clock,
                        ttl_s=ttl, on_lost=self.admission.lost, on_append=self.appended_elsewhere)  # fmt: skip
        await lease.start()
        self.admission.lease = lease
        self._sweeping = asyncio.create_task(self._sweep(lease), name="interrupted runs")

    async def _sweep(self, lease: PgLease) -> None:
        """Now and then, mark the runs of processes that died `interrupted` (resumable): a server killed
        while others go on would otherwise leave its runs `running` until a new run takes their chat."""
        while True:
            await asyncio.sleep(min(SWEEP_S, lease.ttl_s))
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
        if isinstance(self.admission.lease, PgLease):
            await self.admission.lease.aclose()
        for retiring in list(self._retiring):
            with contextlib.suppress(Exception):
                await retiring
        await self.rt.aclose()


def _user_messages(messages: object) -> list[dict[str, Any]]:
    given = parse_input(messages, where="messages")
    if any(m["role"] != "user" for m in given):
        raise UsageError("messages: only user messages can be appended to a run")
    return given


__all__ = ["RunHandle", "RunRequest", "RunResult", "Runs", "Runtime"]
