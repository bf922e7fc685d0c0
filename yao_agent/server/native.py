"""The native API: runs as SSE of the contract's events (or JSON), cancel, append, chats, resume, roles.

Each route reads its request, calls the `Runs` service, and renders what it answers (or raises, for
errors.py to render): the checks — who may use which assistant and chat, busy chats, input — are the
service's and the pipeline's, made once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.types import Scope

from yao_agent import ids, shapes
from yao_agent.dsl.specs import ServerSettings
from yao_agent.errors import UsageError
from yao_agent.events import Event, MessageDelta, plain_text, text_head, text_json, to_json
from yao_agent.identity import Identity
from yao_agent.messages import iso_time
from yao_agent.pipeline import RunHandle, RunRequest
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.limits import check_messages
from yao_agent.server.sse import EventStream, relayed
from yao_agent.service.runs import Runs
from yao_agent.vocabulary import OnBusy

router = APIRouter()
Streamed = Annotated[bool, Query(description="false: wait for the run and answer with JSON")]


class RunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chat_id: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    metadata: dict[str, Any] | None = None
    on_busy: OnBusy | None = None


class AppendBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[dict[str, Any]] = Field(min_length=1)


class RoleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    connector: str | None = None
    connectors: list[str] | None = None


def runs_of(request: Request) -> Runs:
    return request.app.state.runs


def server_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


def visible(runs: Runs, who: Identity) -> list[shapes.AssistantOut]:
    return [{"id": a.id, "name": a.name, "description": a.description} for a in runs.assistants(who)]


def scope_of(who: Identity) -> str:
    kind, owner = who.settings_scope
    return f"{kind}:{owner}"


def sse(handle: RunHandle, scope: Scope | None = None) -> AsyncIterator[bytes]:
    """The run's events as SSE frames; the reader leaving (a closed connection) cancels the run.

    Frames that were waiting together go out in one write: a connection that fell behind catches up
    without one send per event (sse.relayed, which writes them from the run's side when it can)."""
    return relayed(handle, _Frames(), scope)


class _Frames:
    """A stream's batches of events as SSE frames, each text delta's head (its run, message and kind)
    written once per message rather than once per piece."""

    def __init__(self) -> None:
        self.heads: dict[tuple[str, str, str], str] = {}

    def __call__(self, batch: list[Event]) -> bytes:
        return frames([self._json(event) for event in batch])

    def _json(self, event: Event) -> str:
        if type(event) is not MessageDelta or event.text is None or not plain_text(event):
            return to_json(event)
        key = (event.run_id, event.message_id, event.kind)
        head = self.heads.get(key)
        if head is None:
            head = self.heads[key] = text_head(event)
        return text_json(event, head)


def frames(payloads: Iterable[str]) -> bytes:
    """SSE frames, as bytes. A lone surrogate (a model can send one) can only be written escaped,
    and since it is always inside a JSON string, its escape is the JSON escape of the same value."""
    return "".join([f"data: {payload}\n\n" for payload in payloads]).encode("utf-8", "backslashreplace")


def streamed(request: Request, handle: RunHandle) -> EventStream:
    return EventStream(sse(handle, request.scope), {"X-Chat-Id": handle.chat_id, "Cache-Control": "no-cache"})


async def drained(request: Request, handle: RunHandle) -> JSONResponse:
    await to_the_end(request, handle)
    return JSONResponse(handle.result().to_api(), headers={"X-Chat-Id": handle.chat_id})


async def to_the_end(request: Request, handle: RunHandle) -> None:
    """Read the run to its end for a non-streamed answer. A client that leaves first cancels the run
    (stored `cancelled`, resumable), as leaving a stream does: nobody is left to read the answer."""
    watch = asyncio.create_task(gone(request))
    watch.add_done_callback(lambda done: left(done, handle))
    try:
        async with aclosing(handle.events()) as events:
            async for _ in events:
                pass
    finally:
        watch.cancel()


async def gone(request: Request) -> None:
    """Until the client has left (its body was read already: what is left to receive is its leaving)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def left(watch: asyncio.Task[None], handle: RunHandle) -> None:
    """`gone` ended: the client has left, unless the watch was called off (the run ended first)."""
    if not watch.cancelled() and watch.exception() is None:
        handle.cancel()


@router.post("/api/assistants/{assistant_id}/runs", tags=["runs"], response_model=None,
             responses=doc.answers(shapes.RunOut, 400, 401, 404, 409, 413, 429, stream=doc.EVENTS))  # fmt: skip
async def run(assistant_id: str, body: RunBody, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Run an assistant: SSE of the run's events, or its result as JSON with `?stream=false`.

    `chat_id` continues one of the caller's chats (404 for any other id); without it the run starts a
    new chat, whose id the server returns (`X-Chat-Id`, `stream_start`, the JSON result).
    """
    check_messages(server_settings(request), body.messages)
    ask = RunRequest(assistant_id, who, body.messages, chat_id=body.chat_id, metadata=body.metadata or {},
                     on_busy=body.on_busy, chat_must_exist=True,
                     traceparent=request.headers.get("traceparent"))  # fmt: skip
    handle = await runs_of(request).start(ask)
    return streamed(request, handle) if stream else await drained(request, handle)


@router.post("/api/chats/{chat_id}/cancel", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.CancelOut, 401, 404))  # fmt: skip
async def cancel(chat_id: str, request: Request, who: Caller) -> shapes.CancelOut:
    """Cancel the chat's active run and every request accepted before this one, in every server process;
    answers how many were cancelled (see `Runs.cancel`)."""
    return {"cancelled": await runs_of(request).cancel(who, chat_id)}


