"""The native API: runs as SSE of the contract's events (or JSON), cancel, append, chats, resume, roles."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.dsl.specs import ServerSettings
from yao_agent.errors import ChatBusy, NotFound, UsageError
from yao_agent.events import to_json
from yao_agent.identity import Identity
from yao_agent.messages import iso_time
from yao_agent.pipeline import RunHandle, RunRequest, Runtime, start, start_resume
from yao_agent.pipeline.permission import CHAT_ID, valid_chat_id
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.limits import check_messages
from yao_agent.vocabulary import OnBusy

router = APIRouter()
Streamed = Annotated[bool, Query(description="false: wait for the run and answer with JSON")]
ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # app.yml's role names, within the store's 128


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


def runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def server_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


def chat_id_shape(chat_id: str) -> str:
    """A chat id no chat can have (the store would choke on it) is an unknown chat: 404."""
    if not CHAT_ID.fullmatch(chat_id):
        raise NotFound(f"no chat '{chat_id}'")
    return chat_id


async def known_chat(rt: Runtime, who: Identity, chat_id: str | None) -> str | None:
    """A chat id a client sends must name one of its chats: over HTTP, the server names new ones.

    So an id made up by the caller answers exactly as another tenant's does (404), and neither
    confirms that a chat exists. A chat whose first run is still starting is the caller's already.
    """
    if chat_id is None:
        return None
    valid_chat_id(chat_id)
    if any(h.state.chat_id == chat_id and h.state.identity == who for h in rt.active.values()):
        return chat_id
    if await rt.store.check_chat(who, chat_id) is None:
        raise NotFound(f"no chat '{chat_id}'")
    return chat_id


def visible(rt: Runtime, who: Identity) -> list[dict[str, str]]:
    return [
        {"id": a.id, "name": a.name, "description": a.description}
        for a in rt.app.assistants.values()
        if a.access.allows(who.user_id, who.team_id)
    ]


def usable(rt: Runtime, who: Identity, assistant_id: str) -> str:
    """An assistant the caller may not use does not exist for them: 404, naming only a few they can see."""
    known = [a["id"] for a in visible(rt, who)]
    if assistant_id not in known:
        raise NotFound(unknown("assistant", assistant_id, known, HANDFUL))
    return assistant_id


async def sse(handle: RunHandle) -> AsyncIterator[bytes]:
    """The run's events as SSE frames; the reader leaving (a closed connection) cancels the run.

    Frames that were waiting together go out in one write: a connection that fell behind catches up
    without one send per event."""
    async with aclosing(handle.batches()) as batches:
        async for batch in batches:
            yield frames(to_json(event) for event in batch)


def frames(payloads: Iterable[str]) -> bytes:
    """SSE frames, as bytes. A lone surrogate (a model can send one) can only be written escaped,
    and since it is always inside a JSON string, its escape is the JSON escape of the same value."""
    return "".join(f"data: {payload}\n\n" for payload in payloads).encode("utf-8", "backslashreplace")


def streamed(handle: RunHandle) -> EventSourceResponse:
    headers = {"X-Chat-Id": handle.state.chat_id, "Cache-Control": "no-cache"}
    return EventSourceResponse(sse(handle), headers=headers, sep="\n", ping=15)


async def drained(request: Request, handle: RunHandle) -> JSONResponse:
    await to_the_end(request, handle)
    return JSONResponse(handle.result().to_api(), headers={"X-Chat-Id": handle.state.chat_id})


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
             responses=doc.answers(doc.RunOut, 400, 401, 404, 409, 413, stream=doc.EVENTS))  # fmt: skip
async def run(assistant_id: str, body: RunBody, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Run an assistant: SSE of the run's events, or its result as JSON with `?stream=false`.

    `chat_id` continues one of the caller's chats (404 for any other id); without it the run starts a
    new chat, whose id the server returns (`X-Chat-Id`, `stream_start`, the JSON result).
    """
    rt = runtime(request)
    check_messages(server_settings(request), body.messages)
    usable(rt, who, assistant_id)
    chat_id = await known_chat(rt, who, body.chat_id)
    ask = RunRequest(assistant_id, who, body.messages, chat_id=chat_id, metadata=body.metadata or {},
                     on_busy=body.on_busy)  # fmt: skip
    handle = await start(rt, ask)
    return streamed(handle) if stream else await drained(request, handle)


