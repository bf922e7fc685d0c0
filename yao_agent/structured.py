"""Structured output's JSON work: is a schema usable, what does an answer say, does it fit the schema.

Shared by the DSL (an assistant's `output.schema` is checked at load), the OpenAI-compatible route (a
request's `response_format` schema is checked before the run) and the pipeline (a run's final answer is
read and validated, CONTRACT §4 item 7). Schemas are JSON Schema Draft 2020-12.

`jsonschema` is imported inside the functions: it takes a tenth of a second, and `validate` and the
CLI start without it unless an app uses structured output.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

Where = tuple[str | int, ...]
MAX_REPORTED = 3  # validation errors told to the model at once: the first few are what it can act on
TYPES = "string, number, integer, boolean, object, array, null, or a list of them"
# A whole answer in one Markdown code fence, as models like to write JSON: ```json … ``` (or a bare ```).
_FENCE = re.compile(r"\A\s*```[ \t]*(?:json|JSON)?[ \t]*\r?\n(?P<body>.*?)\r?\n?[ \t]*```\s*\Z", re.DOTALL)
# Keys whose values are data, not sub-schemas: a "$ref" inside them is no reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


class AnswerProblem(Exception):
    """The answer is no JSON, or does not fit the schema; `str()` says why, in words for the model."""


class SchemaUnusable(Exception):
    """The schema cannot be applied to any answer (a `$ref` to nothing): no retry can help."""


def schema_problems(schema: Mapping[str, Any]) -> list[tuple[Where, str]]:
    """Why `schema` cannot be an output schema, each with where inside it; none when it can."""
    from jsonschema.validators import Draft202012Validator

    odd = _not_json(schema, ())
    if odd is not None:
        return [odd]  # the checks below would fail on it, or pass values no provider can be sent
    meta = _validator(Draft202012Validator.META_SCHEMA)
    found: list[tuple[Where, str]] = []
    for error in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path]):
        where = tuple(error.absolute_path)
        hint = f" (expected {TYPES})" if where[-1:] == ("type",) else ""
        found.append((where, f"not a valid JSON Schema (Draft 2020-12): {error.message}{hint}"))
    return found or _unresolved(schema)


def _not_json(value: object, where: Where) -> tuple[Where, str] | None:
    """The first value that is not JSON (YAML also reads dates, and numbers such as .inf): it could not
    be sent to a provider."""
    if isinstance(value, Mapping):
        for key, item in cast(Mapping[object, object], value).items():
            found = _not_json(item, (*where, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        items = cast(list[object], value)
        return next((f for n, item in enumerate(items) if (f := _not_json(item, (*where, n))) is not None), None)
    if isinstance(value, float) and not math.isfinite(value):
        return where, f"{value} is not a JSON number (expected a finite number)"
    if value is None or isinstance(value, str | int | float | bool):
        return None
    return where, f"a YAML {type(value).__name__} is not a JSON value (expected a string: quote it)"


def _unresolved(schema: Mapping[str, Any]) -> list[tuple[Where, str]]:
    """The local `$ref`s ("#/$defs/...") that point nowhere, which the meta-schema does not see.

    Only a schema without nested `$id`s is looked into (there, "#..." always means the root); in others,
    such a reference fails when an answer is validated, as a remote one does (they are never fetched)."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    refs = list(_refs(schema, ()))
    if any(where[-1] == "$id" for where, _ in refs):
        return []
    registry: Registry[Any] = Registry()
    resolver = registry.with_resource("", DRAFT202012.create_resource(schema)).resolver()
    found: list[tuple[Where, str]] = []
    for where, ref in refs:
        try:
            if ref.startswith("#"):
                resolver.lookup(ref)
        except Unresolvable:
            found.append((where, f"$ref '{ref}' points to nothing in this schema (expected e.g. '#/$defs/<name>')"))
    return found


def _refs(value: object, where: Where) -> Iterator[tuple[Where, str]]:
    """Every `$ref` (and nested `$id`) string of a schema, with where it is."""
    if isinstance(value, Mapping):
        for key, item in cast(Mapping[str, object], value).items():
            if key in ("$ref", "$id") and isinstance(item, str) and (key == "$ref" or where):
                yield (*where, key), item
            elif key not in _DATA_KEYWORDS:
                yield from _refs(item, (*where, key))
    elif isinstance(value, list):
        for n, item in enumerate(cast(list[object], value)):
            yield from _refs(item, (*where, n))


def unfenced(text: str) -> str:
    """The answer without the code fence a model may have wrapped it in."""
    fenced = _FENCE.match(text)
    return fenced.group("body") if fenced else text


def parse_answer(text: str) -> Any:
    """The JSON value an answer is (fenced or not), or AnswerProblem saying why it is none."""
    body = unfenced(text).strip()
    if not body:
        raise AnswerProblem("the answer is empty (expected one JSON value)")
    try:
        return json.loads(body, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise AnswerProblem(
            f"the answer is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
            "(expected one JSON value only, no other text)"
        ) from None


def _no_constant(name: str) -> Any:
    # Python reads NaN and Infinity; JSON has neither, and no other reader of the answer would accept them.
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def check_answer(schema: Mapping[str, Any], value: Any) -> None:
    """AnswerProblem listing the first few ways `value` does not fit `schema`, each with its place
    (`$` is the answer, `$.items[0].name` inside it); SchemaUnusable when the schema cannot be applied."""
    from referencing.exceptions import Unresolvable

    validator = _validator(schema)
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: ([str(p) for p in e.absolute_path], e.message))
    except Unresolvable as exc:
        raise SchemaUnusable(f"the output schema cannot be applied: {exc}") from None
    if errors:
        said = "; ".join(f"at {place(e.absolute_path)}: {e.message}" for e in errors[:MAX_REPORTED])
        more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
        raise AnswerProblem(said + more)


def _validator(schema: Mapping[str, Any]) -> Validator:
    """A Draft 2020-12 validator that checks formats too, and fetches nothing: with an empty registry, a
    `$ref` to a URL is unresolvable (the schema may come from a request: no server-side requests for it)."""
    from jsonschema.validators import Draft202012Validator
    from referencing import Registry

    return Draft202012Validator(schema, registry=Registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def place(parts: Iterable[str | int]) -> str:
    """A place in the answer: `$`, `$.city`, `$.days[2]`."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text
