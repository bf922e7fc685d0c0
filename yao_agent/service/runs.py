"""The Runs service: the one way in from the outside — what the CLI, the server and the Python API call.

It starts runs (streamed, or drained to their result), resumes, cancels and appends to them, and
continues a run that waits for a person once they decide. Beside it, sharing one `Process` (the runs
in flight here, and the runtime they run on; process.py): `Chats` answers what callers ask about their
chats (chats.py), `Tenancy` their tokens, role mappings, usage and budgets (tenancy.py), `Versions`
the runs that regenerate an answer or edit a question (versions.py). The calls the Python API documents
(README "Embedding") are all on `Runs`; what it does not do itself it hands to them
(`runs.conversations`, `runs.tenancy`, `runs.versions`, `runs.process`).

Every check is made once, where it belongs: who may run which assistant on which chat, and whether the
input is well formed, by the pipeline's permission stage; whether the chat is busy, by admission; who
owns a chat, by the store. Callers hand requests over as they come, and render the answers or errors.

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
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from yao_agent.dsl.specs import App, AssistantSpec
from yao_agent.errors import ChatBusy, Draining, NoActiveRun, NotFound, Refused
from yao_agent.events import Event
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.observe import metrics
from yao_agent.pipeline import approvals, client_tools, permission, quota, resume
from yao_agent.pipeline.handle import RunHandle, RunResult
from yao_agent.pipeline.run import execute
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest
from yao_agent.service.chats import Chats
from yao_agent.service.process import Process, user_messages
from yao_agent.service.tenancy import Tenancy
from yao_agent.service.versions import Versions
from yao_agent.store.records import ChatRecord, ResumePoint, RoleSetting, RunView


class Runs:
    """The runs of one app in this process, and everything callers may ask about them."""

    def __init__(self, rt: Runtime) -> None:
        self.process = Process(rt)
        self.conversations = Chats(self.process)
        self.tenancy = Tenancy(self.process)
        self.versions = Versions(self.conversations, self.start)  # regenerate, edit: runs started as `start` does

    @classmethod
    async def open(cls, app_dir: str | Path, *, db: str | None = None, recover: bool = True) -> Runs:
        """Load the app, open its store (`db`, else $YAO_AGENT_DB, else app.yml's `store`; migrated), share
        its chats with the other processes on PostgreSQL, and mark runs of dead processes interrupted."""
        runs = cls(await Runtime.open(app_dir, db=db))
        try:
            await runs.process.share_chats()
            if recover:
                await runs.process.recover()
        except BaseException:
            await runs.aclose()
            raise
        return runs

    async def __aenter__(self) -> Runs:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel what still runs (each run flushes), then let go of the chats and close the runtime."""
        await self.tenancy.tokens.aclose()
        await self.process.aclose()

    @property
    def rt(self) -> Runtime:
        """The runtime runs start on now (the app served, its store, engines, hooks and tools)."""
        return self.process.rt

    @property
    def app(self) -> App:
        return self.process.rt.app

    # -- runs ------------------------------------------------------------------------------------

    async def start(self, request: RunRequest) -> RunHandle:
        """Check the request (stage 1: errors are raised here, before anything exists), give it its place
        on the chat (stage 2: a busy chat may refuse it), and start it in its own task."""
        process = self.process
        if process.draining:
            metrics.refused(Draining.code)
            raise Draining("this server is shutting down and starts no new runs; send the request again", retry_after=1)
        rt, admission = process.rt, process.admission  # the app version current now: the run keeps it to its end
        if request.resume is None:  # the client's tool results continue the run that waits for them
            if request.chat_id is not None:
                permission.valid_chat_id(request.chat_id)
            request = await client_tools.continuation(rt, request)
        who, chat_id = request.identity, request.chat_id
        theirs = who is not None and chat_id is not None and process.running(who, chat_id)
        state = await permission.check(rt, request, chat_is_theirs=theirs)
        await client_tools.check_offer(rt, state)  # a name clash is refused before the run starts
        on_busy = request.on_busy or state.assistant.on_busy
        try:
            await quota.admit(rt, state)  # budgets, rate limits (stage 1)
            if on_busy == "reject" and await admission.held_elsewhere(state.chat_id):
                raise ChatBusy(f"chat '{state.chat_id}' is busy with a run in another process (on_busy: reject)")
            ticket = admission.accept(state, on_busy)
        except Refused as exc:
            metrics.refused(exc.code)
            raise
        except ChatBusy:
            metrics.refused("chat_busy")
            raise
        task = asyncio.create_task(execute(rt, state, admission, ticket), name=f"run {state.run_id}")
        handle = RunHandle(state, task)
        ticket.cancel = handle.cancel  # registered before anything else can run: no cancel is ever missed
        process.track(handle)
        return handle

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

    async def decide(self, identity: Identity, chat_id: str, decisions: Any) -> RunHandle:
        """Decide every call the chat's run waits for (`[{tool_call_id, approve, reason?}]`), store who
        decided what, when and why, and continue the run: approved calls run, denied ones are answered
        `denied: <reason>`. ApprovalConflict when someone (or a new message) decided first."""
        point = await self.conversations.approvals(identity, chat_id)
        verdicts = approvals.parse_decisions(decisions, point.pending, identity.user_id, self.rt.clock())
        after = await self.rt.store.decide_approvals(identity, point.run.chat_id, point.run.id, verdicts)
        return await self.start(await resume.request(self.rt, identity, point.run.chat_id, after))

    async def cancel(self, identity: Identity, chat_id: str) -> int:
        """Cancel the chat's active run and every request accepted before now, in every process.

        Returns how many were cancelled: here, and in the other processes that answered (see
        `Lease.cancel_counted`), so a cancel whose run lives in another process does not say 0.
        """
        chat_id = permission.chat_id_shape(chat_id)
        admission = self.process.admission
        state = admission.active_state(chat_id)
        if state is None:
            await self.conversations.check(identity, chat_id)  # its run may live in another process
        elif state.identity != identity:
            raise NotFound(f"no chat '{chat_id}'")
        cancelled = admission.cancel(chat_id)
        return cancelled + await admission.lease.cancel_counted(chat_id)

    async def append(self, identity: Identity, chat_id: str, messages: Sequence[Mapping[str, Any]]) -> str:
        """Add user messages to the chat's active run, here or (PostgreSQL) in the process running it: its
        next model call sees them. Returns its run id.

        A run that is cancelled, or already past its last model call (ending, storing), takes no more
        messages: they would never be answered, so the caller is told (and sends a new request).
        """
        chat_id = permission.chat_id_shape(chat_id)
        given = user_messages(messages)
        run_id = self.process.append_here(identity, chat_id, given)
        if run_id is not None:
            return run_id
        await self.conversations.check(identity, chat_id)  # (NotFound: not the caller's)
        run_id = await self.process.lease.append_elsewhere(chat_id, identity, given)
        if run_id is None:
            raise NoActiveRun(f"chat '{chat_id}' has no active run to append to")
        return run_id

    # -- what callers ask (chats.py, tenancy.py) -----------------------------------------------------

    def assistants(self, identity: Identity) -> list[AssistantSpec]:
        """The assistants the caller may use; to anybody else an assistant does not exist."""
        return self.conversations.assistants(identity)

    async def chats(self, identity: Identity, query: str = "") -> list[ChatRecord]:
        """The caller's chats, most recently active first; `query` keeps those whose title or messages contain it."""
        return await self.conversations.listed(identity, query)

    async def messages(self, identity: Identity, chat_id: str, *, versions: bool = False) -> list[ChatMessage]:
        """The chat's current messages, oldest first; `versions`: the earlier versions too (answer versions)."""
        return await self.conversations.messages(identity, chat_id, versions=versions)

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint:
        """What `resume` would continue: the chat's latest run, if it did not complete, and its unfinished steps."""
        return await self.conversations.resume_point(identity, chat_id)

    async def run_view(self, identity: Identity, chat_id: str, run_id: str) -> RunView:
        """One run of the caller's chat: its status, reason, usage and steps (with their transitions)."""
        return await self.conversations.run_view(identity, chat_id, run_id)

    async def rename(self, identity: Identity, chat_id: str, title: str) -> ChatRecord:
        """Give the caller's chat a title of their own (1-200 characters of plain text on one line)."""
        return await self.conversations.rename(identity, chat_id, title)

    async def delete(self, identity: Identity, chat_id: str) -> None:
        """Delete the chat and everything stored for it; ChatBusy while a run of it is active."""
        await self.conversations.delete(identity, chat_id)

    async def roles(self, identity: Identity) -> list[RoleSetting]:
        """The role mappings of the caller's team (or, for a caller without a team, the caller's own)."""
        return await self.tenancy.roles(identity)

    async def set_role(self, identity: Identity, role: str, connectors: Sequence[str]) -> None:
        """Map a role for the caller's team (a team admin only) or the caller without a team, to connectors."""
        await self.tenancy.set_role(identity, role, connectors)

    async def unset_role(self, identity: Identity, role: str) -> None:
        """Remove the scope's mapping of a role (app.yml's applies again)."""
        await self.tenancy.unset_role(identity, role)


__all__ = ["RunHandle", "RunRequest", "RunResult", "Runs", "Runtime"]
