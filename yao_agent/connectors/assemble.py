"""Put a call's deltas back together: the full text, reasoning and tool calls, as they grow."""

from __future__ import annotations

from dataclasses import dataclass, field

from yao_agent.connectors.deltas import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage


@dataclass(slots=True)
class PartialCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class Assembled:
    """Everything one model call said so far. `finish` is None until the model says it is done."""

    text: list[str] = field(default_factory=list[str])
    reasoning: list[str] = field(default_factory=list[str])
    calls: dict[int, PartialCall] = field(default_factory=dict[int, PartialCall])
    finish: str | None = None
    usage: Usage | None = None

    def add(self, delta: Delta) -> PartialCall | None:
        """Fold one delta in; returns the tool call it extended, if any."""
        if isinstance(delta, TextDelta):
            self.text.append(delta.text)
        elif isinstance(delta, ReasoningDelta):
            self.reasoning.append(delta.text)
        elif isinstance(delta, ToolCallDelta):
            call = self.calls.get(delta.index)
            if call is None:
                call = self.calls[delta.index] = PartialCall(delta.index)
            call.id = call.id or (delta.id or "")
            call.name = call.name or (delta.name or "")
            call.arguments += delta.arguments
            return call
        elif isinstance(delta, Finish):
            self.finish = delta.reason
        else:
            self.usage = delta if self.usage is None else self.usage + delta
        return None

    @property
    def content(self) -> str:
        return "".join(self.text)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def tool_calls(self) -> list[PartialCall]:
        return [self.calls[i] for i in sorted(self.calls)]
