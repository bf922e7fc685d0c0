"""Per-file checks a JSON Schema cannot express: templates, regular expressions, rules spanning keys.

They read the raw YAML values and look only at parts of the right shape, so they also run on
files with schema errors: an author sees every mistake of a file in one pass. (A part of the
wrong shape has already been reported by the schema.)
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, cast

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.base.structured import schema_problems
from yao_agent.errors import Problem

from .source import Document, format_path
from .source import Path as YamlPath
from .specs import LOCAL_MODELS, LOCAL_TYPE
from .templates import PROMPT_VARIABLES, SCRIPT_VARIABLES, check_template

mapping = as_mapping


def items(value: object) -> list[tuple[int, Any]]:
    return list(enumerate(as_list(value)))


def check_file(kind: str, doc: Document) -> None:
    data = mapping(doc.value)
    if kind == "app":
        _check_prompts(doc, ("prompts",), data.get("prompts"))
    elif kind == "assistant":
        _check_prompts(doc, ("prompts",), data.get("prompts"))
        for name, presets in mapping(data.get("prompt_presets")).items():
            _check_prompts(doc, ("prompt_presets", name), presets)
        _check_access(doc, data)
        _check_output(doc, data)
        _check_context(doc, data)
    elif kind == "connector":
        _check_connector(doc, data)
        _check_access(doc, data)
    elif kind == "knowledge":
        _check_access(doc, data)
    elif kind == "mcp":
        transport = data.get("transport", "stdio")
        misplaced = ("command", "args", "env", "cwd") if transport == "http" else ("url", "headers")
        for key in misplaced:
            if key in data:
                doc.add((key,), f"'{key}' does not apply to transport: {transport}")


def check_template_at(doc: Document, path: YamlPath, source: object, allowed: frozenset[str]) -> None:
    if not isinstance(source, str):
        return
    found = check_template(source, allowed)
    if found is None:
        return
    offset, message = found
    # Only a literal block (`|`) keeps the value's lines as file lines; in quoted, plain or folded text a
    # line of the value is not a line of the file, so the value's own line is the honest answer.
    line = doc.line(path) + offset if path in doc.literal_scalars else doc.line(path)
    doc.problems.append(Problem(doc.file, line, format_path(path), message))


def _check_prompts(doc: Document, path: YamlPath, prompts: object) -> None:
    for index, prompt in items(prompts):
        check_template_at(doc, (*path, index, "content"), mapping(prompt).get("content"), PROMPT_VARIABLES)


def _check_access(doc: Document, data: Mapping[str, Any]) -> None:
    """An `access` is public or lists whom it admits, never both and never nobody: one that admits nobody
    (`teams: []`, `public: false`) makes the file unusable, which is always a mistake."""
    given = mapping(data.get("access"))
    if given is not data.get("access") or not isinstance(given.get("public", False), bool):
        return  # none, or the wrong shape: the schema said so
    listed = [key for key in ("teams", "users") if as_list(given.get(key))]
    if given.get("public") is True and listed:
        doc.add(("access", listed[0]), "listed with public: true, which admits everyone (expected one or the other)")
    elif given.get("public") is not True and not listed:
        doc.add(("access",), "admits nobody (expected public: true, or teams or users naming someone)")


def _check_output(doc: Document, data: Mapping[str, Any]) -> None:
    """`output.schema` (and an `options.response_format` one) must itself be a JSON Schema this server
    applies, by the rules a request's `response_format` is held to (structured.py): a broken one would
    fail every run, far from its cause and after a paid model call."""
    output = mapping(data.get("output"))
    if mapping(output.get("schema")) is output.get("schema"):  # else none, or the wrong shape: said already
        for where, message in schema_problems(mapping(output.get("schema"))):
            doc.add(("output", "schema", *where), message)
    given = mapping(mapping(mapping(data.get("options")).get("response_format")).get("json_schema"))
    if mapping(given.get("schema")) is given.get("schema"):
        for where, message in schema_problems(mapping(given.get("schema"))):
            doc.add(("options", "response_format", "json_schema", "schema", *where), message)


def _check_context(doc: Document, data: Mapping[str, Any]) -> None:
    """A window no larger than the reserve for the reply leaves no room for any request."""
    context = mapping(data.get("context"))
    window, reserve = context.get("max_input_tokens"), context.get("reserve_output_tokens", 1024)
    if type(window) is int and type(reserve) is int and window <= reserve:
        expected = f"expected more than reserve_output_tokens, {reserve}"
        doc.add(("context", "max_input_tokens"), f"{window} leaves no room for a request ({expected})")


def _check_connector(doc: Document, data: Mapping[str, Any]) -> None:
    kind = data.get("type")
    if kind == LOCAL_TYPE:
        _check_local(doc, data)
    if kind != "scripted":
        for key in ("rules", "chunk_size", "delay_ms"):
            if key in data and isinstance(kind, str):
                doc.add((key,), f"'{key}' is only used by type: scripted (this connector is type: {kind})")
        return
    for index, rule in items(data.get("rules")):
        _check_rule(doc, ("rules", index), mapping(rule))


# What a `type: local` connector has no use for: no provider is called, and it never chats.
_NOT_LOCAL = ("api_key", "base_url", "api_version", "headers", "engine", "capabilities", "options", "pricing")


def _check_local(doc: Document, data: Mapping[str, Any]) -> None:
    model = data.get("model")
    if isinstance(model, str) and model and model not in LOCAL_MODELS:
        doc.add(("model",), f"'{model}' is no local model (expected {', '.join(LOCAL_MODELS)}, or no model)")
    for key in _NOT_LOCAL:
        if key in data:
            doc.add((key,), f"'{key}' does not apply to type: local (it embeds in this process, calling no provider)")


def author_regex(pattern: str) -> re.Pattern[str]:
    """An author's Python regex (a scripted rule's `match.user`). One Python warns about — a character class
    such as `[a--z]` or `[[]`, which a later Python may read as a set operation — is refused as `re.error`:
    the warning would otherwise reach the author's terminal as Python's own, naming no file or line. Only
    warnings `re` attributes to this module become errors: validation also runs on a thread of a serving
    process (a reload), whose other threads' warnings must stay warnings."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=FutureWarning, module=re.escape(__name__))
        try:
            return re.compile(pattern)
        except FutureWarning as warned:
            raise re.error(f"{warned} (a later Python may read it otherwise: escape the character)") from None