@router.post("/api/chats/{chat_id}/cancel", tags=["chats"], response_model=None,
             responses=doc.answers(doc.CancelOut, 401, 404))  # fmt: skip
async def cancel(chat_id: str, request: Request, who: Caller) -> dict[str, int]:
    """Cancel the chat's active run and every request accepted before this one, in every server process;
    answers how many were cancelled (see `Runtime.cancel`)."""
    chat_id_shape(chat_id)
    return {"cancelled": await runtime(request).cancel(who, chat_id)}


@router.post("/api/chats/{chat_id}/append", tags=["chats"], response_model=None,
             responses=doc.answers(doc.AppendOut, 400, 401, 404, 409, 413))  # fmt: skip
async def append(chat_id: str, body: AppendBody, request: Request, who: Caller) -> dict[str, str]:
    """Add user messages to the chat's active run; its next model call sees them (409 if none runs)."""
    rt = runtime(request)
    check_messages(server_settings(request), body.messages)
    await known_chat(rt, who, chat_id_shape(chat_id))
    return {"run_id": rt.append(who, chat_id, body.messages)}


@router.get("/api/chats", tags=["chats"], response_model=None, responses=doc.answers(doc.ChatsOut, 400, 401))
async def chats(request: Request, who: Caller, q: doc.Search = "") -> dict[str, Any]:
    """The caller's chats, most recently active first; `q` keeps those whose title or messages contain it."""
    search_query(request)
    found = await runtime(request).store.list_chats(who, query=q)
    return {"chats": [c.to_api() for c in found]}


@router.get("/api/chats/{chat_id}/messages", tags=["chats"], response_model=None,
            responses=doc.answers(doc.MessagesOut, 401, 404))  # fmt: skip
async def messages(chat_id: str, request: Request, who: Caller) -> dict[str, Any]:
    store = runtime(request).store
    if await store.check_chat(who, chat_id_shape(chat_id)) is None:
        raise NotFound(f"no chat '{chat_id}'")
    return {"chat_id": chat_id, "messages": [m.to_api() for m in await store.history(who, chat_id)]}


@router.get("/api/chats/{chat_id}/resume", tags=["chats"], response_model=None,
            responses=doc.answers(doc.ResumePointOut, 401, 404))  # fmt: skip
async def resume_point(chat_id: str, request: Request, who: Caller) -> dict[str, Any]:
    store = runtime(request).store
    if await store.check_chat(who, chat_id_shape(chat_id)) is None:
        raise NotFound(f"no chat '{chat_id}'")
    point = await store.resume_point(who, chat_id)
    if point is None:
        raise NotFound(f"chat '{chat_id}' has no resume point")
    return point.to_api()


@router.post("/api/chats/{chat_id}/resume", tags=["chats"], response_model=None,
             responses=doc.answers(doc.RunOut, 400, 401, 404, 409, stream=doc.EVENTS))  # fmt: skip
async def resume(chat_id: str, request: Request, who: Caller, stream: Streamed = True) -> Any:
    """Continue the chat's failed, cancelled or interrupted run (SSE, or JSON with `?stream=false`)."""
    handle = await start_resume(runtime(request), who, chat_id_shape(chat_id))
    return streamed(handle) if stream else await drained(request, handle)


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
              responses=doc.answers(doc.ChatOut, 400, 401, 404, 413))  # fmt: skip
async def rename_chat(chat_id: str, body: TitleBody, request: Request, who: Caller) -> dict[str, Any]:
    """Rename the chat: `{"title": "..."}`; answers the chat as `GET /api/chats` lists it."""
    renamed = await runtime(request).store.rename_chat(who, chat_id_shape(chat_id), body.title)
    return renamed.to_api()


@router.delete("/api/chats/{chat_id}", tags=["chats"], response_model=None,
               responses=doc.answers(doc.DeletedOut, 401, 404, 409))  # fmt: skip
