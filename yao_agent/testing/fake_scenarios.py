"""What the fake provider answers: scripted `Reply` objects, the built-in scenarios, and recorded requests.

A `Reply` describes one model response completely (text, reasoning, tool calls, usage) together with the
ways a real provider misbehaves (an HTTP error, a dropped connection, a stall, a slow first byte), so a test
can script a whole conversation without a network or an API key.

Built-in scenarios are chosen by the request's model name when no scripted reply is queued. Anything before
the last ``/`` is ignored, so ``openai/echo`` selects ``echo``; a name that is not a scenario gets ``text``.
The ``X-Fake-Scenario`` request header picks one explicitly (an unknown name there is a 400 error)::

    text        "Hello world", 3 characters per content delta
    echo        "echo: <text of the last user message>"
    chunks:N    N content deltas of "tok " (for benchmarks; N <= 100000)
    clock:N:MS  N content deltas, one every MS milliseconds, each the provider's `time.monotonic()` when it
                sent it, then a space: a client on the same machine measures each chunk's latency
    tool        one call get_weather({"city": "Paris"}); arguments arrive in 6 fragments
    tool2       two parallel calls: get_weather (index 0) and get_time (index 1)
    reasoning   reasoning deltas ("reasoning_content") first, then "Hello world"
    e400 e401 e429 e500 e503
                that HTTP status with OpenAI's error body; e429 also sends "retry-after: 1"
    context     400 with code "context_length_exceeded"
    drop        the connection closes abruptly after 2 stream chunks (the role chunk and "Hel")
    stall       2 chunks (the role chunk and "Hel"), then 30 s of silence, then the rest
    slow        nothing at all (not even headers) for 30 s, then "Hello world"
    slowstream  50 content deltas of "tok ", one every 0.2 s

Unless a reply says otherwise its usage is ``DEFAULT_USAGE`` (11 prompt + 7 completion = 18 tokens): fixed
numbers keep assertions in tests simple and independent of what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, cast

JsonObject = dict[str, Any]

DEFAULT_USAGE: Final[Mapping[str, int]] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}

# OpenAI's `error.type` for each status, used when a reply does not name one.
_ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
}

MAX_BENCH_CHUNKS: Final = 100_000
STAMP: Final = "<<now>>"  # in a `stamp` reply's text: replaced by the moment its chunk is sent


class UnknownScenario(ValueError):
    """A scenario was asked for by name (header or queued name) and there is no such scenario."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the fake model makes. Dict arguments are sent JSON-encoded; ids default to `call_<n>`."""

    name: str
    arguments: str | Mapping[str, Any] = ""
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments exactly as they travel on the wire, so fragments concatenate back to valid JSON."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model response, including how the provider should misbehave while sending it.

    Chunk counts (`drop_after`, `stall_after`) count stream events on the wire, starting with the opening
    role chunk. Without streaming, `drop_after` closes the connection before any response byte and
    `stall_after` delays the whole response by `stall_s`; `delay_s` only applies to streams.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    chunk_size: int = 3
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    status: int = 200
    error_message: str | None = None
    error_code: str | None = None
    error_type: str | None = None
    error_param: str | None = None
    retry_after: float | None = None
    drop_after: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0
    first_byte_delay_s: float = 0.0
    delay_s: float = 0.0
    stamp: bool = False  # every STAMP in the text is sent as the sending moment's `time.monotonic()`

    def __post_init__(self) -> None:
        # Fail when the script is written, not halfway through a test's HTTP exchange.
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ValueError(f"status must be 200 or an error status (400-599), got {self.status}")
        for name in ("drop_after", "stall_after", "stall_s", "first_byte_delay_s", "delay_s", "retry_after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")

    @property
    def is_error(self) -> bool:
        return self.status != 200

    @property
    def effective_finish_reason(self) -> str:
        """What a real model reports: `tool_calls` when it asked for tools, else `stop`."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    @property
    def effective_usage(self) -> Mapping[str, Any]:
        return DEFAULT_USAGE if self.usage is None else self.usage

    def error_body(self) -> JsonObject:
        """OpenAI's error shape, which both the SDK and litellm read `message` and `code` from."""
        message = self.error_message or f"Fake provider error (HTTP {self.status})"
        error_type = self.error_type or _ERROR_TYPES.get(self.status, "server_error")
        return {"error": {"message": message, "type": error_type, "param": self.error_param, "code": self.error_code}}


