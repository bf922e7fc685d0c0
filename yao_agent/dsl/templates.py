"""Jinja2 templates of prompts and scripted replies: checked at load, compiled once, run sandboxed."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment

from yao_agent.errors import RenderError

PROMPT_VARIABLES = frozenset({"assistant", "user_id", "team_id", "chat_id", "locale", "now", "metadata"})
SCRIPT_VARIABLES = frozenset({"last_user", "last_message", "messages", "match", "tool_results", "now"})

# Unknown top-level names are rejected at load (check_template); a missing key inside request data
# such as `metadata.city` renders empty, since request metadata is optional by nature.
_env = SandboxedEnvironment(undefined=ChainableUndefined, autoescape=False, keep_trailing_newline=True)
# Names Jinja provides itself: its globals (range, dict, namespace, ...) and loop/macro variables.
_BUILTIN_NAMES = frozenset(_env.globals) | {"loop", "self", "caller", "varargs", "kwargs", "super"}


def check_template(source: str, allowed: frozenset[str]) -> tuple[int, str] | None:
    """(line within the template, message) for a syntax error or an unknown variable; None if fine.

    Parsing is enough to find both, and much cheaper than compiling; compilation waits for the
    first render.
    """
    if "{" not in source:
        return None
    try:
        tree = _env.parse(source)
    except TemplateSyntaxError as exc:
        return exc.lineno, f"template syntax error: {exc.message}"
    except RecursionError:
        return 1, "template nested too deeply (expected a simpler expression)"
    unknown_filter = _unknown_filter(tree)
    if unknown_filter is not None:
        return unknown_filter
    unknown = sorted(_free_names(tree) - allowed)
    if unknown:
        line = _first_line_naming(source, unknown[0])
        names = ", ".join(sorted(allowed))
        return line, f"unknown template variable '{unknown[0]}' (expected one of: {names})"
    return None


def _unknown_filter(tree: nodes.Template) -> tuple[int, str] | None:
    """Filters and tests are looked up when Jinja compiles; a parse alone does not notice a typo."""
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        table, kind = (_env.filters, "filter") if isinstance(node, nodes.Filter) else (_env.tests, "test")
        if node.name not in table:
            return node.lineno, f"unknown template {kind} '{node.name}'"
    return None


def _free_names(tree: nodes.Template) -> set[str]:
    """Names a template reads but never sets.

    Cruder than `jinja2.meta.find_undeclared_variables` about scopes (a name set anywhere counts as
    set everywhere) and twice as fast, which matters when an app has thousands of prompts.
    """
    read: set[str] = set()
    written: set[str] = set()
    for node in tree.find_all(nodes.Name):
        (read if node.ctx == "load" else written).add(node.name)
    return read - written - _BUILTIN_NAMES


def _first_line_naming(source: str, name: str) -> int:
    for number, text in enumerate(source.splitlines(), start=1):
        if name in text and "{" in text:
            return number
    return 1


@lru_cache(maxsize=4096)
def _compiled(source: str) -> Any:
    return _env.from_string(source)


def render(source: str, variables: Mapping[str, Any]) -> str:
    """Render a template that passed `check_template`. Plain text is returned as is."""
    if "{" not in source:
        return source
    try:
        return str(_compiled(source).render(variables))
    except TemplateError as exc:
        raise RenderError(f"template failed to render: {exc}") from None