@router.post("/api/chats/{chat_id}/append", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.AppendOut, 400, 401, 404, 409, 413))  # fmt: skip
async def append(chat_id: str, body: AppendBody, request: Request, who: Caller) -> shapes.AppendOut:
    """Add user messages to the chat's active run; its next model call sees them (409 if none runs)."""
    check_messages(server_settings(request), body.messages)
    return {"run_id": await runs_of(request).append(who, chat_id, body.messages)}


@router.get("/api/chats", tags=["chats"], response_model=None, responses=doc.answers(shapes.ChatsOut, 400, 401))
async def chats(request: Request, who: Caller, q: doc.Search = "") -> shapes.ChatsOut:
    """The caller's chats, most recently active first; `q` keeps those whose title or messages contain it."""
    search_query(request)
    found = await runs_of(request).chats(who, query=q)
    return {"chats": [c.to_api() for c in found]}


Versions = Annotated[bool, Query(description="true: the earlier versions too (replaced by a regeneration or an "
                                              "edit), each in its place, with `replaced_by`")]  # fmt: skip


@router.get("/api/chats/{chat_id}/messages", tags=["chats"], response_model=None,
            responses=doc.answers(shapes.MessagesOut, 400, 401, 404))  # fmt: skip
async def messages(chat_id: str, request: Request, who: Caller, versions: Versions = False) -> shapes.MessagesOut:
    """The chat's messages, oldest first: its current version; `?versions=true` adds the earlier ones."""
    found = await runs_of(request).messages(who, chat_id, versions=versions)
    return {"chat_id": chat_id, "messages": [m.to_api() for m in found]}


class RegenerateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] | None = None


# A message's content, as a run's messages take it: text, or a non-empty list of typed parts.
CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "object"}}]}


class EditBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: str = Field(description="the user message to change: one of the chat's current messages")
    content: Annotated[Any, WithJsonSchema(CONTENT)] = Field(
        description="its new content: text, or a list of content parts, as a run's message has"
    )
    metadata: dict[str, Any] | None = None


@router.post("/api/chats/{chat_id}/regenerate", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.RunOut, 400, 401, 404, 409, 413, 429, stream=doc.EVENTS))  # fmt: skip
async def regenerate(
    chat_id: str, request: Request, who: Caller, body: RegenerateBody | None = None, stream: Streamed = True
) -> Any:
    """Answer the chat's last user message again, as a new run (SSE, or JSON with `?stream=false`): what
    followed the message becomes an earlier version (see `?versions=true` of its messages). 400 when the
    chat has no user message; 409 while a run of it is active."""
    metadata = body.metadata if body is not None else None
    handle = await runs_of(request).versions.regenerate(who, chat_id, metadata, request.headers.get("traceparent"))
    return streamed(request, handle) if stream else await drained(request, handle)


