"""Stage 1, permission: who asks, for which assistant, on which chat — refused before anything exists.

No identity, an assistant the caller may not use, a chat that is not theirs, malformed input: each is
an error raised here, before a run, a chat or a single event is created. Each is checked here only:
the server and the CLI hand requests over as they come.
"""

from __future__ import annotations

import re
from dataclasses import replace

from yao_agent import ids
from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.dsl.specs import App, AssistantSpec
from yao_agent.errors import NotFound, PermissionDenied, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import check_text, parse_input
from yao_agent.pipeline import client_tools, resume
from yao_agent.pipeline.buffer import Buffer
from yao_agent.pipeline.channel import EventChannel
from yao_agent.pipeline.options import RunOptions
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunContext, RunRequest, RunState
from yao_agent.store.records import RunRecord

CHAT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def joining(request: RunRequest) -> RunRequest:
    """The request, carrying the traceparent of the HTTP request that made it when it has none itself
    (resume and approvals, whose requests the pipeline builds)."""
    given = ids.incoming.get()
    return replace(request, traceparent=given) if request.traceparent is None and given else request


async def check(rt: Runtime, request: RunRequest, *, chat_is_theirs: bool = False) -> RunState:
    """The run's state, or the error that refuses it. `chat_is_theirs`: a run of the caller's on the
    request's chat is accepted already (its first run may not have stored the chat yet)."""
    request = joining(request)
    identity = request.identity
    if not isinstance(identity, Identity):
        raise PermissionDenied("a run needs the caller's identity (a user id)")
    assistant = usable(rt.app, identity, request.assistant_id)
    chat_id = request.chat_id
    if chat_id is not None and not (chat_is_theirs or resume.owned(request, identity)):
        await chat(rt, identity, valid_chat_id(chat_id), request.chat_must_exist)
    # A resume adds no input; a regeneration none either (it answers the chat's last user message again).
    given = parse_input(request.messages) if request.messages or not (request.resume or request.rewind) else []
    check_text(request.metadata, "metadata")  # it reaches prompts and hooks, which need text that encodes
    options = RunOptions.of_request(request.options).over(client_tools.options(request))
    run_id = rt.ids.new("run")
    run = RunRecord(
        id=run_id, chat_id=chat_id or rt.ids.new("chat"), user_id=identity.user_id, team_id=identity.team_id,
        assistant_id=assistant.id, trace_id=ids.run_trace_id(request.traceparent, rt.ids), owner=rt.owner,
        started_at=rt.clock(), resumed_from=request.resume.run.id if request.resume else None,
        app_version=rt.app.version or None,
    )  # fmt: skip
    ctx = RunContext(request=request, identity=identity, assistant=assistant, run=run, out=EventChannel(),
                     buffer=Buffer(run_id, rt.ids.new, rt.clock), started_mono=rt.monotonic())  # fmt: skip
    return RunState(ctx=ctx, input=given, metadata=dict(request.metadata), locale=request.locale,
                    options=options, guardrails=assistant.guardrails.over(rt.app.config.guardrails))  # fmt: skip


def usable(app: App, identity: Identity, assistant_id: str) -> AssistantSpec:
    """The assistant, if the caller may use it. To anybody else it does not exist: the same NotFound as
    for an id no assistant has, naming only a few the caller may use."""
    assistant = app.assistants.get(assistant_id)
    if assistant is None or not assistant.access.allows(identity.user_id, identity.team_id):
        visible = app.assistants_for(identity.user_id, identity.team_id)
        raise NotFound(unknown("assistant", assistant_id, visible, HANDFUL))
    return assistant


async def chat(rt: Runtime, identity: Identity, chat_id: str, must_exist: bool) -> None:
    """Another tenant's chat is NotFound; so is a chat of nobody's when the request must name an existing one
    (over HTTP the server names new chats, so a made-up id answers as another tenant's does)."""
    if await rt.store.check_chat(identity, chat_id) is None and must_exist:
        raise NotFound(f"no chat '{chat_id}'")


def valid_chat_id(chat_id: str) -> str:
    """A chat id any store can hold, or a UsageError (before the id reaches a query)."""
    if not CHAT_ID.fullmatch(chat_id):
        raise UsageError(f"invalid chat id {chat_id!r} (expected 1-64 letters, digits, _.:-)")
    return chat_id


def chat_id_shape(chat_id: str) -> str:
    """A chat id named by a chat operation (cancel, messages, ...): one no chat can have is no chat, NotFound."""
    if not CHAT_ID.fullmatch(chat_id):
        raise NotFound(f"no chat '{chat_id}'")
    return chat_id
