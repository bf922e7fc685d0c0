"""OpenAI's Responses API, `POST /v1/responses` and `GET /v1/responses/{id}`: the Agents SDK's default model
and any Responses client talk to an assistant (CONTRACT §9.2).

`model` is the assistant id; what the request may hold is responses_body's. A response is a run: its id is
`resp_<run id>.<chat id>` (run ids hold no dot), so reading it back or continuing it
(`previous_response_id`) reads that run of the caller's chat from the store — right when the run has ended,
and another tenant's is a 404 like one that never was. A response continues only the latest response of its
chat (a chat has one line of turns: an older one is a 409, as is one still in progress).

The answer's `output` holds one message per answer of the run (a structured run's: its validated answer
only, without a code fence, so `parse` reads it); a run that waits for a person's approval answers with
what waits, as the chat-completions route does. A run whose reply calls the client's own function tools
(pipeline/client_tools.py) ends its output with one `function_call` item per call; the client sends each
result as a `function_call_output` item, with the conversation or after `previous_response_id`, and the
run continues (a new response). Streamed, the events are those the official SDK parses:
`response.created`, `response.in_progress`, per message `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
`response.content_part.done`, `response.output_item.done`, per call of the client's tools
`response.output_item.added`, `response.function_call_arguments.delta` and `.done` and
`response.output_item.done`, and last `response.completed` (or
`response.incomplete`, or `response.failed` with the error), each with its `sequence_number`.
Non-streamed, a run that fails is an error with the status the chat-completions route gives it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.types import Scope

from yao_agent import shapes
from yao_agent.base.jsonvalue import as_mapping
from yao_agent.base.structured import unfenced
from yao_agent.errors import Conflict, NotFound
from yao_agent.events import Event, MessageDelta, MessageEnd, StreamEnd
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, ToolCall, is_json_object, text_of
from yao_agent.pipeline import RunHandle, RunRequest, client_tools, guard, output
from yao_agent.pipeline.permission import CHAT_ID
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import retry_after
from yao_agent.server.limits import check_messages
from yao_agent.server.native import frames, runs_of, server_settings, to_the_end
from yao_agent.server.openai_compat import (
    CUT_SHORT,
    FAILURE_STATUS,
    RETRYABLE,
    WAITING,
    answered,
    failure,
    final_text,
    waiting_text,
)
from yao_agent.server.responses_body import ResponsesBody
from yao_agent.server.sse import EventStream, relayed

router = APIRouter()
PREFIX = "resp_"
Status = Literal["in_progress", "completed", "incomplete", "failed"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]
Json = dict[str, Any]
Item = shapes.OutputMessageOut | shapes.FunctionCallItemOut
EVENTS = ("`data: <json>` frames of Responses events: `response.created`, `response.in_progress`, the output's "
          "`response.output_item.added` … `response.output_item.done`, and last `response.completed`, "
          "`response.incomplete` or `response.failed`")  # fmt: skip
ERRORS = sorted({400, 401, 404, 409, 413, 429, *FAILURE_STATUS.values()})


def response_id(chat_id: str, run_id: str) -> str:
    return f"{PREFIX}{run_id}.{chat_id}"


def parsed_id(given: str) -> tuple[str, str]:
    """(chat id, run id) of a response id; NotFound for anything that is no response id."""
    run_id, dot, chat_id = given.removeprefix(PREFIX).partition(".")
    if not given.startswith(PREFIX) or not dot or not CHAT_ID.fullmatch(run_id) or not CHAT_ID.fullmatch(chat_id):
        raise NotFound(f"no response '{given[:100]}'")
    return chat_id, run_id


@dataclass(frozen=True, slots=True)
class Echo:
    """What a response object repeats of its request."""

    model: str
    previous: str | None = None
    instructions: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool = True
    store: bool = True
    text: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    tools: tuple[Any, ...] = ()
    tool_choice: str | dict[str, Any] = "auto"

    @classmethod
    def of(cls, body: ResponsesBody) -> Echo:
        given = body.text.format if body.text is not None else None
        text = {"format": given.model_dump(by_alias=True, exclude_none=True)} if given is not None else None
        return cls(body.model, body.previous_response_id, body.instructions, body.temperature, body.top_p,
                   body.max_output_tokens, body.parallel_tool_calls is not False, body.store is not False, text,
                   body.metadata, tuple(body.tools or ()), body.tool_choice or "auto")  # fmt: skip


def response(echo: Echo, rid: str, created: float, status: Status, items: Sequence[Item], usage: Any,
             error: shapes.ResponseErrorOut | None = None) -> shapes.ResponseOut:  # fmt: skip
    """A `response` object; `status` is `completed`, `incomplete` (`max_turns`), `failed` or `in_progress`."""
    incomplete: shapes.IncompleteOut | None = {"reason": "max_turns"} if status == "incomplete" else None
    return {"id": rid, "object": "response", "created_at": int(created), "status": status,
            "model": echo.model, "output": list(items), "previous_response_id": echo.previous,
            "instructions": echo.instructions, "usage": usage_of(as_mapping(usage)), "error": error,
            "incomplete_details": incomplete, "parallel_tool_calls": echo.parallel_tool_calls,
            "tool_choice": echo.tool_choice, "tools": list(echo.tools), "temperature": echo.temperature,
            "top_p": echo.top_p, "max_output_tokens": echo.max_output_tokens, "store": echo.store,
            "text": echo.text or {"format": {"type": "text"}}, "metadata": echo.metadata or {}}  # fmt: skip


def usage_of(usage: Any) -> shapes.ResponseUsageOut:
    given, taken = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return {"input_tokens": given, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": taken,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": given + taken}  # fmt: skip


def message(message_id: str, text: str, status: ItemStatus = "completed") -> shapes.OutputMessageOut:
    return {"type": "message", "id": f"msg_{message_id}", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def function_call(call: ToolCall) -> shapes.FunctionCallItemOut:
    """A call of one of the client's tools, as the item the client runs."""
    return {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": "completed"}  # fmt: skip


def status_of(status: str, reason: str | None) -> Status:
    """A run's end as a response's status."""
    if status == "running":
        return "in_progress"
    if reason in CUT_SHORT:
        return "incomplete"
    return "completed" if status in ("completed", WAITING) else "failed"


@router.post("/v1/responses", tags=["openai"], response_model=None,
             responses=doc.answers(shapes.ResponseOut, *ERRORS, stream=EVENTS))  # fmt: skip
async def create(body: ResponsesBody, request: Request, who: Caller) -> Any:
    """A response by the assistant `model`, streamed (`stream: true`) or not; `previous_response_id`
    continues that response's chat."""
    body.check()
    await body.check_output_schema()
    messages = body.messages()
    check_messages(server_settings(request), messages)
    chat_id = await continued(request, who, body.previous_response_id) if body.previous_response_id else None
    ask = RunRequest(body.model, who, messages, chat_id=chat_id, metadata=body.run_metadata(),
                     options=body.call_options(), chat_must_exist=True, client_tools=body.client_tools(),
                     tool_choice=body.choice(), traceparent=request.headers.get("traceparent"))  # fmt: skip
    handle = await runs_of(request).start(ask)
    headers = {"X-Chat-Id": handle.chat_id}
    if body.stream and not await guard.screened(handle.state):  # a blocked input is an error, not a stream
        return EventStream(streamed(handle, Echo.of(body), request.scope), {**headers, "Cache-Control": "no-store"})
    return await whole(request, handle, Echo.of(body), headers)


async def continued(request: Request, who: Identity, previous: str) -> str:
    """The chat a `previous_response_id` continues: the caller's, whose latest run it is, ended."""
    chat_id, run_id = parsed_id(previous)
    store = runs_of(request).conversations.store
    latest = await store.latest_run(who, chat_id)
    if latest is None or await store.run_view(who, chat_id, run_id) is None:
        raise NotFound(f"no response '{previous}'")
    if latest.id != run_id:
        raise Conflict(f"response '{previous}' is not the latest of its chat: continue the latest, "
                       f"{response_id(chat_id, latest.id)}")  # fmt: skip
    if latest.status == "running":
        raise Conflict(f"response '{previous}' is still in progress: continue it once it has ended")
    return chat_id


@router.get("/v1/responses/{response_id}", tags=["openai"], response_model=None,
            responses=doc.answers(shapes.ResponseOut, 401, 404))  # fmt: skip
async def retrieve(response_id: str, request: Request, who: Caller) -> shapes.ResponseOut:
    """A response as its run was stored (at once, as soon as the run has ended). A run whose last answer
    is a JSON object is read as a structured run: that answer only, without a code fence."""
    chat_id, run_id = parsed_id(response_id)
    runs = runs_of(request)
    view = await runs.conversations.store.run_view(who, chat_id, run_id)
    if view is None:
        raise NotFound(f"no response '{response_id}'")
    run = view.run
    # (versions: a response a regeneration or an edit replaced later is still what its run answered)
    said = [m for m in await runs.messages(who, chat_id, versions=True) if m.run_id == run_id]
    texts = [(m.id, text_of(m.content)) for m in _answers(said)]
    status = status_of(run.status, run.reason)
    error: shapes.ResponseErrorOut | None = None
    if status == "failed":
        error = {"code": run.reason or "failed", "message": str(as_mapping(run.error).get("message") or run.reason)}
    items: list[Item] = [message(mid, text) for mid, text in texts]
    if texts and is_json_object(unfenced(texts[-1][1])):  # as a structured run answered: its answer only
        items = [message(texts[-1][0], unfenced(texts[-1][1]))]
    if run.reason == client_tools.REASON:
        items += [function_call(call) for call in client_tools.waiting_calls(view.steps)]
    return response(Echo(run.assistant_id), response_id, run.started_at, status, items, run.usage, error)


def _answers(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The assistant's answers among a run's messages: the text it said after the last user message (its
    input, which may repeat earlier answers, comes before), not a hook's hidden turn."""
    users = [index for index, m in enumerate(messages) if m.role == "user"]
    after = messages[users[-1] + 1 :] if users else messages
    return [m for m in after if m.role == "assistant" and m.content and not m.hidden]


async def whole(request: Request, handle: RunHandle, echo: Echo, headers: dict[str, str]) -> JSONResponse:
    created = time.time()
    await to_the_end(request, handle)
    result = handle.result()
    rid = response_id(handle.chat_id, handle.run_id)
    if not answered(result.status, result.reason):
        return refused(request, result.reason, result.status, result.error, headers)
    replies = _answers(handle.state.new_messages)
    last = replies[-1].id if replies else handle.run_id
    items: list[Item]
    if result.reason == client_tools.REASON:  # the reply's words, then the calls the client runs
        items = [*(message(m.id, text_of(m.content)) for m in replies),
                 *(function_call(call) for call in handle.state.client_calls)]  # fmt: skip
    elif result.status == WAITING:
        items = [message(last, waiting_text(handle, result.approvals))]
        headers = {**headers, "X-Yao-Status": WAITING}
    elif output.expected(handle.state) is not None:
        items = [message(last, final_text(handle))]
    else:
        items = [message(m.id, text_of(m.content)) for m in replies]
    body = response(echo, rid, created, status_of(result.status, result.reason), items, result.usage)
    return JSONResponse(body, headers=headers)


def refused(request: Request, reason: str, status: str, error: Any, headers: dict[str, str]) -> JSONResponse:
    """A run that failed, as the chat-completions route answers it: the status, and whether to retry."""
    code = FAILURE_STATUS.get(reason, 500)
    if as_mapping(error).get("kind") == "bad_request":  # refused for what the caller sent
        code = 400
    if reason not in RETRYABLE or code == 400:
        headers = {**headers, "x-should-retry": "false"}
    resets = as_mapping(error).get("resets_at")
    if reason == "budget_exceeded" and isinstance(resets, str):
        headers["Retry-After"] = retry_after(datetime.fromisoformat(resets).timestamp() - runs_of(request).rt.clock())
    return JSONResponse(failure(reason, status, error), status_code=code, headers=headers)


class _Events:
    """A run's events as Responses stream events: numbered, with each message item opened at its first
    text (a reply of tool calls only is no message of the output) and closed at its end."""

    def __init__(self, handle: RunHandle, echo: Echo) -> None:
        self.handle, self.echo = handle, echo
        self.rid, self.created = response_id(handle.chat_id, handle.run_id), time.time()
        self.seq = 0
        self.open: dict[str, tuple[int, list[str]]] = {}  # message id → (output index, its text so far)
        self.items: list[Item] = []
        self.end: StreamEnd | None = None
        self.structured = output.expected(handle.state) is not None

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def started(self) -> list[Json]:
        now = response(self.echo, self.rid, self.created, "in_progress", [], {})
        return [self.event("response.created", response=now), self.event("response.in_progress", response=now)]

    def of(self, batch: list[Event]) -> list[Json]:
        out: list[Json] = []
        for event in batch:
            if isinstance(event, StreamEnd):
                self.end = event
            elif self.structured or getattr(event, "kind", None) != "text":
                continue  # a structured run's answer comes whole at the end
            elif isinstance(event, MessageDelta) and event.text:
                out += self.said(event.message_id, event.text)
            elif isinstance(event, MessageEnd):
                out += self.closed(event.message_id, event.status)
        return out

    def opened(self, message_id: str) -> list[Json]:
        index = len(self.items) + len(self.open)
        self.open[message_id] = (index, [])
        item = message(message_id, "", "in_progress")
        item["content"] = []
        part: Json = {"type": "output_text", "text": "", "annotations": []}
        where: Json = {"item_id": item["id"], "output_index": index}
        return [self.event("response.output_item.added", output_index=index, item=item),
                self.event("response.content_part.added", **where, content_index=0, part=part)]  # fmt: skip

    def said(self, message_id: str, text: str) -> list[Json]:
        out: list[Json] = [] if message_id in self.open else self.opened(message_id)
        index, pieces = self.open[message_id]
        pieces.append(text)
        return [*out, self.event("response.output_text.delta", item_id=f"msg_{message_id}", output_index=index,
                                 content_index=0, delta=text, logprobs=[])]  # fmt: skip

    def closed(self, message_id: str, status: str) -> list[Json]:
        if message_id not in self.open:
            return []
        index, pieces = self.open.pop(message_id)
        item = message(message_id, "".join(pieces), "incomplete" if status == "incomplete" else "completed")
        self.items.append(item)
        where: Json = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [self.event("response.output_text.done", **where, text=item["content"][0]["text"], logprobs=[]),
                self.event("response.content_part.done", **where, part=item["content"][0]),
                self.event("response.output_item.done", output_index=index, item=item)]  # fmt: skip

    def whole(self, message_id: str, text: str) -> list[Json]:
        """A message sent in one piece: a structured run's answer, or what a waiting run waits for."""
        return [*self.opened(message_id), *self.said(message_id, text), *self.closed(message_id, "completed")]

    def called(self, call: ToolCall) -> list[Json]:
        """A call of the client's tools, streamed as OpenAI streams one: its arguments in one delta."""
        index, item = len(self.items), function_call(call)
        self.items.append(item)
        where: Json = {"item_id": item["id"], "output_index": index}
        return [self.event("response.output_item.added", output_index=index, item={**item, "arguments": "",
                                                                                    "status": "in_progress"}),
                self.event("response.function_call_arguments.delta", **where, delta=call.arguments),
                self.event("response.function_call_arguments.done", **where, name=call.name,
                           arguments=call.arguments),
                self.event("response.output_item.done", output_index=index, item=item)]  # fmt: skip

    def finished(self) -> list[Json]:
        end, out = self.end, list[Json]()
        for message_id in list(self.open):
            out += self.closed(message_id, "incomplete")
        if end is None or not answered(end.status, end.reason):
            reason = end.reason if end is not None else "cancelled"
            said = failure(reason, end.status if end is not None else "cancelled", end.error if end else None)
            error: shapes.ResponseErrorOut = {"code": reason, "message": said["error"]["message"]}
            failed = response(self.echo, self.rid, self.created, "failed", self.items, {}, error)
            return [*out, self.event("response.failed", response=failed)]
        if end.reason == client_tools.REASON:
            for call in self.handle.state.client_calls:
                out += self.called(call)
        elif end.status == WAITING:
            out += self.whole(f"{self.handle.run_id}_waiting", waiting_text(self.handle, end.approvals))
        elif self.structured:
            replies = _answers(self.handle.state.new_messages)
            out += self.whole(replies[-1].id if replies else self.handle.run_id, final_text(self.handle))
        status = status_of(end.status, end.reason)
        done = response(self.echo, self.rid, self.created, status, self.items, end.usage)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*out, self.event(kind, response=done)]


async def streamed(handle: RunHandle, echo: Echo, scope: Scope | None = None) -> AsyncIterator[bytes]:
    """The run as Responses stream events (see the module's doc); events waiting together go out in one write."""
    events = _Events(handle, echo)
    yield frames(_json(e) for e in events.started())
    async with aclosing(relayed(handle, lambda batch: frames(_json(e) for e in events.of(batch)), scope)) as bodies:
        async for body in bodies:
            yield body
    yield frames(_json(e) for e in events.finished())


def _json(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False)
