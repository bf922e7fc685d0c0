"""What `POST /v1/responses` accepts: OpenAI's Responses request, each field honoured or refused.

* `input` (a string, or items) becomes the run's messages: `message` items (`role` user, assistant,
  system or developer — a developer message is a system message here) with text or `input_text` /
  `output_text` / `input_image` parts; `instructions` goes before them as a system message (stored in the
  chat with the input, as any message the run is given).
* Passed to each model call of the run, over the assistant's options: `temperature`, `top_p`,
  `max_output_tokens` (as `max_tokens`), `parallel_tool_calls`, `reasoning.effort`, and `text.format`,
  which also becomes the run's output schema (`json_schema`, or `json_object`) as `response_format` does on
  the chat-completions route.
* To the run's metadata: `metadata`, `user`, `safety_identifier`.
* `store`: every run is kept in this server's history whatever it says (budgets, resume and the chat
  need it), so `false` asks for nothing this server can leave out: the run is stored, and its response
  can be read back and continued by its owner, as any other.
* Refused with a 400 naming the field: function `tools` and the items that answer them (client tools are
  not served on this route yet: `CLIENT_TOOLS`), OpenAI's own services (background runs, conversations,
  stored prompts, `include`, log probabilities, ...), and any field that is not OpenAI's, unless null.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.base.structured import schema_problems
from yao_agent.errors import UsageError
from yao_agent.messages import check_text
from yao_agent.server.errors import InvalidParam
from yao_agent.server.openai_body import Positive, Unit

TO_METADATA = ("user", "safety_identifier")
CLIENT_TOOLS = ("function tools are not supported on /v1/responses yet (the assistant's own tools run on the "
                "server); use an assistant whose tools are its own")  # fmt: skip


class TextFormat(BaseModel):
    """`{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "name", "schema", ...}`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="a JSON Schema of the answer")
    strict: bool | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The chat-completions `response_format` this format is; None for plain text."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        if self.name is None or self.schema_ is None:
            raise InvalidParam("text.format: a json_schema format needs a name and a schema", param="text.format")
        given = {"name": self.name, "description": self.description, "schema": self.schema_, "strict": self.strict}
        return {"type": "json_schema", "json_schema": {key: value for key, value in given.items() if value is not None}}


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = Field(None, description="medium (OpenAI's default) only")


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: None = Field(None, description="not supported")
    generate_summary: None = Field(None, description="not supported")