def _check_rule(doc: Document, path: YamlPath, rule: Mapping[str, Any]) -> None:
    pattern = mapping(rule.get("match")).get("user")
    if isinstance(pattern, str):
        try:
            author_regex(pattern)
        except (re.error, OverflowError) as exc:  # OverflowError: a repeat count such as a{4294967296}
            doc.add((*path, "match", "user"), f"invalid regular expression: {exc} (expected a Python regex)")
        except RecursionError:
            doc.add((*path, "match", "user"), "regular expression nested too deeply (expected a simpler one)")
    answers = [key for key in ("reply", "tool_calls", "error") if key in rule]
    if not answers:
        doc.add(path, "rule gives no answer (expected one of: reply, tool_calls, error)")
    elif "error" in answers and len(answers) > 1:
        doc.add((*path, "error"), "a rule that fails cannot also answer (expected error alone)")
    for key in ("reply", "reasoning"):
        check_template_at(doc, (*path, key), rule.get(key), SCRIPT_VARIABLES)
    for index, call in items(rule.get("tool_calls")):
        arguments = (*path, "tool_calls", index, "arguments")
        for where, text in _strings(arguments, mapping(call).get("arguments")):
            check_template_at(doc, where, text, SCRIPT_VARIABLES)


def _strings(path: YamlPath, value: object) -> Iterator[tuple[YamlPath, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in cast(Mapping[str, Any], value).items():
            yield from _strings((*path, key), item)
    else:
        for index, item in items(value):
            yield from _strings((*path, index), item)