def _error(status: int, message: str, code: str | None = None, **extra: Any) -> Reply:
    return Reply(status=status, error_message=message, error_code=code, **extra)


_HELLO: Final = "Hello world"

_FIXED: Final[Mapping[str, Reply]] = {
    "text": Reply(text=_HELLO),
    "tool": Reply(tool_calls=(ToolCall("get_weather", {"city": "Paris"}),)),
    "tool2": Reply(
        tool_calls=(
            ToolCall("get_weather", {"city": "Paris"}),
            ToolCall("get_time", {"timezone": "Europe/Paris"}),
        )
    ),
    "reasoning": Reply(reasoning="The user greets me; a short greeting back is enough.", text=_HELLO),
    "e400": _error(400, "Invalid request (fake e400)."),
    "e401": _error(401, "Incorrect API key provided (fake e401).", "invalid_api_key"),
    "e429": _error(429, "Rate limit reached (fake e429).", "rate_limit_exceeded", retry_after=1),
    "e500": _error(500, "The server had an error while processing your request (fake e500)."),
    "e503": _error(503, "The engine is currently overloaded, please try again later (fake e503)."),
    "context": _error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. "
        "Please reduce the length of the messages.",
        "context_length_exceeded",
        error_param="messages",
    ),
    "drop": Reply(text=_HELLO, drop_after=2),
    "stall": Reply(text=_HELLO, stall_after=2, stall_s=30.0),
    "slow": Reply(text=_HELLO, first_byte_delay_s=30.0),
    "slowstream": Reply(text="tok " * 50, chunk_size=4, delay_s=0.2),
}

SCENARIO_NAMES: Final[tuple[str, ...]] = (
    "text", "echo", "chunks:N", "clock:N:MS", *(name for name in _FIXED if name != "text")
)  # fmt: skip


def scenario_key(model: str) -> str:
    """The part of a model name that selects scenarios and per-model queues: `openai/echo` -> `echo`."""
    return model.rsplit("/", 1)[-1]


def builtin_reply(name: str, messages: Sequence[Any] = ()) -> Reply:
    """The built-in scenario called `name` (see the module docstring); `messages` feed `echo`.

    Raises `UnknownScenario` so that a misspelt explicit choice is reported instead of silently answered.
    """
    fixed = _FIXED.get(name)
    if fixed is not None:
        return fixed
    if name == "echo":
        return Reply(text=f"echo: {last_user_text(messages)}")
    if name.startswith("chunks:"):
        count = name.removeprefix("chunks:")
        if count.isdigit() and int(count) <= MAX_BENCH_CHUNKS:
            return Reply(text="tok " * int(count), chunk_size=4)
    if name.startswith("clock:"):
        count, _, every_ms = name.removeprefix("clock:").partition(":")
        if count.isdigit() and every_ms.isdigit() and int(count) <= MAX_BENCH_CHUNKS:
            piece = STAMP + " "
            return Reply(text=piece * int(count), chunk_size=len(piece), delay_s=int(every_ms) / 1000, stamp=True)
    raise UnknownScenario(f"unknown fake scenario {name!r}; known: {', '.join(SCENARIO_NAMES)}")


def reply_for_model(model: str, messages: Sequence[Any] = ()) -> Reply:
    """The scenario a model name selects, or `text` for names that are no scenario (e.g. `gpt-4o`)."""
    try:
        return builtin_reply(scenario_key(model), messages)
    except UnknownScenario:
        return _FIXED["text"]


def last_user_text(messages: Sequence[Any]) -> str:
    """Text of the last user message, whether its content is a string or a list of typed parts."""
    for message in reversed(messages):
        if isinstance(message, dict) and cast(JsonObject, message).get("role") == "user":
            return _content_text(cast(JsonObject, message).get("content"))
    return ""


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [cast(JsonObject, part) for part in cast(list[Any], content) if isinstance(part, dict)]
        return "".join(str(part.get("text", "")) for part in parts if part.get("type") == "text")
    return ""


# ---------------------------------------------------------------------------------------------------------------
# Replies as JSON, for the out-of-process control route `POST /_fake/enqueue`.

