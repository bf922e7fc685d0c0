"""Model connectors: role resolution, the model call (three engines — openai, litellm, scripted — one stream of
deltas), fallback cooldowns and capabilities; embeddings (`connectors.embedding`, those engines and `local`)."""

from yao_agent.connectors.call import Engine, Engines, RetryPolicy, stream_call
from yao_agent.connectors.cooldown import Cooldowns
from yao_agent.connectors.deltas import (
    CallEvent,
    Delta,
    Embedded,
    FailedTry,
    Fallback,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from yao_agent.connectors.request import CallOptions, ModelRequest
from yao_agent.connectors.resolve import Resolution, RoleSettings, resolve_connectors

__all__ = [
    "CallEvent",
    "CallOptions",
    "Cooldowns",
    "Delta",
    "Embedded",
    "Engine",
    "Engines",
    "FailedTry",
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
