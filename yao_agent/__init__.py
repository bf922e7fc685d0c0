"""yao-agent: assistants in YAML, hooks in JavaScript, one streaming pipeline that never loses a run."""

import os as _os

# litellm must never reach the network on import; these must be set before anything imports it.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
_os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

from .dsl import App, check_app, load_app
from .errors import (
    DelegateError,
    EnvVarMissing,
    HookError,
    ModelError,
    NotFound,
    PermissionDenied,
    Problem,
    RunError,
    SpecError,
    ToolError,
    UsageError,
    YaoAgentError,
)

__all__ = [
    "App",
    "DelegateError",
    "EnvVarMissing",
    "HookError",
    "ModelError",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "RunError",
    "SpecError",
    "ToolError",
    "UsageError",
    "YaoAgentError",
    "check_app",
    "load_app",
]
