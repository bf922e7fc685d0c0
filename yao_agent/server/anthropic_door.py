"""Anthropic's Messages API, `POST /v1/messages`: Anthropic's clients (its SDKs, tools built on them) talk
to an assistant.

`model` is the assistant id; the request is read by `anthropic_body`. The key comes as `x-api-key` (what
Anthropic's clients send) or as a bearer token (auth.py takes either on this route). A chat continues
through the `X-Chat-Id` header, as on the OpenAI door, and the answer names it in `X-Chat-Id`; a client
that resends the whole conversation adds only what is new to it.

The answer is one `message` with a text block, or its stream: `message_start`, a `ping`, then the text
as `content_block_start`, `content_block_delta` (`text_delta`) and `content_block_stop`, then
`message_delta` (`stop_reason`, the run's usage) and `message_stop`; each frame with its `event:` line,
which Anthropic's clients dispatch on. The assistant's tools run on the server, so none of its calls
reaches the client. The client's own `tools` are offered beside them: a run that waits for the client
to run some (reason `client_tools`) answers its reply's text block, if it said anything, then a
`tool_use` block per call, `stop_reason: "tool_use"`; streamed, each call is a block of its own after
the text's (index 0 only when there is text): `content_block_start` with an empty `input`, one
`input_json_delta` with the whole input's JSON, `content_block_stop`. The client's `tool_result` turn
continues the run (pipeline/client_tools.py). The model's reasoning stays out (Anthropic's thinking
blocks carry a signature only Anthropic makes). As on the OpenAI door, a structured run's answer comes
whole once validated, a run cut short by `max_turns` ends `max_tokens`, and a run waiting for approvals
says what waits (header `X-Yao-Status: waiting`). `stop_sequence` stays null: the providers behind an
assistant do not say which stop sequence ended a reply, so that reply ends `end_turn`.

Errors on this route are in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}` with
Anthropic's kinds (`AnthropicErrors` rewrites every error answer of the route, those of the layers in
front of it included); a failure after the stream began is an `error` event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yao_agent import shapes
from yao_agent.base.jsonvalue import as_mapping
from yao_agent.events import Event, MessageDelta, StreamEnd
from yao_agent.messages import text_of
from yao_agent.pipeline import RunHandle, RunRequest, guard, output
from yao_agent.server import schemas as doc
from yao_agent.server.anthropic_body import MessagesBody, tool_use_block
from yao_agent.server.auth import API_KEY_ROUTES, Caller, local_path
from yao_agent.server.errors import retry_after
from yao_agent.server.limits import check_messages
from yao_agent.server.native import runs_of, server_settings, to_the_end
from yao_agent.server.openai_compat import (
    CLIENT_TOOLS,
    CUT_SHORT,
    FAILURE_STATUS,
    RETRYABLE,
    WAITING,
    answered,
    final_text,
    waiting_notice,
    waiting_text,
)
from yao_agent.server.sse import EventStream, relayed

ROUTE = "/v1/messages"
# Anthropic's error kinds, by status (request_too_large is the one Anthropic documents for a 413).
KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 408: "timeout_error", 409: "conflict_error", 413: "request_too_large",
         429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error",
         504: "timeout_error"}  # fmt: skip
STREAM = ("`event: <type>` and `data: <json>` lines per event: `message_start`, `ping`, `content_block_start`, "
          "`content_block_delta`, `content_block_stop`, `message_delta`, `message_stop` (or an `error`)")  # fmt: skip
ERRORS = sorted({400, 401, 404, 409, 413, 429, *FAILURE_STATUS.values()})
api_key = APIKeyHeader(name="x-api-key", auto_error=False, description="the token, as Anthropic's clients send it")
router = APIRouter()


def kind_of(status: int) -> str:
    return KINDS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(status: int, kind: str, message: str) -> shapes.AnthropicErrorBody:
    """An error in Anthropic's shape, with this server's own kind as `details.error_code`."""
    return {"type": "error", "error": {"type": kind_of(status), "message": message, "details": {"error_code": kind}}}


def answers() -> dict[int | str, dict[str, Any]]:
    """The route's answers for the OpenAPI document: the message (or its stream), errors in Anthropic's shape."""
    return doc.answers(shapes.AnthropicMessageOut, *ERRORS, stream=STREAM, error=shapes.AnthropicErrorBody)


async def _declared_key(_key: str | None = Depends(api_key)) -> None:
    """Only declares the `x-api-key` header: auth.py checks it, before the body is read."""


@router.post(ROUTE, tags=["anthropic"], response_model=None, responses=answers(),
             dependencies=[Depends(_declared_key)])  # fmt: skip
async def messages(body: MessagesBody, request: Request, who: Caller) -> Any:
    """An Anthropic message by the assistant `model`, streamed (`stream: true`) or not."""
    body.check()
    await body.check_output_schema()
    ours = body.our_messages()
    check_messages(server_settings(request), ours)
    given = request.headers.get("x-chat-id") or None
    ask = RunRequest(body.model, who, ours, chat_id=given, metadata=body.run_metadata(),
                     options=body.call_options(), chat_must_exist=True,
                     traceparent=request.headers.get("traceparent"), client_tools=body.client_tools(),
                     tool_choice=body.choice())  # fmt: skip
    handle = await runs_of(request).start(ask)
    headers = {"X-Chat-Id": handle.chat_id}
    if body.stream and not await guard.screened(handle.state):  # a blocked input is an error, not a stream
        return EventStream(stream(handle, body.model, request.scope), {**headers, "Cache-Control": "no-store"})
    return await whole(request, handle, body.model, headers)


StopReason = Literal["end_turn", "max_tokens", "tool_use"]


def stop_reason(reason: str) -> StopReason:
    if reason == CLIENT_TOOLS:
        return "tool_use"
    return "max_tokens" if reason in CUT_SHORT else "end_turn"


def usage_of(usage: Mapping[str, Any]) -> shapes.MessageUsageOut:
    return {"input_tokens": int(usage.get("input_tokens") or 0), "output_tokens": int(usage.get("output_tokens") or 0)}


def message(
    handle: RunHandle, model: str, text: str, reason: str, usage: Mapping[str, Any]
) -> shapes.AnthropicMessageOut:
    content: list[shapes.TextBlockOut | shapes.ToolUseBlockOut] = [{"type": "text", "text": text}] if text else []
    if reason == CLIENT_TOOLS:
        content += [tool_use_block(call) for call in handle.state.client_calls]
    return {"id": f"msg_{handle.run_id}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason(reason), "stop_sequence": None,
            "usage": usage_of(usage)}  # fmt: skip


async def whole(request: Request, handle: RunHandle, model: str, headers: dict[str, str]) -> JSONResponse:
    await to_the_end(request, handle)
    result = handle.result()
    if result.reason == CLIENT_TOOLS:  # the reply's words, and the calls for the client to run
        answer = message(handle, model, asking_text(handle), result.reason, result.usage)
        return JSONResponse(answer, headers=headers)
    if result.status == WAITING:
        answer = message(handle, model, waiting_text(handle, result.approvals), result.reason, result.usage)
        return JSONResponse(answer, headers={**headers, "X-Yao-Status": WAITING})
    if not answered(result.status, result.reason):
        status, said = failure(result.reason, result.status, result.error)
        if as_mapping(result.error).get("kind") == "bad_request":  # refused for what the caller sent (as openai_compat)
            status = 400
        if result.reason not in RETRYABLE or status == 400:
            headers = {**headers, "x-should-retry": "false"}
        resets = as_mapping(result.error).get("resets_at")
        if result.reason == "budget_exceeded" and isinstance(resets, str):
            seconds = datetime.fromisoformat(resets).timestamp() - runs_of(request).rt.clock()
            headers["Retry-After"] = retry_after(seconds)
        return JSONResponse(anthropic_error(status, result.reason, said), status_code=status, headers=headers)
    return JSONResponse(message(handle, model, final_text(handle), result.reason, result.usage), headers=headers)


def asking_text(handle: RunHandle) -> str:
    """What the reply that called the client's tools said with its calls (as openai_compat's `_calling`)."""
    asked = [m for m in handle.state.new_messages if m.role == "assistant" and m.tool_calls][-1:]
    return text_of(asked[0].content) if asked else ""


def failure(reason: str, status: str, error: object) -> tuple[int, str]:
    """A run's failure: its HTTP status and what it says."""
    said = as_mapping(error).get("message") or f"the run ended {status} ({reason})"
    return FAILURE_STATUS.get(reason, 500), str(said)


