"""What `POST /v1/messages` accepts (Anthropic's Messages request), and how its blocks become our messages.

Like the OpenAI door, every field is honoured or refused with a 400 naming it, never dropped unseen:

* `system` (a string or text blocks) becomes the first message, a system one.
* `messages`: `user`, `assistant` and `system` turns (a system turn: text only) of a string or blocks.
  `text` is text; `image` (a `base64` or `url` source) becomes an `image_url` part; an assistant's
  `tool_use` becomes a tool call and a user's `tool_result` a `tool` message answering it, placed
  before the rest of that user turn. An assistant's `thinking` and `redacted_thinking` blocks are left
  out: a model's earlier reasoning is not sent back (Anthropic's own API drops it from earlier turns
  too). `cache_control` and `citations` on a block are hints for Anthropic's own cache and citations,
  harmless to leave out.
* Passed to each model call, over the assistant's `options`: `max_tokens` (required, as Anthropic
  requires it), `temperature`, `top_p`, `stop_sequences` (as `stop`) and `output_config.effort` (as
  `reasoning_effort`; `max` as `xhigh`, the most there is). `output_config.format` (a JSON Schema)
  becomes the run's output schema, as OpenAI's `response_format` does: the answer is validated against it.
* Hints that ask nothing of the answer are accepted: `cache_control` (Anthropic's prompt cache),
  `diagnostics`, `context_management` (the assistant's history settings and compaction decide what the
  model sees), `speed: standard`, `thinking` disabled or adaptive (the assistant's options decide).
* `metadata.user_id` goes to the run's metadata as `user`, as OpenAI's `user` does. It is never an
  identity: the caller is who the key says.
* `tools`: the client's custom tools, as OpenAI function tools (`function_tools`): offered beside the
  assistant's, run by the client (pipeline/client_tools.py). `strict` is passed on; `cache_control`
  and `eager_input_streaming` are hints (an input comes whole here); a server tool of Anthropic's,
  `defer_loading`, `input_examples` and `allowed_callers` other than `["direct"]` are refused.
  `tool_choice` (`openai_tool_choice`): `auto`, `any` as `required`, `tool` as that function, `none`;
  `disable_parallel_tool_use: true` as `parallel_tool_calls: false`. A call the run waits for is a
  `tool_use` block (`tool_use_block`); the `tool_result` turn that answers it continues the run, and
  words in that turn after the results follow them (client_tools.after_results).
* Refused: extended `thinking`, `top_k`, and Anthropic's own services (`container`,
  `mcp_servers`, `inference_geo`, `workspace_id`, `user_profile_id`, a
  `service_tier` other than `auto`/`standard_only`, a `speed` other than `standard`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from yao_agent import shapes
from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.base.structured import schema_problems
from yao_agent.errors import UsageError
from yao_agent.messages import ToolCall, check_text, is_json_object
from yao_agent.server.errors import InvalidParam

MAX_STOP = 4  # the stop sequences one model call takes (OpenAI's limit, which the connectors follow)
Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Block = dict[str, Any]


class MessagesMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    user_id: Annotated[str, Field(max_length=256)] | None = Field(
        None, description="to the run's metadata, as `user`; never an identity"
    )


class MessagesOutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema", description="a JSON Schema of the answer")


class MessagesOutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(None, description="as reasoning_effort")
    format: MessagesOutputFormat | None = Field(None, description="the run's output schema")


class MessagesBody(BaseModel):
    """Anthropic's Messages request; each field is honoured or refused (see the module's doc)."""

    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields are refused unless null (see `check`)
    model: str = Field(description="the assistant id")
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: Annotated[int, Field(ge=1)] = Field(description="each model call's output limit")
    system: str | list[dict[str, Any]] | None = Field(None, description="a string or text blocks")
    metadata: MessagesMetadata | None = None
    stop_sequences: Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_STOP)] | None = None
    stream: bool | None = False
    temperature: Unit | None = None
    top_p: Unit | None = None
    output_config: MessagesOutputConfig | None = None
    cache_control: dict[str, Any] | None = Field(None, description="accepted; Anthropic's prompt cache is not here")
    diagnostics: dict[str, Any] | None = Field(None, description="accepted; nothing to report")
    context_management: dict[str, Any] | None = Field(
        None, description="accepted; the assistant's history settings and compaction decide what the model sees"
    )
    tools: list[dict[str, Any]] | None = Field(
        None, description="the client's custom tools, offered beside the assistant's; the client runs them"
    )
    tool_choice: dict[str, Any] | None = Field(
        None, description="auto, any, none or {type: tool, name}; disable_parallel_tool_use"
    )
    # Refused unless null or harmless (REFUSED).
    top_k: int | None = Field(None, description="not supported")
    thinking: dict[str, Any] | None = Field(None, description="disabled only")
    service_tier: str | None = Field(None, description="auto or standard_only")
    container: Any = Field(None, description="not supported")
    mcp_servers: list[Any] | None = Field(None, description="not supported")
    speed: str | None = Field(None, description="standard only")
    inference_geo: str | None = Field(None, description="not supported")
    workspace_id: str | None = Field(None, description="not supported")
    user_profile_id: str | None = Field(None, description="not supported")

    def check(self) -> None:
        """Refuse what this door cannot honour, a 400 naming the field."""
        given = {name: getattr(self, name) for name in REFUSED} | dict(self.model_extra or {})
        for name, value in given.items():
            harmless, why = REFUSED.get(name, (_never, UNKNOWN))
            if value is not None and not harmless(value):
                raise InvalidParam(f"{name if name.isidentifier() else json.dumps(name)}: {why}", param=name)
        self.client_tools()
        self.choice()
        texts = {"stop_sequences": self.stop_sequences, "metadata": _plain(self.metadata), "system": self.system}
        for name, value in texts.items():
            try:
                check_text(value, name)
            except UsageError as exc:  # its message names the place inside the field
                raise InvalidParam(str(exc), param=name) from None

    def call_options(self) -> dict[str, Any]:
        """What each model call of the run gets over the assistant's options."""
        options: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.top_p is not None:
            options["top_p"] = self.top_p
        if self.stop_sequences:
            options["stop"] = list(self.stop_sequences)
        config = self.output_config
        if config is not None and config.effort is not None:
            options["reasoning_effort"] = "xhigh" if config.effort == "max" else config.effort
        if config is not None and config.format is not None:
            schema = {"name": "output", "schema": config.format.schema_}
            options["response_format"] = {"type": "json_schema", "json_schema": schema}
        if openai_tool_choice(self.tool_choice)[1] is False:
            options["parallel_tool_calls"] = False  # (several calls at once is every model's default)
        return options

    def client_tools(self) -> list[dict[str, Any]]:
        """The client's tools as the model is offered them (OpenAI function tools)."""
        return function_tools(self.tools or [])

    def choice(self) -> str | dict[str, Any] | None:
        """The `tool_choice` as OpenAI's (none when absent)."""
        return openai_tool_choice(self.tool_choice)[0]

    async def check_output_schema(self) -> None:
        """A format whose schema is no JSON Schema this server applies is the caller's mistake, said before
        any model call (in a thread: see openai_body's `check_output_schema`)."""
        given = self.output_config.format if self.output_config is not None else None
        if given is None:
            return
        problems = await asyncio.to_thread(schema_problems, given.schema_)
        if problems:
            where, message = problems[0]
            inside = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where)
            raise InvalidParam(f"output_config.format.schema{inside}: {message}", param="output_config")

    def run_metadata(self) -> dict[str, Any]:
        user = self.metadata.user_id if self.metadata is not None else None
        return {"user": user} if user is not None else {}

    def our_messages(self) -> list[dict[str, Any]]:
        """The request as the pipeline's (OpenAI-shaped) messages: the system prompt first."""
        return [*system_messages(self.system), *to_messages(self.messages)]


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value


