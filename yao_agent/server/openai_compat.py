"""OpenAI-compatible `/v1/chat/completions` and `/v1/models`: any OpenAI client can talk to an assistant.

`model` is the assistant id. The chat continues through the `X-Chat-Id` header (or `metadata.chat_id`),
which must name one of the caller's chats; a new chat's id is returned in `X-Chat-Id`. The assistant's
tools run here, on the server, so they never reach the client as `tool_calls` (it would try to run
them). The client's own `tools` are offered beside them: a reply calling one answers
`finish_reason: "tool_calls"` with those calls only, and the client's results continue the run
(pipeline/client_tools.py). Every other field of the request is honoured or
refused with a 400 naming it (see `openai_body`). Errors use OpenAI's shape, `{"error": {"message",
"type", "code", "param"?}}`.

A run with an output schema (`response_format`, or the assistant's `output`) answers with its final
answer's JSON text (without the code fence a model may put around it), so `parse` reads it; streamed,
that answer comes in one piece once it is validated: an answer sent back for a correction never reaches
the client, which could not parse the two together.

A run that does not complete: `max_turns` still answers 200 with what was said and `finish_reason:
"length"` (a limit cut it short, as a token limit would); the others are errors with a status an
OpenAI client understands (FAILURE_STATUS; 500 only for a bug; a budget reached mid-run is a 429 with
`Retry-After`, the seconds until its window resets). Only a model error or a timeout is
worth the client's automatic retry; the others say `x-should-retry: false`, since a retry would run
the assistant's tools again for the same outcome.

A run that waits for a person to approve a tool call (CONTRACT §4 item 8) is no failure: it answers
200 with `finish_reason: "stop"` and a short text naming the calls that wait, the chat, and the route
that decides them, since an OpenAI client has no other place to show it; non-streamed, the header
`X-Yao-Status: waiting` says so to a program. A stream's headers leave before the run ends, so a
streamed answer carries the text only (as its last content chunk). A reply that also called the client's
tools keeps those calls until the person decided: the notice names them, and the decision's continuation
then waits for the client (`client_notice`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from datetime import datetime
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.types import Scope

from yao_agent import shapes
from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.base.structured import unfenced
from yao_agent.events import Event, MessageDelta, StreamEnd
from yao_agent.messages import ChatMessage, text_of
from yao_agent.pipeline import RunHandle, RunRequest, RunResult, client_tools, guard, output
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import error_body, retry_after
from yao_agent.server.limits import check_messages
from yao_agent.server.native import frames, runs_of, server_settings, to_the_end, visible
from yao_agent.server.openai_body import CompletionBody
from yao_agent.server.sse import EventStream, relayed

router = APIRouter()
# output_error: the model's answers did not fit the schema, retries included; like any answer a model failed
# to give, a 502 (a schema that is no JSON Schema is refused before the run, with a 400).
# prompt_error: the app's prompt template failed, as a hook may: the server's side, and no retry mends it.
FAILURE_STATUS = {"model_error": 502, "tool_error": 502, "hook_error": 502, "delegate_error": 502, "timeout": 504,
                  "loop_detected": 508, "context_overflow": 400, "cancelled": 409, "output_error": 502,
                  "budget_exceeded": 429, "prompt_error": 502, "guardrail": 400}  # fmt: skip
CUT_SHORT = {"max_turns"}  # a 200 with finish_reason "length"
RETRYABLE = {"model_error", "timeout"}
OPENAI_CODES = {"context_overflow": "context_length_exceeded"}  # what OpenAI clients look for
CLIENT_TOOLS = "client_tools"  # the reason of a run that waits for the client to run its own tools (§9.2)
WAITING = "waiting"  # the run status (and X-Yao-Status) of a run that waits for approvals


def answered(status: str, reason: str) -> bool:
    """Whether the run ends with an answer (a 200), not an error."""
    return status in ("completed", WAITING) or reason in CUT_SHORT


def waiting_notice(chat_id: str, approvals: object) -> str:
    """What an OpenAI client shows for a run that waits: which calls, and where a person decides them."""
    calls = [as_mapping(a) for a in as_list(approvals)]
    named = ", ".join(f"{c.get('server')}__{c.get('tool')} (call {c.get('tool_call_id')})" for c in calls)
    return (f"Waiting for approval: {named}. The run continues once a person decides in chat {chat_id}: "
            f"POST /api/chats/{chat_id}/approvals.")  # fmt: skip


def client_notice(handle: RunHandle) -> str:
    """What follows a person's decision, when the reply that waits for one also called the client's tools."""
    calls = client_tools.after_approvals(handle.state)
    if not calls:
        return ""
    named = ", ".join(f"{c.name} (call {c.id})" for c in calls)
    return f" Then the run waits for this client's results of {named}, sent on chat {handle.chat_id}."


@router.get("/v1/models", tags=["openai"], response_model=None, responses=doc.answers(shapes.ModelsOut, 401))
async def models(request: Request, who: Caller) -> shapes.ModelsOut:
    """The assistants the caller may use, as OpenAI models."""
    found = visible(runs_of(request), who)
    return {"object": "list", "data": [{"id": a["id"], "object": "model", "created": 0, "owned_by": "yao-agent"}
                                       for a in found]}  # fmt: skip


ERRORS = sorted({400, 401, 404, 409, 413, 429, *FAILURE_STATUS.values()})


@router.post("/v1/chat/completions", tags=["openai"], response_model=None,
             responses=doc.answers(shapes.CompletionOut, *ERRORS, stream=doc.CHUNKS))  # fmt: skip
async def completions(body: CompletionBody, request: Request, who: Caller) -> Any:
    """An OpenAI chat completion by the assistant `model`, streamed (`stream: true`) or not."""
    body.check()
    await body.check_output_schema()
    check_messages(server_settings(request), body.messages)
    given = request.headers.get("x-chat-id") or as_mapping(body.metadata).get("chat_id") or None
    ask = RunRequest(body.model, who, body.messages, chat_id=str(given) if given is not None else None,
                     metadata=body.run_metadata(), options=body.call_options(), chat_must_exist=True,
                     traceparent=request.headers.get("traceparent"), client_tools=body.client_tools(),
                     tool_choice=body.choice())  # fmt: skip
    handle = await runs_of(request).start(ask)
    headers = {"X-Chat-Id": handle.chat_id}
    if body.stream and not await guard.screened(handle.state):  # a blocked input is an error, not a stream
        usage = body.stream_options is not None and body.stream_options.include_usage is True
        stream = chunks(handle, body.model, usage, request.scope)
        return EventStream(stream, {**headers, "Cache-Control": "no-store"})
    return await whole(request, handle, body.model, headers)


def failure(reason: str, status: str, error: object) -> shapes.ErrorBody:
    """A run's failure in OpenAI's error shape."""
    said = as_mapping(error).get("message") or f"the run ended {status} ({reason})"
    return error_body(reason, str(said), OPENAI_CODES.get(reason))


def usage_of(usage: Mapping[str, Any]) -> shapes.CompletionUsageOut:
    """OpenAI's three counts (its names for a run's input and output tokens), present even for a run
    that never called a model."""
    given, taken = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return {"prompt_tokens": given, "completion_tokens": taken, "total_tokens": given + taken}


def _chunk(handle: RunHandle, model: str, created: int, delta: dict[str, Any], finish: str | None) -> str:
    body = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return json.dumps(body, ensure_ascii=False)


class _Pieces:
    """A stream's text chunks, each the JSON `_chunk` writes: its text put between the two halves of
    that JSON, made once per stream (writing each chunk's whole object was most of a chunk's JSON cost)."""

    def __init__(self, handle: RunHandle, model: str, created: int) -> None:
        self.halves = {key: _chunk(handle, model, created, {key: MARK}, None).partition(MARKED)[::2]
                       for key in ("content", "reasoning_content")}  # fmt: skip

    def chunk(self, key: str, text: str) -> str:
        before, after = self.halves[key]
        return before + _string(text) + after


MARK = "\x00"  # a text no id or model name holds, written escaped: where a chunk's text goes
MARKED = json.dumps(MARK)
_string = json.JSONEncoder(ensure_ascii=False).encode  # a str's JSON, as `json.dumps` writes it in `_chunk`


async def chunks(
    handle: RunHandle, model: str, include_usage: bool, scope: Scope | None = None
) -> AsyncIterator[bytes]:
    """The run as OpenAI stream chunks: text (and reasoning) deltas only, then finish (or an error), usage, [DONE].

    Chunks that were waiting together go out in one write (see sse.relayed). A structured run's text comes
    whole at the end (see the module's doc)."""
    created = int(time.time())
    yield frames([_chunk(handle, model, created, {"role": "assistant", "content": ""}, None)])
    seen, pieces = _Seen(), _Pieces(handle, model, created)

    def encode(batch: list[Event]) -> bytes:
        return frames([pieces.chunk(key, text) for key, text in seen.deltas(batch, handle)])

    async with aclosing(relayed(handle, encode, scope)) as bodies:
        async for body in bodies:
            yield body
    answer = seen.held(handle)
    held = [_chunk(handle, model, created, {"content": answer}, None)] if answer else []
    yield frames([*held, *_last(handle, model, created, seen.end, include_usage)])


class _Seen:
    """What a stream has passed on so far: whether it showed text, and the run's end once it came."""

    def __init__(self) -> None:
        self.end: StreamEnd | None = None
        self.texted = False
        # Whether the run answers to a schema, asked once its first text comes (a model's text follows
        # the hooks that may set it; asking again per chunk was ~5% of a chunk's CPU).
        self.structured: bool | None = None

    def deltas(self, batch: list[Event], handle: RunHandle) -> list[tuple[str, str]]:
        """The chunk deltas of a batch of events, (key, text): text and reasoning (a structured run's text
        is held)."""
        out: list[tuple[str, str]] = []
        for event in batch:
            if isinstance(event, MessageDelta) and event.text and event.kind in ("text", "reasoning"):
                if self.structured is None:
                    self.structured = output.expected(handle.state) is not None
                if event.kind == "text" and self.structured:
                    continue
                self.texted = self.texted or event.kind == "text"
                out.append(("content" if event.kind == "text" else "reasoning_content", event.text))
            elif isinstance(event, StreamEnd):
                self.end = event
        return out

    def held(self, handle: RunHandle) -> str:
        """The content sent last: a structured run's validated answer, or what a waiting run waits for
        (after a blank line when the model's words came before it, as the non-streamed answer has it)."""
        end = self.end
        if end is None or not answered(end.status, end.reason) or end.reason == CLIENT_TOOLS:
            return ""
        if end.status == WAITING:
            notice = waiting_notice(handle.chat_id, end.approvals) + client_notice(handle)
            return "\n\n" + notice if self.texted else notice
        return final_text(handle) if output.expected(handle.state) is not None else ""


def _last(handle: RunHandle, model: str, created: int, end: StreamEnd | None, include_usage: bool) -> list[str]:
    """The finish chunk (or the error), the usage chunk if asked for, then [DONE]."""
    if end is not None and not answered(end.status, end.reason):
        out = [json.dumps(failure(end.reason, end.status, end.error))]  # the end: no finish_reason follows
    elif end is not None and end.reason == CLIENT_TOOLS:  # the calls in one chunk, as a model's whole reply
        out = [_chunk(handle, model, created, {"tool_calls": client_calls(handle, indexed=True)}, None),
               _chunk(handle, model, created, {}, "tool_calls")]  # fmt: skip
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
    if result.status == WAITING and result.reason != CLIENT_TOOLS:
        # the answer says what waits for a person; the header tells a program without parsing it
        return JSONResponse(completion(handle, result, model), headers={**headers, "X-Yao-Status": WAITING})
    if not answered(result.status, result.reason):
        status = FAILURE_STATUS.get(result.reason, 500)
        if as_mapping(result.error).get("kind") == "bad_request":  # refused for what the caller sent (images
            status = 400  # to a connector that cannot read them, or the provider's 400): not a gateway failure
        if result.reason not in RETRYABLE or status == 400:
            headers = {**headers, "x-should-retry": "false"}
        resets = as_mapping(result.error).get("resets_at")
        if result.reason == "budget_exceeded" and isinstance(resets, str):  # a budget stopped it mid-run
            headers["Retry-After"] = retry_after(
                datetime.fromisoformat(resets).timestamp() - runs_of(request).rt.clock()
            )
        return JSONResponse(failure(result.reason, result.status, result.error), status_code=status, headers=headers)
    return JSONResponse(completion(handle, result, model), headers=headers)


def completion(handle: RunHandle, result: RunResult, model: str) -> shapes.CompletionOut:
    """A `chat.completion` of the run's last answer (what was said, for a run a limit cut short; what
    waits, for a run that waits for approvals)."""
    replies = _replies(handle)
    if result.reason == CLIENT_TOOLS:
        return _calling(handle, result, model)
    content = waiting_text(handle, result.approvals) if result.status == WAITING else final_text(handle)
    message: shapes.AnswerOut = {"role": "assistant", "content": content}
    reasoning = "".join(m.reasoning or "" for m in replies[-1:])
    if reasoning:
        message["reasoning_content"] = reasoning
    finish = "length" if result.reason in CUT_SHORT else "stop"
    return {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage_of(result.usage)}  # fmt: skip


def _calling(handle: RunHandle, result: RunResult, model: str) -> shapes.CompletionOut:
    """A run that waits for the client's tools: the reply's words (null when none) and those calls."""
    asked = [m for m in handle.state.new_messages if m.role == "assistant" and m.tool_calls][-1:]
    said = text_of(asked[0].content) if asked else ""
    message: shapes.AnswerOut = {"role": "assistant", "content": said or None,
                                 "tool_calls": client_calls(handle)}  # fmt: skip
    if asked and asked[0].reasoning:
        message["reasoning_content"] = asked[0].reasoning
    return {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": usage_of(result.usage)}  # fmt: skip


def client_calls(handle: RunHandle, *, indexed: bool = False) -> list[shapes.ClientCallOut]:
    """The calls of the client's tools the run waits for, as OpenAI's `tool_calls` (a stream's with `index`)."""
    out: list[shapes.ClientCallOut] = []
    for index, call in enumerate(handle.state.client_calls):
        item: dict[str, Any] = {"index": index} if indexed else {}
        item |= {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        out.append(cast("shapes.ClientCallOut", item))
    return out


def _replies(handle: RunHandle) -> list[ChatMessage]:
    return [m for m in handle.state.new_messages if m.role == "assistant" and m.content and not m.hidden]


def final_text(handle: RunHandle) -> str:
    """The run's last answer; a structured run's without the code fence its JSON may be wrapped in."""
    replies = _replies(handle)
    text = text_of(replies[-1].content) if replies else ""
    return unfenced(text) if output.expected(handle.state) is not None else text


def waiting_text(handle: RunHandle, approvals: object) -> str:
    """A waiting run's answer: what the model said with the calls that wait (its words, not a structured
    run's, which are no answer yet), then the notice."""
    notice = waiting_notice(handle.chat_id, approvals) + client_notice(handle)
    asked = [m for m in handle.state.new_messages if m.role == "assistant" and not m.hidden][-1:]
    said = text_of(asked[0].content) if asked and asked[0].tool_calls else ""
    return f"{said}\n\n{notice}" if said and output.expected(handle.state) is None else notice