# --- the stream -----------------------------------------------------------------------------------------


def frame(payload: Mapping[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _encoded(frames: list[str]) -> bytes:
    """As native.frames: a lone surrogate a model sent can only be written escaped, inside a JSON string."""
    return "".join(frames).encode("utf-8", "backslashreplace")


# A text delta's frame around its text, written once (a delta is most of a stream's frames).
_DELTA_BEFORE, _DELTA_AFTER = frame(
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "\x00"}}
).split(json.dumps("\x00"))
_string = json.JSONEncoder(ensure_ascii=False).encode
OPEN = frame({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
CLOSE = frame({"type": "content_block_stop", "index": 0})


def delta(text: str) -> str:
    return _DELTA_BEFORE + _string(text) + _DELTA_AFTER


class _Text:
    """The one text block of a stream: opened at its first text, its deltas, and the run's end once it came."""

    def __init__(self, structured: bool) -> None:
        self.structured = structured  # its text is held until the end, validated
        self.opened = False
        self.end: StreamEnd | None = None

    def frames(self, batch: list[Event]) -> list[str]:
        out: list[str] = []
        for event in batch:
            if isinstance(event, MessageDelta) and event.kind == "text" and event.text and not self.structured:
                out += self.said(event.text)
            elif isinstance(event, StreamEnd):
                self.end = event
        return out

    def said(self, text: str) -> list[str]:
        opening = [] if self.opened else [OPEN]
        self.opened = True
        return [*opening, delta(text)]


async def stream(handle: RunHandle, model: str, scope: Scope | None = None) -> AsyncIterator[bytes]:
    """The run as Anthropic's stream events (see the module's doc); a failure ends it with an `error` event."""
    start: dict[str, Any] = {**message(handle, model, "", "", {}), "stop_reason": None}  # (known at the end)
    yield _encoded([frame({"type": "message_start", "message": start}), frame({"type": "ping"})])
    text = _Text(output.expected(handle.state) is not None)
    async with aclosing(relayed(handle, lambda batch: _encoded(text.frames(batch)), scope)) as bodies:
        async for body in bodies:
            yield body
    yield _encoded(_last(handle, text))


def _last(handle: RunHandle, text: _Text) -> list[str]:
    end = text.end
    if end is not None and not answered(end.status, end.reason):
        status, said = failure(end.reason, end.status, end.error)
        return [frame(anthropic_error(status, end.reason, said))]
    out: list[str] = []
    reason = end.reason if end is not None else ""
    if reason == CLIENT_TOOLS:  # the calls follow the text block, each a block of its own
        out += [CLOSE] if text.opened else []
        out += tool_use_frames(handle, first=1 if text.opened else 0)
    else:
        if end is not None and end.status == WAITING:
            notice = waiting_notice(handle.chat_id, end.approvals)
            out += text.said("\n\n" + notice if text.opened else notice)
        elif text.structured:
            answer = final_text(handle)
            out += text.said(answer) if answer else []
        out += [CLOSE] if text.opened else []
    usage = dict(usage_of(end.usage if end is not None else {}))
    stop = {"type": "message_delta", "delta": {"stop_reason": stop_reason(reason), "stop_sequence": None},
            "usage": usage}  # fmt: skip
    return [*out, frame(stop), frame({"type": "message_stop"})]


def tool_use_frames(handle: RunHandle, first: int) -> list[str]:
    """The client's calls as Anthropic streams `tool_use` blocks, from block index `first`: each opened with
    an empty input, its input's JSON in one `input_json_delta`, closed."""
    out: list[str] = []
    for index, call in enumerate(handle.state.client_calls, start=first):
        block = tool_use_block(call)
        opened: dict[str, Any] = {**block, "input": {}}
        given = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        out += [frame({"type": "content_block_start", "index": index, "content_block": opened}),
                frame({"type": "content_block_delta", "index": index, "delta": given}),
                frame({"type": "content_block_stop", "index": index})]  # fmt: skip
    return out


# --- errors in Anthropic's shape -----------------------------------------------------------------------


class AnthropicErrors:
    """Every error answer of the Anthropic route in Anthropic's shape, whichever layer made it (a 401 of
    auth.py, a 413 or 503 of limits.py, a route's 404): placed in front of them, it rewrites the body of
    any answer of 400 or more on that route. Other routes, and successes, pass as they are."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or local_path(scope) not in API_KEY_ROUTES:
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        parts: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = rewritten(held["status"], b"".join(parts))
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            await send({**held, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, sending)


def rewritten(status: int, body: bytes) -> bytes:
    """Our error body `{"error": {"type", "message", ...}}` as Anthropic's (one the route wrote in
    Anthropic's shape already stays as it is)."""
    try:
        given: Mapping[str, Any] = as_mapping(json.loads(body))
    except ValueError:
        given = {}
    if given.get("type") == "error":
        return body
    error: Mapping[str, Any] = as_mapping(given.get("error"))
    kind = str(error.get("type") or "error")
    said = str(error.get("message") or body.decode("utf-8", "replace").strip() or f"HTTP {status}")
    return json.dumps(anthropic_error(status, kind, said), ensure_ascii=False).encode()