@router.post("/api/chats/{chat_id}/edit", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.RunOut, 400, 401, 404, 409, 413, 429, stream=doc.EVENTS))  # fmt: skip
async def edit(chat_id: str, body: EditBody, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Change one of the chat's user messages and answer it, as a new run (SSE, or JSON with
    `?stream=false`): the message and what followed it become an earlier version, the new content the run's
    user message. 404 when the chat has no such message, 400 when it is not a current user message."""
    handle = await runs_of(request).versions.edit(who, chat_id, body.message_id, body.content, body.metadata,
                                                  request.headers.get("traceparent"))  # fmt: skip
    return streamed(request, handle) if stream else await drained(request, handle)


@router.get("/api/chats/{chat_id}/resume", tags=["chats"], response_model=None,
            responses=doc.answers(shapes.ResumePointOut, 401, 404))  # fmt: skip
async def resume_point(chat_id: str, request: Request, who: Caller) -> shapes.ResumePointOut:
    return (await runs_of(request).resume_point(who, chat_id)).to_api()


@router.post("/api/chats/{chat_id}/resume", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.RunOut, 400, 401, 404, 409, 429, stream=doc.EVENTS))  # fmt: skip
async def resume(chat_id: str, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Continue the chat's failed, cancelled or interrupted run (SSE, or JSON with `?stream=false`). A reply
    it cut off mid-stream is continued where it stopped: the new message `continues` the cut one."""
    with ids.joined(request.headers.get("traceparent")):  # the pipeline builds this run's request
        handle = await runs_of(request).resume(who, chat_id)
    return streamed(request, handle) if stream else await drained(request, handle)


class DecisionsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decisions: list[Any] = Field(
        min_length=1, description="one per pending call: {tool_call_id, approve: true} or {…, approve: false, reason?}"
    )


@router.get("/api/chats/{chat_id}/approvals", tags=["chats"], response_model=None,
            responses=doc.answers(shapes.ApprovalsOut, 401, 404))  # fmt: skip
async def approvals(chat_id: str, request: Request, who: Caller) -> shapes.ApprovalsOut:
    """The tool calls the chat's run waits for a person to approve (404 when none waits)."""
    point = await runs_of(request).conversations.approvals(who, chat_id)
    return {"chat_id": point.run.chat_id, "run_id": point.run.id, "approvals": [a.request() for a in point.pending]}


@router.post("/api/chats/{chat_id}/approvals", tags=["chats"], response_model=None,
             responses=doc.answers(shapes.RunOut, 400, 401, 404, 409, 429, stream=doc.EVENTS))  # fmt: skip