def _never(_value: Any) -> bool:
    return False


def _typed(*kinds: str) -> Callable[[Any], bool]:
    """A `{"type": ...}` object of one of these kinds and nothing else."""
    return lambda value: isinstance(value, dict) and set(cast(dict[str, Any], value)) == {"type"} and (
        cast(dict[str, Any], value)["type"] in kinds)  # fmt: skip


UNKNOWN = "unknown field: this server honours or refuses each field of Anthropic's Messages request, and not this one"
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "top_k": (_never, "not supported (the models behind an assistant take temperature and top_p)"),
    "thinking": (_typed("disabled", "adaptive"), "extended thinking is not supported (the assistant's options decide)"),
    "service_tier": (lambda value: value in ("auto", "standard_only"), "only auto or standard_only"),
    "container": (_never, "not supported by this server"),
    "mcp_servers": (lambda value: value == [], "not supported: the assistant's own MCP servers serve it"),
    "speed": (lambda value: value == "standard", "only standard"),
    "inference_geo": (_never, "not supported by this server"),
    "workspace_id": (_never, "not supported: the key decides who calls"),
    "user_profile_id": (_never, "not supported: the key decides who calls"),
}


# --- blocks → our messages ------------------------------------------------------------------------------


def _bad(where: str, said: str) -> InvalidParam:
    top = where.split(".")[0].split("[")[0]
    return InvalidParam(f"{where}: {said}", param=top)


