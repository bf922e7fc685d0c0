"""Checking the arguments a model wrote before they reach an MCP server.

Every failure here is a message for the model, in plain words, so it can correct the call: a model's
bad JSON must never wedge a chat, and a schema violation caught here saves a round trip to the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from yao_agent.base import schema_bounds
from yao_agent.base.jsonvalue import NotPlainJson, strict_loads
from yao_agent.base.safe_regex import RegexRefused
from yao_agent.tools.catalog import ToolSpec

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

log = logging.getLogger("yao_agent.tools")

EXPECTED = "expected a JSON object matching the tool's schema"
MAX_REPORTED = 5


class ArgumentError(Exception):
    """The arguments are wrong; `str(error)` is what the model is told."""


def parse_arguments(text: str) -> dict[str, Any]:
    """The JSON object the model wrote; an empty string means no arguments."""
    if not text.strip():
        return {}
    try:
        value = strict_loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentError(
            f"invalid JSON in the arguments: {exc.msg} at line {exc.lineno} column {exc.colno} ({EXPECTED})"
        ) from None
    except NotPlainJson as exc:
        raise ArgumentError(f"invalid JSON in the arguments: {exc} ({EXPECTED})") from None
    if not isinstance(value, dict):
        raise ArgumentError(f"the arguments are {_json_kind(value)}, not an object ({EXPECTED})")
    return cast(dict[str, Any], value)


QUOTED_CHARS = 200  # of arguments that are no JSON object, quoted back to the model


def invalid_arguments(text: str) -> str:
    """What the model is told about arguments that are not a JSON object: why, and what it sent.

    The call itself is stored (and re-sent) with `{}`, so this message is the only place the model
    sees what it wrote."""
    try:
        parse_arguments(text)
        reason = f"the arguments are not a JSON object ({EXPECTED})"
    except ArgumentError as exc:
        reason = str(exc)
    more = "…" if len(text) > QUOTED_CHARS else ""
    return f"{reason}; the arguments received were: {text[:QUOTED_CHARS]}{more}"


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


class ArgumentChecker:
    """Validates arguments against each tool's input schema, compiling each schema once."""

    def __init__(self) -> None:
        self._validators: dict[ToolSpec, Validator | None] = {}

    def check(self, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Raise `ArgumentError` listing what is wrong, path first (`arguments.days: ...`)."""
        from referencing.exceptions import Unresolvable

        validator = self._validator(spec)
        if validator is None:
            return
        try:
            # The schema's patterns on RE2: the arguments are the model's, which a user can steer, and Python's
            # `re` may take hours over them with a pattern such as `(a+)+$` (schema_bounds).
            with schema_bounds.bounded(steps=None):
                errors = sorted(validator.iter_errors(arguments), key=_error_order)
        except (Unresolvable, RegexRefused) as exc:  # the MCP server checks the arguments its own way
            log.warning("MCP server '%s': tool '%s' has a schema this server does not apply (%s): its arguments "
                        "go to the server unchecked", spec.server, spec.tool, exc)  # fmt: skip
            self._validators[spec] = None
            return
        if errors:
            raise ArgumentError("; ".join(_describe(error) for error in errors[:MAX_REPORTED]))

    def _validator(self, spec: ToolSpec) -> Validator | None:
        if spec not in self._validators:
            self._validators[spec] = _compile(spec)
        return self._validators[spec]


def _compile(spec: ToolSpec) -> Validator | None:
    """A validator for the draft the schema declares (2020-12 when it declares none).

    A schema that is itself invalid is the server's mistake, not the model's: it is logged and the
    arguments go to the server unchecked, which validates them its own way.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for
    from referencing import Registry

    cls = validator_for(spec.parameters, default=Draft202012Validator)
    try:
        cls.check_schema(spec.parameters)
    except SchemaError as exc:
        log.warning("MCP server '%s': tool '%s' has an invalid input schema: %s", spec.server, spec.tool, exc.message)
        return None
    # An empty registry: a `$ref` to a URL is never fetched (an MCP server must not make us send requests).
    return cls(spec.parameters, registry=Registry())


def _error_order(error: ValidationError) -> tuple[list[str], str]:
    return [str(part) for part in error.absolute_path], error.message


def _describe(error: ValidationError) -> str:
    return f"{_path(error.absolute_path)}: {error.message}"


def _path(parts: Iterable[str | int]) -> str:
    text = "arguments"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text