async def delete_chat(chat_id: str, request: Request, who: Caller) -> dict[str, Any]:
    """Delete the chat and everything stored for it (messages, runs, steps, hook memory); 409 while it runs."""
    rt = runtime(request)
    chat_id_shape(chat_id)
    if not running_here(rt, who, chat_id) and await rt.store.check_chat(who, chat_id) is None:
        raise NotFound(f"no chat '{chat_id}'")
    # asked again: a run may have started while the store was answering
    if running_here(rt, who, chat_id) or not await rt.store.delete_chat(who, chat_id):
        raise ChatBusy(f"chat '{chat_id}' has a run in progress: cancel it or let it end, then delete the chat")
    return {"chat_id": chat_id, "deleted": True}


def running_here(rt: Runtime, who: Identity, chat_id: str) -> bool:
    """Whether a run of the caller's on this chat is active or waiting in this process (even before it is stored).

    Only the caller's own count, so that a busy answer never tells who else has a chat of that id.
    """
    state = rt.admission.active_state(chat_id)
    return (state is not None and state.identity == who) or any(
        h.state.chat_id == chat_id and h.state.identity == who for h in rt.active.values()
    )


@router.get("/api/assistants", tags=["assistants"], response_model=None,
            responses=doc.answers(doc.AssistantsOut, 401))  # fmt: skip
async def assistants(request: Request, who: Caller) -> dict[str, Any]:
    return {"assistants": visible(runtime(request), who)}


@router.put("/api/roles/{role}", tags=["roles"], response_model=None,
            responses=doc.answers(doc.RoleOut, 400, 401, 413))  # fmt: skip
async def set_role(role: str, body: RoleBody, request: Request, who: Caller) -> dict[str, Any]:
    """Map a role for the caller's team (or, for a caller without a team, the caller).

    Only to connectors the caller may use (their `access`): any other is unknown to them, in the same
    words as one that does not exist, and the answer lists only a few they may use."""
    rt = runtime(request)
    if not ROLE.fullmatch(role):
        raise UsageError(f"invalid role name {role!r} (expected 1-128 letters, digits, _.-)")
    chain = body.connectors if body.connectors is not None else ([body.connector] if body.connector else [])
    if not chain or (body.connector and body.connectors):
        raise UsageError("give either connector (an id) or connectors (a non-empty list of ids)")
    allowed = rt.app.connectors_for(who.user_id, who.team_id)
    for connector in chain:
        if connector not in allowed:
            raise UsageError(unknown("connector", connector, allowed, HANDFUL))
    scope = who.settings_scope
    await rt.store.set_role(scope, role, chain)
    return {"role": role, "scope": f"{scope[0]}:{scope[1]}", "connectors": chain}


@router.get("/api/roles", tags=["roles"], response_model=None, responses=doc.answers(doc.RolesOut, 401))
async def roles(request: Request, who: Caller) -> dict[str, Any]:
    """The role mappings of the caller's team (or, for a caller without a team, the caller's own), and
    app.yml's, which apply to a role the scope does not map."""
    rt = runtime(request)
    scope = who.settings_scope
    settings = await rt.store.list_roles(scope)
    own = [{"role": s.role, "connectors": list(s.connectors), "updated_at": iso_time(s.updated_at)} for s in settings]
    app = [{"role": r, "connectors": list(c)} for r, c in sorted(rt.app.config.roles.items())]
    return {"scope": f"{scope[0]}:{scope[1]}", "roles": own, "app_roles": app}


@router.delete("/api/roles/{role}", tags=["roles"], response_model=None,
               responses=doc.answers(doc.RoleDeletedOut, 401, 404))  # fmt: skip
async def unset_role(role: str, request: Request, who: Caller) -> dict[str, Any]:
    """Remove the caller's scope's mapping of a role (app.yml's applies again); 404 when it maps none."""
    rt = runtime(request)
    scope = who.settings_scope
    if not ROLE.fullmatch(role) or not await rt.store.delete_role(scope, role):
        raise NotFound(f"role '{role}' is not set for {scope[0]} {scope[1]}")
    return {"role": role, "scope": f"{scope[0]}:{scope[1]}", "deleted": True}


@router.get("/healthz", tags=["health"], response_model=None, responses={200: {"model": doc.HealthOut}})
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.head("/healthz", include_in_schema=False)
async def healthz_head() -> Response:
    """GET's answer without its body, for the probes and monitors that ask with HEAD."""
    return JSONResponse({"status": "ok"})