class ResponsesBody(BaseModel):
    """OpenAI's Responses request; each field is honoured or refused (see the module's doc)."""

    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields are refused unless null
    model: str = Field(description="the assistant id")
    input: str | list[Any] = Field(description="text, or a list of input items (messages)")
    instructions: str | None = Field(None, description="a system message before the input")
    previous_response_id: str | None = Field(None, description="continue that response's chat")
    store: bool | None = Field(None, description="accepted; every run is kept in the server's history")
    stream: bool | None = False
    metadata: dict[str, str] | None = Field(None, description="the run's metadata")
    user: str | None = None
    safety_identifier: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Unit | None = None
    max_output_tokens: Positive | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    # Refused unless null or at OpenAI's default (REFUSED).
    tools: list[Any] | None = Field(None, description="not supported yet (an empty list is accepted)")
    tool_choice: str | dict[str, Any] | None = Field(None, description="auto or none only")
    include: list[Any] | None = Field(None, description="not supported (an empty list is accepted)")
    truncation: str | None = Field(None, description="disabled only")
    background: bool | None = Field(None, description="false only")
    service_tier: str | None = Field(None, description="auto or default only")

    def check(self) -> None:
        """Refuse what this server cannot honour (a 400 naming the field), and text no store can hold."""
        fields = type(self).model_fields
        given = {n: getattr(self, n) for n in REFUSED if n in fields} | dict(self.model_extra or {})
        for name, value in given.items():
            harmless, why = REFUSED.get(name, (_never, UNKNOWN))
            if value is not None and not harmless(value):
                raise InvalidParam(f"{name}: {why}", param=name, code="unsupported_parameter")
        texts = {"instructions": self.instructions, "metadata": self.metadata,
                 **{name: getattr(self, name) for name in TO_METADATA}}  # fmt: skip
        for name, value in texts.items():
            try:
                check_text(value, name)
            except UsageError as exc:
                raise InvalidParam(str(exc), param=name) from None

    def response_format(self) -> dict[str, Any] | None:
        given = self.text.format if self.text is not None else None
        return given.response_format() if given is not None else None

    async def check_output_schema(self) -> None:
        """A `json_schema` that is no JSON Schema (or one this server will not apply) is the caller's
        mistake, said before a paid model call (in a thread: a big schema takes a while to check)."""
        given = as_mapping(as_mapping(self.response_format()).get("json_schema")).get("schema")
        if not isinstance(given, dict):
            return
        problems = await asyncio.to_thread(schema_problems, cast(dict[str, Any], given))
        if problems:
            where, message = problems[0]
            inside = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where)
            raise InvalidParam(f"text.format.schema{inside}: {message}", param="text.format")

    def call_options(self) -> dict[str, Any]:
        """What each model call of the run gets over the assistant's options."""
        effort = self.reasoning.effort if self.reasoning is not None else None
        options = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_output_tokens,
                   "parallel_tool_calls": self.parallel_tool_calls, "reasoning_effort": effort,
                   "response_format": self.response_format()}  # fmt: skip
        return {name: value for name, value in options.items() if value is not None}

    def run_metadata(self) -> dict[str, Any]:
        given = {name: getattr(self, name) for name in TO_METADATA if getattr(self, name) is not None}
        return {**(self.metadata or {}), **given}

    def messages(self) -> list[dict[str, Any]]:
        """The run's input as chat messages: the instructions first, then the input."""
        first = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*first, {"role": "user", "content": self.input}]
        if not self.input:
            raise InvalidParam("input: expected text or a non-empty list of items", param="input")
        return [*first, *(_item(item, f"input[{index}]") for index, item in enumerate(self.input))]


ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
# The items that answer or repeat a client tool's call: their place once client tools are served here.
TOOL_ITEMS = ("function_call", "function_call_output")


def _item(raw: object, where: str) -> dict[str, Any]:
    """One input item as a chat message; a 400 naming the item (and its part) otherwise."""
    item = as_mapping(raw)
    kind = item.get("type", "message")
    if kind in TOOL_ITEMS:
        raise InvalidParam(f"{where}: a {kind} item: {CLIENT_TOOLS}", param="input", code="unsupported_parameter")
    if kind != "message" or not isinstance(raw, Mapping):
        raise InvalidParam(f"{where}: expected a message item ({{role, content}}), got {str(kind)[:40]!r}",
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


def _never(_value: Any) -> bool:
    return False


def _one_of(*values: object) -> Callable[[Any], bool]:
    return lambda value: any(value == v and type(value) is type(v) for v in values)


UNKNOWN = "unknown field: this server honours or refuses each field of OpenAI's Responses API, and not this one"
NOT_HERE = "not supported by this server"
# Refusable fields: (what is harmless besides null — OpenAI's value when absent, why not).
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tools": (_one_of([]), CLIENT_TOOLS),
    "tool_choice": (_one_of("auto", "none"), "only 'auto' or 'none': " + CLIENT_TOOLS),
    "include": (_one_of([]), "no extra output is available (include: [])"),
    "truncation": (_one_of("disabled"), "only 'disabled': the server compacts a long chat itself"),
    "background": (_one_of(False), "background responses are not supported (stream instead)"),
    "service_tier": (_one_of("auto", "default"), "only 'auto' or 'default': the assistant's connector decides"),
    "conversation": (_never, "conversations are not supported: continue with previous_response_id"),
    "prompt": (_never, "stored prompts are not supported (the assistant's files hold its prompt)"),
    "top_logprobs": (_never, "log probabilities are not available"),
    "max_tool_calls": (_never, NOT_HERE),
    "prompt_cache_key": (_never, NOT_HERE),
    "prompt_cache_retention": (_never, NOT_HERE),
    "stream_options": (_never, NOT_HERE),
}
