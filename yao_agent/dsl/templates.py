"""Jinja2 templates of prompts and scripted replies: which texts are templates, and what they may name.

A text without `{` is plain text, used as it is. Only a template needs Jinja2, so its sandbox
(sandbox.py: the checks at load, the compiled templates, the budgets) is imported with the first
template a process meets: an app without one never imports Jinja2 (about 10 ms of CPU at start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROMPT_VARIABLES = frozenset({"assistant", "user_id", "team_id", "chat_id", "locale", "now", "metadata"})
SCRIPT_VARIABLES = frozenset({"last_user", "last_message", "messages", "match", "tool_results", "now"})


def check_template(source: str, allowed: frozenset[str]) -> tuple[int, str] | None:
    """(line within the template, message) for a syntax error or an unknown variable; None if fine."""
    if "{" not in source:
        return None
    from yao_agent.dsl import sandbox

    return sandbox.check_template(source, allowed)


def render(source: str, variables: Mapping[str, Any], origin: str = "") -> str:
    """Render a template that passed `check_template`, within the budgets. Plain text is returned as is.

    `origin` ("file:line") says where the template is written, for the error."""
    if "{" not in source:
        return source
    from yao_agent.dsl import sandbox

    return sandbox.render(source, variables, origin)
