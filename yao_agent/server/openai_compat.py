"""OpenAI-compatible `/v1/chat/completions` and `/v1/models`: any OpenAI client can talk to an assistant.

`model` is the assistant id. The chat continues through the `X-Chat-Id` header (or
`metadata.chat_id`) and is returned in `X-Chat-Id`. The assistant's tools run here, on the server, so
they never reach the client as `tool_calls` (it would try to run them); a request bringing its own
`tools` is refused. Errors use OpenAI's shape, `{"error": {"message", "type", "code"}}`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat
from sse_starlette.sse import EventSourceResponse

from yao_agent.errors import UsageError
from yao_agent.events import MessageDelta, StreamEnd
from yao_agent.jsonvalue import as_mapping
from yao_agent.messages import text_of
from yao_agent.pipeline import RunHandle, RunRequest, start
from yao_agent.server.auth import Caller
from yao_agent.server.native import runtime, usable, visible

router = APIRouter()
PASSED_ON = ("temperature", "max_tokens", "max_completion_tokens", "top_p")
FAILURE_STATUS = {"model_error": 502, "context_overflow": 400, "timeout": 504, "cancelled": 409}


class CompletionBody(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI clients send many fields; the ones we use are below
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    tools: list[Any] | None = None
    temperature: FiniteFloat | None = None  # NaN/Infinity are valid to Python's json, not to a provider
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    top_p: FiniteFloat | None = None


@router.get("/v1/models", tags=["openai"])
async def models(request: Request, who: Caller) -> dict[str, Any]:
    """The assistants the caller may use, as OpenAI models."""
    found = visible(runtime(request), who)
    return {"object": "list", "data": [{"id": a["id"], "object": "model", "created": 0, "owned_by": "yao-agent"}
                                       for a in found]}  # fmt: skip


@router.post("/v1/chat/completions", tags=["openai"])
async def completions(body: CompletionBody, request: Request, who: Caller) -> Any:
    if body.tools:
        raise UsageError("tools: client-side tools are not supported (the assistant's own tools run on the server)")
    chat_id = request.headers.get("x-chat-id") or as_mapping(body.metadata).get("chat_id") or None
    options = {k: getattr(body, k) for k in PASSED_ON if getattr(body, k) is not None}
    usable(runtime(request), who, body.model)
    ask = RunRequest(body.model, who, body.messages, chat_id=str(chat_id) if chat_id else None,
                     metadata=body.metadata or {}, options=options)  # fmt: skip
    handle = await start(runtime(request), ask)
    headers = {"X-Chat-Id": handle.state.chat_id}
    if body.stream:
        usage = bool(as_mapping(body.stream_options).get("include_usage"))
        return EventSourceResponse(chunks(handle, body.model, usage), headers=headers, sep="\n", ping=15)
    return await whole(handle, body.model, headers)


def _chunk(handle: RunHandle, model: str, created: int, delta: dict[str, Any], finish: str | None) -> str:
    body = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return json.dumps(body, ensure_ascii=False)


async def chunks(handle: RunHandle, model: str, include_usage: bool) -> AsyncIterator[dict[str, str]]:
    """The run as OpenAI stream chunks: text (and reasoning) deltas only, then finish, usage, [DONE]."""
    created = int(time.time())
    yield {"data": _chunk(handle, model, created, {"role": "assistant", "content": ""}, None)}
    end: StreamEnd | None = None
    async with aclosing(handle.events()) as events:
        async for event in events:
            if isinstance(event, MessageDelta) and event.text and event.kind in ("text", "reasoning"):
                field = "content" if event.kind == "text" else "reasoning_content"
                yield {"data": _chunk(handle, model, created, {field: event.text}, None)}
            elif isinstance(event, StreamEnd):
                end = event
    if end is not None and end.status != "completed":
        message = as_mapping(end.error).get("message") or f"the run ended {end.status} ({end.reason})"
        yield {"data": json.dumps({"error": {"message": message, "type": end.reason, "code": end.status}})}
    yield {"data": _chunk(handle, model, created, {}, "stop")}
    if include_usage and end is not None:
        usage: dict[str, Any] = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk",
                                 "created": created, "model": model, "choices": [], "usage": end.usage}  # fmt: skip
        yield {"data": json.dumps(usage)}
    yield {"data": "[DONE]"}


async def whole(handle: RunHandle, model: str, headers: dict[str, str]) -> JSONResponse:
    async with aclosing(handle.events()) as events:
        async for _ in events:
            pass
    result = handle.result()
    if result.status != "completed":
        said = as_mapping(result.error).get("message") or f"the run ended {result.status} ({result.reason})"
        error = {"error": {"message": said, "type": result.reason, "code": result.status}}
        return JSONResponse(error, status_code=FAILURE_STATUS.get(result.reason, 500), headers=headers)
    replies = [m for m in handle.state.new_messages if m.role == "assistant" and m.content and not m.hidden]
    message: dict[str, Any] = {"role": "assistant", "content": text_of(replies[-1].content) if replies else ""}
    reasoning = "".join(m.reasoning or "" for m in replies[-1:])
    if reasoning:
        message["reasoning_content"] = reasoning
    body = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": result.usage}  # fmt: skip
    return JSONResponse(body, headers=headers)
