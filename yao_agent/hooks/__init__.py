"""JavaScript hooks: `Create`/`Next` functions of an assistant, run in warm, sandboxed V8 contexts."""

from yao_agent.hooks.runtime import HookCall, HookContext, HookRunner

__all__ = ["HookCall", "HookContext", "HookRunner"]
