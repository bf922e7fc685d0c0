"""What `POST /v1/chat/completions` accepts: every field of OpenAI's request is honoured or refused.

A client that sends a field expects something of it, so none is dropped without a word: LangChain's
`with_structured_output`, say, would otherwise get free text back and fail far from the cause.

* Passed to each model call of the run, over the assistant's `options`: CALL_FIELDS and `response_format`,
  which also becomes the run's output schema (pipeline/output.py): the answer is validated against it.
* To the run's metadata (prompts and hooks see it): `user`, `safety_identifier`.
* Shaping the answer: `stream`, `stream_options.include_usage`; `metadata.chat_id` names the chat.
* The client's own `tools` are offered beside the assistant's and run by the client, with `tool_choice`
  (pipeline/client_tools.py).
* Refused with a 400 naming the field (`param`): what this server cannot do — several choices, log
  probabilities, the legacy `functions`, audio, OpenAI's own services (stored completions, predicted outputs,
  web search, prompt caching keys, service tiers, verbosity). Null, or the value OpenAI assumes when the
  field is absent (`n: 1`, `tool_choice: "auto"`, `modalities: ["text"]`, ...), asks for nothing and is
  accepted.
* A field that is not OpenAI's is refused the same way, unless it is null.

Types and ranges are checked as OpenAI documents them; a wrong one is a 400 naming the field, never a 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from yao_agent.base.structured import schema_problems
from yao_agent.connectors.request import RUN_CALL_OPTIONS
from yao_agent.errors import UsageError
from yao_agent.messages import check_text
from yao_agent.server.errors import InvalidParam, field_name

# The request fields passed to the model call as they are (CONTRACT §6), besides `response_format`: the
# call options a run may set (connectors/request.py).
CALL_FIELDS = tuple(name for name in RUN_CALL_OPTIONS if name != "response_format")
TO_METADATA = ("user", "safety_identifier")
MAX_STOP = 4  # OpenAI's limit on stop sequences
INT64 = 2**63


def _kinds(said: str, *kinds: type) -> BeforeValidator:
    """A field of several shapes: one clear message when the value has none of them (pydantic would list
    each shape's own complaint under a name of its own)."""

    def check(value: Any) -> Any:
        if value is not None and not isinstance(value, kinds):
            raise PydanticCustomError("type_error", "expected {said}", {"said": said})
        return value

    return BeforeValidator(check)


def _stop(value: Any) -> Any:
    strings = [value] if isinstance(value, str) else value
    fine = isinstance(strings, list) and 1 <= len(strings) <= MAX_STOP  # pyright: ignore[reportUnknownArgumentType]
    if value is not None and not (fine and all(isinstance(s, str) and s for s in strings)):  # pyright: ignore[reportUnknownVariableType]
        raise PydanticCustomError("type_error", "expected a non-empty string or a list of 1 to 4 non-empty strings")
    return value


def _logit_bias(value: Any) -> Any:
    if not isinstance(value, dict):
        return value  # (None, or a type error said by pydantic)
    biases = cast(dict[object, object], value)
    for key, bias in biases.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 10):
            raise PydanticCustomError("value_error", "keys are token ids, as strings of digits; got {key}",
                                      {"key": repr(key)})  # fmt: skip
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise PydanticCustomError("value_error", "the bias of token {key} must be a number from -100 to 100",
                                      {"key": key})  # fmt: skip
    return biases


Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
Positive = Annotated[int, Field(ge=1)]
Stop = Annotated[str | Annotated[list[str], Field(min_length=1, max_length=MAX_STOP)], BeforeValidator(_stop)]
TokenId = Annotated[str, Field(pattern=r"^[0-9]{1,10}$")]
LogitBias = Annotated[dict[TokenId, Annotated[float, Field(ge=-100, le=100)]], BeforeValidator(_logit_bias)]
Choice = Annotated[str | dict[str, Any], _kinds("a string or an object", str, dict)]


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="a JSON Schema of the answer")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """`{"type": "text"}`, `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {...}}`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise PydanticCustomError("value_error", "json_schema is given with type json_schema, and only then")
        return self


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON Schema of the arguments")
    strict: bool | None = None


class FunctionTool(BaseModel):
    """A tool the client brings: offered to the model beside the assistant's own, run by the client."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: FunctionSpec