_NUMBER: Final = (int, float)
_JSON_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "text": (str,),
    "reasoning": (str,),
    "chunk_size": (int,),
    "finish_reason": (str, type(None)),
    "usage": (dict, type(None)),
    "status": (int,),
    "error_message": (str, type(None)),
    "error_code": (str, type(None)),
    "error_type": (str, type(None)),
    "error_param": (str, type(None)),
    "retry_after": (*_NUMBER, type(None)),
    "drop_after": (int, type(None)),
    "stall_after": (int, type(None)),
    "stall_s": _NUMBER,
    "first_byte_delay_s": _NUMBER,
    "delay_s": _NUMBER,
    "stamp": (bool,),
}


def reply_from_json(data: object) -> Reply:
    """Build a `Reply` from its JSON form (the dataclass fields; `tool_calls` as a list of objects).

    Types are checked here because the data comes from another process and a wrong type would otherwise
    surface as a confusing failure while the reply is being streamed.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a reply must be a JSON object or a scenario name, got {data!r}")
    obj = cast(JsonObject, data)
    unknown = set(obj) - {f.name for f in fields(Reply)}
    if unknown:
        raise ValueError(f"unknown reply fields: {', '.join(sorted(unknown))}")
    kwargs: JsonObject = {}
    for name, value in obj.items():
        if name == "tool_calls":
            kwargs[name] = _tool_calls_from_json(value)
            continue
        allowed = _JSON_FIELD_TYPES[name]
        if isinstance(value, bool) != (bool in allowed) or not isinstance(value, allowed):
            raise ValueError(f"reply field {name!r} has the wrong type: {value!r}")
        kwargs[name] = value
    return Reply(**kwargs)


def _tool_calls_from_json(value: object) -> tuple[ToolCall, ...]:
    if not isinstance(value, list):
        raise ValueError("reply field 'tool_calls' must be a list")
    calls: list[ToolCall] = []
    for item in cast(list[Any], value):
        if not isinstance(item, dict):
            raise ValueError(f"a tool call must be an object, got {item!r}")
        call = cast(JsonObject, item)
        name, arguments, call_id = call.get("name"), call.get("arguments", ""), call.get("id")
        if not isinstance(name, str) or not isinstance(arguments, str | dict) or not isinstance(call_id, str | None):
            raise ValueError(f"a tool call needs a string name, string or object arguments: {call!r}")
        calls.append(ToolCall(name, cast(str | JsonObject, arguments), call_id))
    return tuple(calls)


# Parts of a request body that are not the caller's options: what is said, to whom, and how it streams.
_NOT_OPTIONS: Final = frozenset({"model", "messages", "tools", "stream", "stream_options"})


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request to the model exactly as the fake provider received it: a chat completion, or an
    embeddings request (`path` ends in `/embeddings`, its texts are `body["input"]`).

    `messages` and `tools` are the parsed JSON as sent (`tools` is None when absent), so a test can assert on
    what its assistant really put on the wire. `received_at` is wall-clock time (`time.time()`), meaningful
    across processes too. `connector` is the id of the connector called, known only to the in-process
    doubles (`yao_agent.testing.model`); over HTTP it is None.
    """

    path: str
    headers: Mapping[str, str] = field(repr=False)
    body: JsonObject = field(repr=False)
    model: str
    messages: list[Any]
    tools: list[Any] | None
    stream: bool
    received_at: float
    connector: str | None = None

    @classmethod
    def parse(cls, path: str, headers: Mapping[str, str], body: object, received_at: float) -> RecordedRequest:
        obj = cast(JsonObject, body) if isinstance(body, dict) else {}
        model, messages, tools = obj.get("model"), obj.get("messages"), obj.get("tools")
        return cls(
            path=path,
            headers=headers,
            body=obj,
            model=model if isinstance(model, str) else "",
            messages=cast(list[Any], messages) if isinstance(messages, list) else [],
            tools=cast(list[Any], tools) if isinstance(tools, list) else None,
            stream=obj.get("stream") is True,
            received_at=received_at,
        )

    @property
    def options(self) -> JsonObject:
        """What the request asked besides its model, messages and tools (temperature, max_tokens, ...)."""
        return {k: v for k, v in self.body.items() if k not in _NOT_OPTIONS}

    @property
    def include_usage(self) -> bool:
        """Whether the client asked for the trailing usage chunk (`stream_options.include_usage`)."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and cast(JsonObject, options).get("include_usage") is True

    def to_json(self) -> JsonObject:
        return {
            "path": self.path,
            "headers": dict(self.headers),
            "body": self.body,
            "model": self.model,
            "messages": self.messages,
            "tools": self.tools,
            "stream": self.stream,
            "received_at": self.received_at,
        }
