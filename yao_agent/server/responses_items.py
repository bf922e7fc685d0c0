"""The items of a Responses request as the pipeline's (OpenAI chat-shaped) messages, and its function tools
as the tools the client brings (pipeline/client_tools.py).

* `message` items (role user, assistant, system or developer — a developer message is a system message
  here) of text or `input_text` / `output_text` / `input_image` parts.
* `function_call` items (a call of one of the client's tools, repeated from an earlier response) join the
  assistant message before them as its tool calls; `function_call_output` items become `tool` messages
  answering them. A request whose items end with the outputs of the calls its chat waits for continues
  that run, as the chat-completions route's `tool` messages do.
* `reasoning` items are left out: a model's earlier reasoning is not sent back (as Anthropic's thinking
  blocks are not, on that door).

Anything else is a 400 naming the item, and the part of it at fault.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.server.errors import InvalidParam

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
Message = dict[str, Any]


class ResponsesFunctionTool(BaseModel):
    """A function tool as the Responses API gives it: flat, without chat-completions' `function` wrapper."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: str
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


def client_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """The request's function tools as chat-completions tools; OpenAI's hosted tools (web search, file
    search, ...) are a 400 naming them, as is a name given twice."""
    out: list[dict[str, Any]] = []
    for index, raw in enumerate(tools):
        where, kind = f"tools[{index}]", as_mapping(raw).get("type")
        if kind != "function":
            shown = json.dumps(kind)[:40]
            raise InvalidParam(f"{where}.type: {shown} is not served here: only function tools, which the client "
                               "runs (the assistant's own tools run on the server)", param="tools",
                               code="unsupported_parameter")  # fmt: skip
        try:
            tool = ResponsesFunctionTool.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            inside = "".join(f".{part}" for part in first["loc"] if isinstance(part, str))
            raise InvalidParam(f"{where}{inside}: {first['msg']}", param="tools") from None
        if any(t["function"]["name"] == tool.name for t in out):
            raise InvalidParam(f"{where}.name: '{tool.name}' is given twice", param="tools")
        spec = tool.model_dump(exclude_none=True, exclude={"type"})
        out.append({"type": "function", "function": spec})
    return out


def tool_choice(choice: str | Mapping[str, Any] | None) -> str | dict[str, Any] | None:
    """`auto`, `none`, `required` or `{"type": "function", "name"}` as chat-completions' tool_choice."""
    if choice is None or choice in ("auto", "none", "required"):
        return cast(str | None, choice)
    given = as_mapping(choice)
    name = given.get("name")
    if given.get("type") != "function" or not isinstance(name, str) or set(given) != {"type", "name"}:
        raise InvalidParam("tool_choice: expected auto, none, required or {type: function, name}", param="tool_choice",
                           code="unsupported_parameter")  # fmt: skip
    return {"type": "function", "function": {"name": name}}


def to_messages(items: Sequence[Any]) -> list[Message]:
    """The input items as chat messages (see the module's doc)."""
    out: list[Message] = []
    for index, raw in enumerate(items):
        where = f"input[{index}]"
        item = as_mapping(raw)
        kind = item.get("type", "message")
        if not isinstance(raw, Mapping):
            raise InvalidParam(f"{where}: expected an item (a message, function_call or function_call_output)",
                               param="input")  # fmt: skip
        if kind == "function_call":
            _add_call(out, item, where)
        elif kind == "function_call_output":
            out.append(_output(item, where))
        elif kind != "reasoning":
            out.append(_message(item, kind, where))
    return out


def _add_call(out: list[Message], item: Mapping[str, Any], where: str) -> None:
    """A call joins the assistant message it follows (a response's words and its calls are one reply)."""
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    for field, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
        if not isinstance(value, str) or (field != "arguments" and not value):
            raise InvalidParam(f"{where}.{field}: expected a string", param="input")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        last["content"] = last["content"] or None
        return
    out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _output(item: Mapping[str, Any], where: str) -> Message:
    """A `function_call_output` as the `tool` message answering its call: its text (parts joined)."""
    call_id, given = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidParam(f"{where}.call_id: expected the call_id of the function_call this answers", param="input")
    if isinstance(given, str):
        return {"role": "tool", "tool_call_id": call_id, "content": given}
    if not isinstance(given, list):
        raise InvalidParam(f"{where}.output: expected text or a list of input_text parts", param="input")
    parts = [_part(part, f"{where}.output[{index}]") for index, part in enumerate(cast(list[Any], given))]
    if any(p["type"] != "text" for p in parts):
        raise InvalidParam(f"{where}.output: a tool's output is text here (input_text parts)", param="input")
    return {"role": "tool", "tool_call_id": call_id, "content": "".join(p["text"] for p in parts)}


def _message(item: Mapping[str, Any], kind: object, where: str) -> Message:
    """A `message` item as a chat message; a 400 naming the item (and its part) otherwise."""
    if kind != "message":
        shown = json.dumps(kind)[:40]
        raise InvalidParam(f"{where}.type: expected message, function_call or function_call_output, got {shown}",
                           param="input")  # fmt: skip
    role = ROLES.get(str(item.get("role")))
    if role is None:
        raise InvalidParam(f"{where}.role: expected one of {', '.join(ROLES)}", param="input")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list) or not content:
        raise InvalidParam(f"{where}.content: expected text or a non-empty list of parts", param="input")
    parts = [_part(part, f"{where}.content[{index}]") for index, part in enumerate(cast(list[Any], content))]
    if role != "user":  # only a user's message may hold images; the others' parts are text
        if any(p["type"] != "text" for p in parts):
            raise InvalidParam(f"{where}.content: only a user message may hold images", param="input")
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _part(raw: object, where: str) -> dict[str, Any]:
    part = as_mapping(raw)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidParam(f"{where}.text: expected a string", param="input")
        return {"type": "text", "text": text}
    if kind == "input_image":
        url, detail = part.get("image_url"), part.get("detail")
        if not isinstance(url, str) or not url:
            raise InvalidParam(f"{where}.image_url: expected the image's URL (or data: URL); file ids are not "
                               "supported", param="input")  # fmt: skip
        image: dict[str, Any] = {"url": url}
        if detail in ("low", "high"):
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    shown = json.dumps(kind)[:40] if kind is not None else "none"
    raise InvalidParam(f"{where}.type: expected input_text, output_text or input_image, got {shown}",
                       param="input")  # fmt: skip
