"""What `POST /v1/responses` accepts: OpenAI's Responses request, each field honoured or refused.

* `input` (a string, or items: responses_items) becomes the run's messages; `instructions` goes before
  them as a system message (stored in the chat with the input, as any message the run is given).
* Passed to each model call of the run, over the assistant's options: `temperature`, `top_p`,
  `max_output_tokens` (as `max_tokens`), `parallel_tool_calls`, `reasoning.effort`, and `text.format`,
  which also becomes the run's output schema (`json_schema`, or `json_object`) as `response_format` does on
  the chat-completions route.
* To the run's metadata: `metadata`, `user`, `safety_identifier`.
* `store`: every run is kept in this server's history whatever it says (budgets, resume and the chat
  need it), so `false` asks for nothing this server can leave out: the run is stored, and its response
  can be read back and continued by its owner, as any other.
* Function `tools` are the client's tools (pipeline/client_tools.py), offered beside the assistant's own,
  with `tool_choice` and `parallel_tool_calls`; the items that call and answer them are read by
  responses_items.
* Refused with a 400 naming the field: OpenAI's hosted tools and its own services (background runs,
  conversations, stored prompts, `include`, log probabilities, ...), and any field that is not OpenAI's,
  unless null.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.base.structured import schema_problems
from yao_agent.errors import UsageError
from yao_agent.messages import check_text
from yao_agent.server import responses_items as items
from yao_agent.server.errors import InvalidParam, field_name
from yao_agent.server.openai_body import Positive, Unit

TO_METADATA = ("user", "safety_identifier")


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
    tools: list[Any] | None = Field(None, description="the client's function tools, offered beside the "
                                    "assistant's; the client runs them")  # fmt: skip
    tool_choice: str | dict[str, Any] | None = Field(None, description="auto, none, required or a function")
    # Refused unless null or at OpenAI's default (REFUSED).
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
                raise InvalidParam(f"{field_name(name)}: {why}", param=name, code="unsupported_parameter")
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
        return [*first, *items.to_messages(self.input)]

    def client_tools(self) -> list[dict[str, Any]]:
        return items.client_tools(self.tools or ())

    def choice(self) -> str | dict[str, Any] | None:
        return items.tool_choice(self.tool_choice)


def _never(_value: Any) -> bool:
    return False


def _one_of(*values: object) -> Callable[[Any], bool]:
    return lambda value: any(value == v and type(value) is type(v) for v in values)


UNKNOWN = "unknown field: this server honours or refuses each field of OpenAI's Responses API, and not this one"
NOT_HERE = "not supported by this server"
# Refusable fields: (what is harmless besides null — OpenAI's value when absent, why not).
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
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
