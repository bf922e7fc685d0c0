"""One model call as the engines receive it: provider-shaped messages, tools and options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Message = Mapping[str, Any]  # OpenAI chat-completions shape: role, content, tool_calls, tool_call_id, name
Tool = Mapping[str, Any]  # {"type": "function", "function": {"name", "description", "parameters"}}


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: Sequence[Message]
    tools: Sequence[Tool] = ()
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