def system_messages(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`system` as a system message (none when it is absent or empty)."""
    if system is None or system == "" or system == []:
        return []
    return _system(system, "system")


def _system(content: object, where: str) -> list[dict[str, Any]]:
    """A system prompt (`system`, or a system turn among the messages): a string or text blocks."""
    if isinstance(content, str):
        return [{"role": "system", "content": check_text(content, where)}]
    parts = [_text_part(block, f"{where}[{i}]") for i, block in enumerate(_blocks(content, where))]
    return [{"role": "system", "content": parts[0]["text"] if len(parts) == 1 else parts}]


def to_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic's turns as our messages (see the module's doc); a 400 naming the place of a wrong block."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role, content = message.get("role"), message.get("content")
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise _bad(f"{where}.{extra[0]}", "unknown field (a message has role and content)")
        if role == "user":
            out += _user(content, f"{where}.content")
        elif role == "assistant":
            out.append(_assistant(content, f"{where}.content"))
        elif role == "system":
            out += _system(content, f"{where}.content")
        else:
            raise _bad(f"{where}.role", f"expected user, assistant or system, got {role!r}")
    return out


def _blocks(content: object, where: str) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise _bad(where, "expected a string or a non-empty list of content blocks")
    blocks = [as_mapping(block) for block in cast(list[Any], content)]
    for index, (raw, block) in enumerate(zip(cast(list[Any], content), blocks, strict=True)):
        if not isinstance(raw, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{where}[{index}]", "expected a content block with a type (text, image, tool_use, ...)")
    return [dict(block) for block in blocks]


def _user(content: object, where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results first (each a `tool` message), then the rest as one user message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, where)):
        at, kind = f"{where}[{index}]", block["type"]
        if kind == "text":
            parts.append(_text_part(block, at))
        elif kind == "image":
            parts.append(image_part(block, at))
        elif kind == "tool_result":
            results.append(tool_result_message(block, at))
        else:
            raise _bad(f"{at}.type", f"{kind!r} is not supported in a user turn (text, image or tool_result)")
    if not parts:
        return results
    if all(p["type"] == "text" for p in parts) and len(parts) == 1:
        return [*results, {"role": "user", "content": parts[0]["text"]}]
    return [*results, {"role": "user", "content": parts}]


def _assistant(content: object, where: str) -> dict[str, Any]:
    """An assistant turn: its text, and its `tool_use` blocks as tool calls."""
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, where)):
        at, kind = f"{where}[{index}]", block["type"]
        if kind == "text":
            texts.append(_text_part(block, at))
        elif kind == "tool_use":
            calls.append(tool_call_of(block, at))
        elif kind not in ("thinking", "redacted_thinking"):
            raise _bad(f"{at}.type", f"{kind!r} is not supported in an assistant turn (text or tool_use)")
    said: Any = "".join(t["text"] for t in texts) if len(texts) <= 1 else texts
    message: dict[str, Any] = {"role": "assistant", "content": said or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _text_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    if block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise _bad(where, "expected a text block {type: text, text}")
    return {"type": "text", "text": check_text(block["text"], f"{where}.text")}


MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def image_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """An `image` block as our `image_url` part: a `base64` source as a data URL, a `url` source as it is."""
    source = as_mapping(block.get("source"))
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if media not in MEDIA_TYPES:
            raise _bad(f"{where}.source.media_type", f"expected one of {', '.join(MEDIA_TYPES)}")
        if not isinstance(data, str) or not data:
            raise _bad(f"{where}.source.data", "expected the image's bytes in base64")
        url = f"data:{media};base64,{data}"
    elif kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise _bad(f"{where}.source.url", "expected an http(s) URL")
    else:
        raise _bad(f"{where}.source.type", f"expected base64 or url, got {kind!r}")
    return {"type": "image_url", "image_url": {"url": check_text(url, f"{where}.source")}}


def tool_call_of(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A `tool_use` block as our tool call: its `input` object as the arguments' JSON text."""
    call_id, name, given = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise _bad(where, "expected a tool_use block {type: tool_use, id, name, input}")
    if not isinstance(given, dict):
        raise _bad(f"{where}.input", "expected an object")
    arguments = json.dumps(check_text(cast(dict[str, Any], given), f"{where}.input"), ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result_message(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A `tool_result` block as our `tool` message; an error result says so at its start."""
    call_id, content = block.get("tool_use_id"), block.get("content", "")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{where}.tool_use_id", "expected the id of the tool_use this answers")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        blocks = as_list(cast(object, content))
        parts = [_text_part(as_mapping(b), f"{where}.content[{i}]") for i, b in enumerate(blocks)]
        text = "".join(p["text"] for p in parts)
    else:
        raise _bad(f"{where}.content", "expected a string or a list of text blocks")
    if block.get("is_error") is True:
        text = f"error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": check_text(text, f"{where}.content")}


# --- tools the client brings ----------------------------------------------------------------------------


NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a tool name every provider behind an assistant takes
TOOL_FIELDS = ("type", "name", "description", "input_schema", "strict")
# A client tool's other fields, harmless at these values (a `tool_use` input always comes whole here).
TOOL_HINTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "cache_control": (lambda _value: True, ""),
    "eager_input_streaming": (lambda value: value is None or isinstance(value, bool), "expected a boolean"),
    "defer_loading": (lambda value: value in (None, False), "only false: every tool is offered to the model"),
    "allowed_callers": (lambda value: value is None or value == ["direct"], 'only ["direct"]: the model calls it'),
    "input_examples": (lambda value: value in (None, []), "not supported (say it in the description)"),
}


def function_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic's client tools `{name, description?, input_schema, strict?}` as function tools; a server
    tool (one with a `type` of Anthropic's own, such as web search), a name given twice or a field this
    door cannot honour is a 400 naming its place."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        try:
            check_text(tool, where)
        except UsageError as exc:  # its message names the place inside the tool
            raise InvalidParam(str(exc), param="tools") from None
        function = _function(as_mapping(tool), where)
        if function["name"] in seen:
            raise _bad(f"{where}.name", f"'{function['name']}' is given twice")
        seen.add(function["name"])
        out.append({"type": "function", "function": function})
    return out


def _function(tool: Mapping[str, Any], where: str) -> dict[str, Any]:
    kind = tool.get("type") or "custom"
    if kind != "custom":
        raise _bad(f"{where}.type", f"{kind!r}: Anthropic's server tools are not available here (custom tools, "
                                    "which the client runs, are)")  # fmt: skip
    for key in sorted(set(tool) - set(TOOL_FIELDS)):
        harmless, why = TOOL_HINTS.get(key, (_never, "unknown field (a tool has name, description, input_schema)"))
        if not harmless(tool[key]):
            raise _bad(f"{where}.{key}", why)
    name, schema, description = tool.get("name"), tool.get("input_schema"), tool.get("description")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _bad(f"{where}.name", "expected 1 to 64 letters, digits, _ or -")
    if not isinstance(schema, dict):
        raise _bad(f"{where}.input_schema", "expected a JSON Schema (an object)")
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if description is not None:
        if not isinstance(description, str):
            raise _bad(f"{where}.description", "expected a string")
        function["description"] = description
    strict = tool.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise _bad(f"{where}.strict", "expected a boolean")
        function["strict"] = strict
    return function


CHOICE_FIELDS = {"auto": {"disable_parallel_tool_use"}, "any": {"disable_parallel_tool_use"},
                 "tool": {"name", "disable_parallel_tool_use"}, "none": set[str]()}  # fmt: skip


def openai_tool_choice(choice: Mapping[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """Anthropic's `tool_choice` as (OpenAI's `tool_choice`, `parallel_tool_calls`): `auto`, `any` (some
    tool: `required`), `tool` (that one), `none`; `disable_parallel_tool_use` forbids several calls at once."""
    if choice is None:
        return None, None
    kind = choice.get("type")
    if not isinstance(kind, str) or kind not in CHOICE_FIELDS:
        raise _bad("tool_choice", "expected {type: auto | any | none} or {type: tool, name}")
    extra = sorted(set(choice) - CHOICE_FIELDS[kind] - {"type"})
    if extra:
        raise _bad(f"tool_choice.{extra[0]}", f"unknown field for a tool_choice of type {kind}")
    mapped: str | dict[str, Any]
    if kind == "any":
        mapped = "required"
    elif kind == "tool":
        if not isinstance(choice.get("name"), str) or not choice["name"]:
            raise _bad("tool_choice.name", "expected the name of the tool to call")
        mapped = {"type": "function", "function": {"name": choice["name"]}}
    else:
        mapped = kind
    single = choice.get("disable_parallel_tool_use")
    if single is not None and not isinstance(single, bool):
        raise _bad("tool_choice.disable_parallel_tool_use", "expected a boolean")
    return mapped, (not single) if single is not None else None


def tool_use_block(call: ToolCall) -> shapes.ToolUseBlockOut:
    """One of our tool calls as the `tool_use` block a client runs (an input that is no JSON object, which a
    model may write, as an empty one)."""
    arguments: dict[str, Any] = json.loads(call.arguments) if is_json_object(call.arguments) else {}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
