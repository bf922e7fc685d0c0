"""OpenAI's chat-completions wire format, rendered from a `Reply`.

Streams are rendered up front into a list of ready-to-send SSE events, so the server's send loop does no
per-chunk work beyond writing bytes. Every chunk shares one pre-encoded prefix and suffix; only the small
`delta` object is JSON-encoded per chunk, which keeps `chunks:N` and a thousand concurrent streams cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Final

from yao_agent.testing.fake_scenarios import JsonObject, Reply, ToolCall

SYSTEM_FINGERPRINT: Final = "fp_fake"
DONE_EVENT: Final = b"data: [DONE]\n\n"

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _pieces(text: str, size: int) -> Iterator[str]:
    return (text[i : i + size] for i in range(0, len(text), size))


def _deltas(reply: Reply, call_ids: Sequence[str]) -> Iterator[str]:
    """Deltas as JSON, in the order OpenAI sends them: role, reasoning, content, then each tool call in turn.

    Fragments are encoded as bare strings inside fixed templates: encoding a string is a single C call,
    several times cheaper than encoding a dict per chunk.
    """
    yield '{"role":"assistant","content":""}'
    for piece in _pieces(reply.reasoning, reply.chunk_size):
        yield f'{{"reasoning_content":{_dumps(piece)}}}'
    for piece in _pieces(reply.text, reply.chunk_size):
        yield f'{{"content":{_dumps(piece)}}}'
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, call_ids, strict=True)):
        yield from _tool_call_deltas(index, call, call_id, reply.chunk_size)


def _tool_call_deltas(index: int, call: ToolCall, call_id: str, size: int) -> Iterator[str]:
    # The first delta for an index names the call; later ones carry only argument fragments, which is what
    # clients must stitch back together (and what naive clients get wrong).
    opening = {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    yield _dumps({"tool_calls": [opening]})
    for piece in _pieces(call.arguments_json(), size):
        yield f'{{"tool_calls":[{{"index":{index},"function":{{"arguments":{_dumps(piece)}}}}}]}}'


def stream_events(
    reply: Reply,
    *,
    completion_id: str,
    model: str,
    created: int,
    call_ids: Sequence[str],
    include_usage: bool,
) -> list[bytes]:
    """Every SSE event of a streamed reply, ending with `data: [DONE]`.

    With `include_usage`, chunks carry `"usage": null` and a final chunk with empty `choices` carries the
    usage, as OpenAI does; without it no usage is sent at all.
    """
    header = _dumps({"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model})
    head = f'data: {header[:-1]},"system_fingerprint":"{SYSTEM_FINGERPRINT}","choices":'
    usage_null = ',"usage":null' if include_usage else ""
    prefix = head + '[{"index":0,"delta":'
    suffix = f',"logprobs":null,"finish_reason":null}}]{usage_null}}}\n\n'
    parts = [prefix + delta + suffix for delta in _deltas(reply, call_ids)]
    finish = _dumps(reply.effective_finish_reason)
    parts.append(f'{prefix}{{}},"logprobs":null,"finish_reason":{finish}}}]{usage_null}}}\n\n')
    if include_usage:
        parts.append(f'{head}[],"usage":{_dumps(dict(reply.effective_usage))}}}\n\n')
    events = [part.encode() for part in parts]
    events.append(DONE_EVENT)
    return events


def completion_body(
    reply: Reply, *, completion_id: str, model: str, created: int, call_ids: Sequence[str]
) -> JsonObject:
    """The single `chat.completion` object of a non-streamed reply."""
    message: JsonObject = {
        "role": "assistant",
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": None,
    }
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json()}}
            for call, call_id in zip(reply.tool_calls, call_ids, strict=True)
        ]
    choice: JsonObject = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": reply.effective_finish_reason,
    }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice],
        "usage": dict(reply.effective_usage),
    }


def error_json(message: str, code: str | None = None, error_type: str = "invalid_request_error") -> bytes:
    """An error of the fake provider itself (bad request body, unknown URL), in OpenAI's error shape."""
    return _dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}}).encode()
