"""The YAML DSL: an app folder → typed, validated specs (or every problem, located)."""

from .loader import Report, check_app, load_app
from .schema import KINDS, load_schema
from .specs import (
    Access,
    App,
    AppConfig,
    AssistantSpec,
    Capabilities,
    ConnectorSpec,
    HookPolicy,
    Limits,
    McpServerSpec,
    McpSettings,
    McpUse,
    PromptSpec,
    ScriptRule,
    ScriptToolCall,
)

__all__ = [
    "KINDS",
    "Access",
    "App",
    "AppConfig",
    "AssistantSpec",
    "Capabilities",
    "ConnectorSpec",
    "HookPolicy",
    "Limits",
    "McpServerSpec",
    "McpSettings",
    "McpUse",
    "PromptSpec",
    "Report",
    "ScriptRule",
    "ScriptToolCall",
    "check_app",
    "load_app",
    "load_schema",
]
