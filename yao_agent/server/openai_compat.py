"""OpenAI-compatible `/v1/chat/completions` and `/v1/models`: any OpenAI client can talk to an assistant.

`model` is the assistant id. The chat continues through the `X-Chat-Id` header (or `metadata.chat_id`),
which must name one of the caller's chats; a new chat's id is returned in `X-Chat-Id`. The assistant's
tools run here, on the server, so they never reach the client as `tool_calls` (it would try to run
them); a request bringing its own `tools` is refused. Every other field of the request is honoured or
refused with a 400 naming it (see `openai_body`). Errors use OpenAI's shape, `{"error": {"message",
"type", "code", "param"?}}`.

A run with an output schema (`response_format`, or the assistant's `output`) answers with its final
answer's JSON text (without the code fence a model may put around it), so `parse` reads it; streamed,
that answer comes in one piece once it is validated: an answer sent back for a correction never reaches
the client, which could not parse the two together.

A run that does not complete: `max_turns` still answers 200 with what was said and `finish_reason:
"length"` (a limit cut it short, as a token limit would); the others are errors with a status an
OpenAI client understands (FAILURE_STATUS; 500 only for a bug). Only a model error or a timeout is
worth the client's automatic retry; the others say `x-should-retry: false`, since a retry would run
the assistant's tools again for the same outcome.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse

from yao_agent.events import MessageDelta, StreamEnd
from yao_agent.jsonvalue import as_mapping
from yao_agent.messages import ChatMessage, text_of
from yao_agent.pipeline import RunHandle, RunRequest, RunResult, output
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import error_body
from yao_agent.server.limits import check_messages
from yao_agent.server.native import frames, runs_of, server_settings, to_the_end, visible
from yao_agent.server.openai_body import CompletionBody
from yao_agent.structured import unfenced

router = APIRouter()
# output_error: the model's answers did not fit the schema, retries included; like any answer a model failed
# to give, a 502 (a schema that is no JSON Schema is refused before the run, with a 400).
FAILURE_STATUS = {"model_error": 502, "tool_error": 502, "hook_error": 502, "delegate_error": 502, "timeout": 504,
                  "loop_detected": 508, "context_overflow": 400, "cancelled": 409, "output_error": 502}  # fmt: skip
CUT_SHORT = {"max_turns"}  # a 200 with finish_reason "length"
RETRYABLE = {"model_error", "timeout"}
OPENAI_CODES = {"context_overflow": "context_length_exceeded"}  # what OpenAI clients look for


@router.get("/v1/models", tags=["openai"], response_model=None, responses=doc.answers(doc.ModelsOut, 401))
async def models(request: Request, who: Caller) -> dict[str, Any]:
    """The assistants the caller may use, as OpenAI models."""
    found = visible(runs_of(request), who)
    return {"object": "list", "data": [{"id": a["id"], "object": "model", "created": 0, "owned_by": "yao-agent"}
                                       for a in found]}  # fmt: skip


ERRORS = sorted({400, 401, 404, 409, 413, *FAILURE_STATUS.values()})


@router.post("/v1/chat/completions", tags=["openai"], response_model=None,
             responses=doc.answers(doc.CompletionOut, *ERRORS, stream=doc.CHUNKS))  # fmt: skip
async def completions(body: CompletionBody, request: Request, who: Caller) -> Any:
    """An OpenAI chat completion by the assistant `model`, streamed (`stream: true`) or not."""
    body.check()
    check_messages(server_settings(request), body.messages)
    given = request.headers.get("x-chat-id") or as_mapping(body.metadata).get("chat_id") or None
    ask = RunRequest(body.model, who, body.messages, chat_id=str(given) if given is not None else None,
                     metadata=body.run_metadata(), options=body.call_options(), chat_must_exist=True)  # fmt: skip
    handle = await runs_of(request).start(ask)
    headers = {"X-Chat-Id": handle.chat_id}
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage is True
        return EventSourceResponse(chunks(handle, body.model, usage), headers=headers, sep="\n", ping=15)
    return await whole(request, handle, body.model, headers)


def failure(reason: str, status: str, error: object) -> dict[str, Any]:
    """A run's failure in OpenAI's error shape."""
    said = as_mapping(error).get("message") or f"the run ended {status} ({reason})"
    return error_body(reason, str(said), OPENAI_CODES.get(reason))


def usage_of(usage: dict[str, int]) -> dict[str, int]:
    """OpenAI's three counts, present even for a run that never called a model."""
    return {k: usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _chunk(handle: RunHandle, model: str, created: int, delta: dict[str, Any], finish: str | None) -> str:
    body = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return json.dumps(body, ensure_ascii=False)


async def chunks(handle: RunHandle, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    """The run as OpenAI stream chunks: text (and reasoning) deltas only, then finish (or an error), usage, [DONE].

    Chunks that were waiting together go out in one write (see native.sse). A structured run's text comes
    whole at the end (see the module's doc)."""
    created = int(time.time())
    yield frames([_chunk(handle, model, created, {"role": "assistant", "content": ""}, None)])
    end: StreamEnd | None = None
    structured = output.expected(handle.state) is not None
    async with aclosing(handle.batches()) as batches:
        async for batch in batches:
            out: list[str] = []
            for event in batch:
                if isinstance(event, MessageDelta) and event.text and event.kind in ("text", "reasoning"):
                    if event.kind == "text" and structured:
                        continue
                    field = "content" if event.kind == "text" else "reasoning_content"
                    out.append(_chunk(handle, model, created, {field: event.text}, None))
                elif isinstance(event, StreamEnd):
                    end = event
            if out:
                yield frames(out)
    answered = end is not None and (end.status == "completed" or end.reason in CUT_SHORT)
    answer = final_text(handle) if structured and answered else ""
    held = [_chunk(handle, model, created, {"content": answer}, None)] if answer else []
    yield frames([*held, *_last(handle, model, created, end, include_usage)])


def _last(handle: RunHandle, model: str, created: int, end: StreamEnd | None, include_usage: bool) -> list[str]:
    """The finish chunk (or the error), the usage chunk if asked for, then [DONE]."""
    if end is not None and end.status != "completed" and end.reason not in CUT_SHORT:
        out = [json.dumps(failure(end.reason, end.status, end.error))]  # the end: no finish_reason follows
    else:
        finish = "length" if end is not None and end.reason in CUT_SHORT else "stop"
        out = [_chunk(handle, model, created, {}, finish)]
    if include_usage and end is not None:
        usage: dict[str, Any] = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk",
                                 "created": created, "model": model, "choices": [],
                                 "usage": usage_of(end.usage)}  # fmt: skip
        out.append(json.dumps(usage))
    return [*out, "[DONE]"]


async def whole(request: Request, handle: RunHandle, model: str, headers: dict[str, str]) -> JSONResponse:
    await to_the_end(request, handle)
    result = handle.result()
    if result.status != "completed" and result.reason not in CUT_SHORT:
        status = FAILURE_STATUS.get(result.reason, 500)
        if as_mapping(result.error).get("kind") == "bad_request":  # refused for what the caller sent (images
            status = 400  # to a connector that cannot read them, or the provider's 400): not a gateway failure
        if result.reason not in RETRYABLE or status == 400:
            headers = {**headers, "x-should-retry": "false"}
        return JSONResponse(failure(result.reason, result.status, result.error), status_code=status, headers=headers)
    return JSONResponse(completion(handle, result, model), headers=headers)


def completion(handle: RunHandle, result: RunResult, model: str) -> dict[str, Any]:
    """A `chat.completion` of the run's last answer (what was said, for a run a limit cut short)."""
    replies = _replies(handle)
    message: dict[str, Any] = {"role": "assistant", "content": final_text(handle)}
    reasoning = "".join(m.reasoning or "" for m in replies[-1:])
    if reasoning:
        message["reasoning_content"] = reasoning
    finish = "stop" if result.status == "completed" else "length"
    return {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage_of(result.usage)}  # fmt: skip


def _replies(handle: RunHandle) -> list[ChatMessage]:
    return [m for m in handle.state.new_messages if m.role == "assistant" and m.content and not m.hidden]


def final_text(handle: RunHandle) -> str:
    """The run's last answer; a structured run's without the code fence its JSON may be wrapped in."""
    replies = _replies(handle)
    text = text_of(replies[-1].content) if replies else ""
    return unfenced(text) if output.expected(handle.state) is not None else text
