"""Stage 1, permission: who asks, for which assistant, on which chat — refused before anything exists.

No identity, an assistant the caller may not use, a chat that is not theirs, malformed input: each is
an error raised here, before a run, a chat or a single event is created.
"""

from __future__ import annotations

import re

from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.errors import NotFound, PermissionDenied, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import check_text, parse_input
from yao_agent.pipeline.buffer import Buffer
from yao_agent.pipeline.channel import EventChannel
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunContext, RunRequest, RunState
from yao_agent.store.records import RunRecord

CHAT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


async def check(rt: Runtime, request: RunRequest) -> RunState:
    identity = request.identity
    if not isinstance(identity, Identity):
        raise PermissionDenied("a run needs the caller's identity (a user id)")
    assistant = rt.app.assistants.get(request.assistant_id)
    if assistant is None:  # e.g. a resumed run's assistant, removed since: name only what the caller may use
        visible = rt.app.assistants_for(identity.user_id, identity.team_id)
        raise NotFound(unknown("assistant", request.assistant_id, visible, HANDFUL))
    if not assistant.access.allows(identity.user_id, identity.team_id):
        raise PermissionDenied(f"assistant '{assistant.id}' is not available to {identity}")
    given = parse_input(request.messages) if request.resume is None or request.messages else []
    check_text(request.metadata, "metadata")  # it reaches prompts and hooks, which need text that encodes
    chat_id = request.chat_id
    if chat_id is not None:
        await rt.store.check_chat(identity, valid_chat_id(chat_id))  # NotFound when it is another tenant's
    run_id = rt.ids.new("run")
    run = RunRecord(
        id=run_id, chat_id=chat_id or rt.ids.new("chat"), user_id=identity.user_id, team_id=identity.team_id,
        assistant_id=assistant.id, trace_id=rt.ids.new("trace"), owner=rt.owner, started_at=rt.clock(),
        resumed_from=request.resume.run.id if request.resume else None,
    )  # fmt: skip
    ctx = RunContext(request=request, identity=identity, assistant=assistant, run=run, out=EventChannel(),
                     buffer=Buffer(run_id, rt.ids.new, rt.clock), started_mono=rt.monotonic())  # fmt: skip
    return RunState(ctx=ctx, input=given, metadata=dict(request.metadata), locale=request.locale,
                    options=dict(request.options))  # fmt: skip


def valid_chat_id(chat_id: str) -> str:
    """A chat id any store can hold, or a UsageError (before the id reaches a query)."""
    if not CHAT_ID.fullmatch(chat_id):
        raise UsageError(f"invalid chat id {chat_id!r} (expected 1-64 letters, digits, _.:-)")
    return chat_id
