"""One model call as the engines receive it: provider-shaped messages, tools and options.

`CallOptions` are the chat-completions parameters a call may send, each named once, here: the
assistant's and the connector's `options` (their JSON Schemas list the same names), what a run sets
over them (a request's options, a Create hook's choices: `RUN_CALL_OPTIONS`), and what reaches the
provider. They keep the order they were given in, so what a provider receives is the body it received
when they were a dict: the assistant's options as its file lists them, then the run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

Message = Mapping[str, Any]  # OpenAI chat-completions shape: role, content, tool_calls, tool_call_id, name
Tool = Mapping[str, Any]  # {"type": "function", "function": {"name", "description", "parameters"}}


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Chat-completions parameters of one model call; None: not set (the provider's default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | Sequence[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Mapping[str, float] | None = None
    reasoning_effort: str | None = None
    parallel_tool_calls: bool | None = None
    response_format: Mapping[str, Any] | None = None
    # Only an assistant's or a connector's own options set these (the operator's, not a run's).
    user: str | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    extra_body: Mapping[str, Any] | None = None
    # The names set, in the order they were given: the JSON form lists them so. Options built by name
    # (`of`, `over`) list them all; built by field, they are found, in the fields' order.
    given: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.given:
            object.__setattr__(self, "given", tuple(n for n in CALL_OPTIONS if getattr(self, n) is not None))

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> CallOptions:
        """Options given by name (an assistant's or connector's `options`, a request's); a ValueError names
        one that is no call option."""
        wrong = [name for name in given if name not in _NAMES]
        if wrong:
            raise ValueError(f"unknown call option '{wrong[0]}' (expected one of: {', '.join(CALL_OPTIONS)})")
        chosen = {name: value for name, value in given.items() if value is not None}
        return cls(**chosen, given=tuple(chosen)) if chosen else NO_OPTIONS

    def to_json(self) -> dict[str, Any]:
        """The options as the provider's request carries them."""
        return {name: getattr(self, name) for name in self.given}

    def over(self, top: CallOptions) -> CallOptions:
        """These options with `top`'s set over them: a name both set keeps its place, with `top`'s value; a
        name only `top` sets comes after, in the fields' order."""
        if not top.given:
            return self
        values = self.to_json() | top.to_json()
        added = [name for name in CALL_OPTIONS if name in top.given and name not in self.given]
        return CallOptions(**values, given=(*self.given, *added))

    def without(self, name: str) -> CallOptions:
        if name not in self.given:
            return self
        values = {n: getattr(self, n) for n in self.given if n != name}
        return CallOptions(**values, given=tuple(values))


CALL_OPTIONS: tuple[str, ...] = tuple(f.name for f in fields(CallOptions) if f.name != "given")
# What a run may set over the assistant's options: a request (the OpenAI-compatible body's fields), and a
# Create hook (some of them). `user`, `tool_choice` and `extra_body` stay the operator's.
RUN_CALL_OPTIONS: tuple[str, ...] = tuple(n for n in CALL_OPTIONS if n not in ("user", "tool_choice", "extra_body"))
NO_OPTIONS = CallOptions()
_NAMES = frozenset(CALL_OPTIONS)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: Sequence[Message]
    tools: Sequence[Tool] = ()
    options: CallOptions = NO_OPTIONS