class ChosenName(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: ChosenName


def _tool_choice(value: Any) -> Any:
    """One clear message for a choice of neither shape (pydantic would say each shape's complaint)."""
    fine = value is None or isinstance(value, dict) or value in ("auto", "none", "required")
    if not fine:
        raise PydanticCustomError("type_error", "expected auto, none, required or a function")
    return cast(Any, value)


ToolChoice = Annotated[Literal["auto", "none", "required"] | ChosenFunction, BeforeValidator(_tool_choice)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool | None = Field(None, description="a last chunk with the run's usage")
    include_obfuscation: Literal[False] | None = Field(None, description="not supported: false or absent")


class CompletionBody(BaseModel):
    """OpenAI's chat-completions request; each field is honoured or refused (see the module's doc)."""

    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields are refused unless null (see `refusals`)
    model: str = Field(description="the assistant id")
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, Any] | None = Field(None, description="`chat_id` continues a chat; the run's metadata")
    user: str | None = Field(None, description="to the run's metadata, as `user`")
    safety_identifier: str | None = Field(None, description="to the run's metadata, as `safety_identifier`")
    # Passed to each model call of the run.
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Unit | None = None
    max_tokens: Positive | None = None
    max_completion_tokens: Positive | None = None
    stop: Stop | None = None
    seed: Annotated[int, Field(ge=-INT64, lt=INT64)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: LogitBias | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = Field(
        None, description="passed to the model call; the answer is validated against it (the run's output schema)"
    )
    # Refused unless null or at OpenAI's default (REFUSED).
    n: Positive | None = Field(None, description="1 only")
    logprobs: bool | None = Field(None, description="false only")
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = Field(None, description="not supported")
    tools: list[FunctionTool] | None = Field(
        None, description="the client's function tools, offered beside the assistant's; the client runs them"
    )
    functions: list[dict[str, Any]] | None = Field(None, description="not supported: use `tools`")
    tool_choice: ToolChoice | None = Field(None, description="auto, none, required or {type: function, function}")
    function_call: Choice | None = Field(None, description="auto or none only")
    audio: dict[str, Any] | None = Field(None, description="not supported")
    modalities: list[str] | None = Field(None, description='["text"] only')
    store: bool | None = Field(None, description="false only")
    service_tier: str | None = Field(None, description="auto or default only")
    prediction: dict[str, Any] | None = Field(None, description="not supported")
    web_search_options: dict[str, Any] | None = Field(None, description="not supported")
    prompt_cache_key: str | None = Field(None, description="not supported")
    verbosity: Literal["low", "medium", "high"] | None = Field(None, description="not supported")

    def check(self) -> None:
        """Refuse what this server cannot honour (a 400 naming the field), and text no store can hold."""
        for name, value in self.refusals():
            harmless, why, code = REFUSED.get(name, (_never, UNKNOWN, "unsupported_parameter"))
            if not harmless(value):
                raise InvalidParam(f"{field_name(name)}: {why}", param=name, code=code)
        texts = {**self.call_options(), **{name: getattr(self, name) for name in TO_METADATA}}
        for name, value in texts.items():
            try:
                check_text(value, name)
            except UsageError as exc:  # its message names the place inside the field
                raise InvalidParam(str(exc), param=name) from None

    async def check_output_schema(self) -> None:
        """The `json_schema` becomes the run's output schema, which every answer is validated against: one
        that is no JSON Schema, or that this server will not apply (too deep or big, a pattern RE2 cannot
        run, a `$ref` outside it), is the caller's mistake, said now rather than after a paid model call.

        In a thread: a schema of MAX_BYTES takes about a second of CPU to check the first time (checked
        schemas are remembered), which on the event loop would stop every other request."""
        given = self.response_format.json_schema if self.response_format is not None else None
        if given is None or given.schema_ is None:
            return
        problems = await asyncio.to_thread(schema_problems, given.schema_)
        if problems:
            where, message = problems[0]
            inside = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where)
            raise InvalidParam(f"response_format.json_schema.schema{inside}: {message}", param="response_format")

    def client_tools(self) -> list[dict[str, Any]]:
        """The client's tools as the model is offered them; a name given twice is refused."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools or ()]
        seen: set[str] = set()
        for index, tool in enumerate(tools):
            name = tool["function"]["name"]
            if name in seen:
                raise InvalidParam(f"tools[{index}].function.name: '{name}' is given twice", param="tools")
            seen.add(name)
        return tools

    def choice(self) -> str | dict[str, Any] | None:
        choice = self.tool_choice
        return choice.model_dump() if isinstance(choice, ChosenFunction) else choice

    def refusals(self) -> list[tuple[str, Any]]:
        """The fields given that may be refused: the refusable ones and the unknown ones, unless null."""
        given = {name: getattr(self, name) for name in REFUSED} | dict(self.model_extra or {})
        return [(name, value) for name, value in given.items() if value is not None]

    def call_options(self) -> dict[str, Any]:
        """What each model call of the run gets over the assistant's options."""
        options = {name: getattr(self, name) for name in CALL_FIELDS if getattr(self, name) is not None}
        if self.response_format is not None:
            options["response_format"] = self.response_format.model_dump(by_alias=True, exclude_none=True)
        return options

    def run_metadata(self) -> dict[str, Any]:
        given = {name: getattr(self, name) for name in TO_METADATA if getattr(self, name) is not None}
        return {**(self.metadata or {}), **given}


def _never(_value: Any) -> bool:
    return False


def _one_of(*values: object) -> Callable[[Any], bool]:
    return lambda value: any(value == v and type(value) is type(v) for v in values)


TOOLS = "the legacy `functions` are not supported: send them as `tools`"
TOOL_CHOICE = "only 'auto' or 'none': the legacy `function_call` is not supported (send `tools` and `tool_choice`)"
NOT_HERE = "not supported by this server"
STORE = "stored completions are not supported (the chat is kept in this server's history)"
TIER = "only 'auto' or 'default': the assistant's connector decides"
UNKNOWN = "unknown field: this server honours or refuses each field of OpenAI's chat completions, and not this one"
# Refusable fields: (what is harmless besides null — OpenAI's value when absent, why not, OpenAI's error code).
REFUSED: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "n": (_one_of(1), "only one choice is generated (n = 1)", "unsupported_value"),
    "logprobs": (_one_of(False), "log probabilities are not available", "unsupported_value"),
    "top_logprobs": (_never, "log probabilities are not available", "unsupported_parameter"),
    "functions": (_one_of([]), TOOLS, "unsupported_parameter"),
    "function_call": (_one_of("auto", "none"), TOOL_CHOICE, "unsupported_value"),
    "audio": (_never, "only text output is supported", "unsupported_parameter"),
    "modalities": (_one_of(["text"]), 'only text output is supported (["text"])', "unsupported_value"),
    "store": (_one_of(False), STORE, "unsupported_value"),
    "service_tier": (_one_of("auto", "default"), TIER, "unsupported_value"),
    "prediction": (_never, NOT_HERE, "unsupported_parameter"),
    "web_search_options": (_never, NOT_HERE, "unsupported_parameter"),
    "prompt_cache_key": (_never, NOT_HERE, "unsupported_parameter"),
    "verbosity": (_never, NOT_HERE, "unsupported_parameter"),
}
