"""What a model call yields, whichever engine made it: small typed pieces in arrival order."""

from __future__ import annotations

from dataclasses import dataclass

from yao_agent.vocabulary import ModelErrorKind


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call. `id` and `name` come with the first fragment of an index only."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str  # stop | tool_calls | length | content_filter | ...


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt: int | None, completion: int | None, total: int | None = None) -> Usage:
        """From a provider's numbers, any of which may be missing (total is then the sum)."""
        prompt, completion = prompt or 0, completion or 0
        return cls(prompt, completion, total or prompt + completion)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class Fallback:
    """The call moved from one connector of a chain to the next, before any token arrived."""

    from_connector: str
    to_connector: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailedTry:
    """One try of the call failed before any token, and the call goes on: the same connector is tried
    again (after a back-off), or the chain's next one. A run records each, so its record shows where the
    time went."""

    connector: str
    kind: ModelErrorKind
    message: str  # the error's message, already free of the connector's secrets


Delta = TextDelta | ReasoningDelta | ToolCallDelta | Finish | Usage
CallEvent = Delta | Fallback | FailedTry


@dataclass(frozen=True, slots=True)
class Embedded:
    """What an embedding call returns: one vector per text, in the texts' order, all from one model."""

    vectors: list[list[float]]
    model: str
    input_tokens: int
    connector: str  # the id of the connector that served every vector
