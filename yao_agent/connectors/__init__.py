"""Model connectors: role resolution, the model call (two engines, one stream of deltas), scripted."""

from yao_agent.connectors.call import Engine, Engines, RetryPolicy, stream_call
from yao_agent.connectors.deltas import (
    CallEvent,
    Delta,
    Fallback,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from yao_agent.connectors.request import ModelRequest
from yao_agent.connectors.resolve import Resolution, RoleSettings, resolve_connectors

__all__ = [
    "CallEvent",
    "Delta",
    "Engine",
    "Engines",
    "Fallback",
    "Finish",
    "ModelRequest",
    "ReasoningDelta",
    "Resolution",
    "RetryPolicy",
    "RoleSettings",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "resolve_connectors",
    "stream_call",
]
