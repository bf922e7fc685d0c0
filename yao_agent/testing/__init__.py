"""Helpers for testing assistants without a real model provider.

`ScriptedModel` and `FunctionModel` answer in process, in the engines' place (`yao_agent.testing.model`):
for tests of what an assistant does with a model's replies. `FakeProvider` is a loopback, scriptable
fake of OpenAI's chat-completions endpoint, for tests of what goes over the wire; see
`yao_agent.testing.fake_provider` for how to run it. Both serve the same `Reply` objects and know the
same built-in scenarios (`yao_agent.testing.fake_scenarios`).

`FakeProvider` is loaded on first use instead of imported here: ``python -m yao_agent.testing.fake_provider``
would otherwise import that module twice (once through this package, once as ``__main__``), which Python
warns about, and code that only builds `Reply` objects does not pay for importing aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from yao_agent.testing.fake_scenarios import (
    DEFAULT_USAGE,
    SCENARIO_NAMES,
    RecordedRequest,
    Reply,
    ToolCall,
    UnknownScenario,
    builtin_reply,
)
from yao_agent.testing.model import FunctionModel, ModelDouble, ModelFunction, ScriptedModel

if TYPE_CHECKING:
    from yao_agent.testing.fake_provider import FakeProvider

__all__ = [
    "DEFAULT_USAGE",
    "SCENARIO_NAMES",
    "FakeProvider",
    "FunctionModel",
    "ModelDouble",
    "ModelFunction",
    "RecordedRequest",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "UnknownScenario",
    "builtin_reply",
]


def __getattr__(name: str) -> Any:
    if name == "FakeProvider":
        return importlib.import_module("yao_agent.testing.fake_provider").FakeProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
