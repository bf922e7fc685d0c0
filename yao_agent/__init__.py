"""yao-agent: assistants in YAML, hooks in JavaScript, one streaming pipeline that never loses a run.

Embedding it: `Runs` starts, streams, resumes, cancels and appends to runs (see
docs/guides/embedding.md); a run streams the typed events below and ends with exactly one `StreamEnd`.
"""

import os as _os
from typing import TYPE_CHECKING

# litellm must never reach the network on import; these must be set before anything imports it.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
_os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

from yao_agent.errors import (
    ChatBusy,
    DelegateError,
    EnvVarMissing,
    HookError,
    ModelError,
    NoActiveRun,
    NotFound,
    PermissionDenied,
    Problem,
    RunError,
    SpecError,
    ToolError,
    UsageError,
    YaoAgentError,
)
from yao_agent.events import (
    Compaction,
    Event,
    FallbackEvent,
    MessageDelta,
    MessageEnd,
    MessageStart,
    References,
    StreamEnd,
    StreamStart,
    ToolResult,
    to_dict,
    to_json,
)
from yao_agent.identity import Identity

if TYPE_CHECKING:
    from yao_agent.dsl import App, check_app, load_app
    from yao_agent.pipeline import RunHandle, RunRequest, RunResult, Runtime
    from yao_agent.service.runs import Runs

# The run service and the pipeline take a third of a second to import, the YAML loader a tenth; a
# command pays only for what it uses (`--help` for none of them): these load on first use.
_LAZY = {"Runs": "service.runs", "RunHandle": "pipeline", "RunRequest": "pipeline", "RunResult": "pipeline",
         "Runtime": "pipeline", "App": "dsl", "check_app": "dsl", "load_app": "dsl"}  # fmt: skip


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'yao_agent' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


__all__ = [
    "App",
    "ChatBusy",
    "Compaction",
    "DelegateError",
    "EnvVarMissing",
    "Event",
    "FallbackEvent",
    "HookError",
    "Identity",
    "MessageDelta",
    "MessageEnd",
    "MessageStart",
    "ModelError",
    "NoActiveRun",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "References",
    "RunError",
    "RunHandle",
    "RunRequest",
    "RunResult",
    "Runs",
    "Runtime",
    "SpecError",
    "StreamEnd",
    "StreamStart",
    "ToolError",
    "ToolResult",
    "UsageError",
    "YaoAgentError",
    "check_app",
    "load_app",
    "to_dict",
    "to_json",
]