async def decide(chat_id: str, body: DecisionsBody, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Decide every pending call and continue the run: approved calls run, denied ones are answered
    `denied: <reason>` (SSE, or JSON with `?stream=false`); 409 when they were decided already."""
    with ids.joined(request.headers.get("traceparent")):  # the pipeline builds this run's request
        handle = await runs_of(request).decide(who, chat_id, body.decisions)
    return streamed(request, handle) if stream else await drained(request, handle)


@router.get("/api/chats/{chat_id}/runs/{run_id}", tags=["chats"], response_model=None,
            responses=doc.answers(shapes.RunViewOut, 401, 404))  # fmt: skip
async def run_view(chat_id: str, run_id: str, request: Request, who: Caller) -> shapes.RunViewOut:
    """One run: how it ended, its usage, and its steps with why each model call was made (`transition`)."""
    return (await runs_of(request).run_view(who, chat_id, run_id)).to_api()


def search_query(request: Request) -> None:
    """A list query says `q` once or not at all: anything else would be dropped unseen, so it is refused."""
    given = request.query_params.multi_items()
    unknown_names = sorted({name for name, _ in given if name != "q"})
    if unknown_names:
        raise UsageError(f"unknown query parameter {unknown_names[0]!r} (expected only q, the search text)")
    if len(given) > 1:
        raise UsageError("q: expected one search text, got several")


class TitleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(description="1-200 characters of plain text on one line")


@router.patch("/api/chats/{chat_id}", tags=["chats"], response_model=None,
              responses=doc.answers(shapes.ChatOut, 400, 401, 404, 413))  # fmt: skip
async def rename_chat(chat_id: str, body: TitleBody, request: Request, who: Caller) -> shapes.ChatOut:
    """Rename the chat: `{"title": "..."}`; answers the chat as `GET /api/chats` lists it."""
    return (await runs_of(request).rename(who, chat_id, body.title)).to_api()


@router.delete("/api/chats/{chat_id}", tags=["chats"], response_model=None,
               responses=doc.answers(shapes.DeletedOut, 401, 404, 409))  # fmt: skip
async def delete_chat(chat_id: str, request: Request, who: Caller) -> shapes.DeletedOut:
    """Delete the chat and everything stored for it (messages, runs, steps, hook memory); 409 while it runs."""
    await runs_of(request).delete(who, chat_id)
    return {"chat_id": chat_id, "deleted": True}


@router.get("/api/assistants", tags=["assistants"], response_model=None,
            responses=doc.answers(shapes.AssistantsOut, 401))  # fmt: skip
async def assistants(request: Request, who: Caller) -> shapes.AssistantsOut:
    return {"assistants": visible(runs_of(request), who)}


@router.put("/api/roles/{role}", tags=["roles"], response_model=None,
            responses=doc.answers(shapes.RoleOut, 400, 401, 403, 413))  # fmt: skip
async def set_role(role: str, body: RoleBody, request: Request, who: Caller) -> shapes.RoleOut:
    """Map a role for the caller's team (a team admin; 403 for a member), or, for a caller without a team,
    the caller.

    Only to connectors the caller may use (their `access`): any other is unknown to them, in the same
    words as one that does not exist, and the answer lists only a few they may use."""
    chain = body.connectors if body.connectors is not None else ([body.connector] if body.connector else [])
    if not chain or (body.connector and body.connectors):
        raise UsageError("give either connector (an id) or connectors (a non-empty list of ids)")
    await runs_of(request).set_role(who, role, chain)
    return {"role": role, "scope": scope_of(who), "connectors": chain}


@router.get("/api/roles", tags=["roles"], response_model=None, responses=doc.answers(shapes.RolesOut, 401))
async def roles(request: Request, who: Caller) -> shapes.RolesOut:
    """The role mappings of the caller's team (or, for a caller without a team, the caller's own), and
    app.yml's, which apply to a role the scope does not map."""
    runs = runs_of(request)
    own: list[shapes.RoleSettingOut] = [
        {"role": s.role, "connectors": list(s.connectors), "updated_at": iso_time(s.updated_at)}
        for s in await runs.roles(who)
    ]
    app: list[shapes.AppRoleOut] = [
        {"role": r, "connectors": list(c)} for r, c in sorted(runs.app.config.roles.items())
    ]
    return {"scope": scope_of(who), "roles": own, "app_roles": app}


@router.delete("/api/roles/{role}", tags=["roles"], response_model=None,
               responses=doc.answers(shapes.RoleDeletedOut, 401, 403, 404))  # fmt: skip
async def unset_role(role: str, request: Request, who: Caller) -> shapes.RoleDeletedOut:
    """Remove the caller's scope's mapping of a role (app.yml's applies again; a team's: team admins only,
    403 for a member); 404 when it maps none."""
    await runs_of(request).unset_role(who, role)
    return {"role": role, "scope": scope_of(who), "deleted": True}


@router.get(
    "/healthz", tags=["health"], response_model=None, responses={200: {"content": doc.schema_of(shapes.HealthOut)}}
)
async def healthz() -> shapes.HealthOut:
    return {"status": "ok"}


@router.head("/healthz", include_in_schema=False)
async def healthz_head() -> Response:
    """GET's answer without its body, for the probes and monitors that ask with HEAD."""
    return JSONResponse({"status": "ok"})
