"""Validate YAML values against the JSON Schemas we ship, with messages a YAML author can act on.

The schemas in `schemas/*.json` are the single source of truth: editors read them through the
`# yaml-language-server: $schema=` header and this module interprets the same files at load.
We interpret the subset of JSON Schema 2020-12 that our schemas use (tests check that the
subset is respected and that `jsonschema` agrees with us) because we want every error at once,
each phrased as "what is wrong (expected what)", and `validate` must start fast.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, cast

from .source import Path

Schema = Mapping[str, Any]
KINDS = ("app", "assistant", "connector", "mcp", "knowledge", "eval")
SUPPORTED_KEYWORDS = frozenset(
    {
        "$schema", "$id", "$ref", "$defs", "title", "description", "default", "examples",
        "type", "properties", "additionalProperties", "required", "propertyNames", "items",
        "minItems", "uniqueItems", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
        "minLength", "pattern", "anyOf", "if", "then", "else", "writeOnly",
    }
)  # fmt: skip


@cache
def load_schema(kind: str) -> Schema:
    """The shipped JSON Schema of one file kind (`app`, `assistant`, `connector`, `mcp`, `knowledge`, `eval`)."""
    if kind not in KINDS:
        raise KeyError(kind)
    text = resources.files("yao_agent.dsl").joinpath("schemas", f"{kind}.json").read_text("utf-8")
    return cast(Schema, json.loads(text))


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def type_name(value: object) -> str:
    """The YAML author's name for a value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


_JSON_TYPE_NAMES = {"object": "mapping", "array": "list"}


def _matches_type(value: object, expected: str) -> bool:
    actual = type_name(value)
    if expected == "number":
        return actual in ("integer", "number")
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()  # JSON Schema counts 20.0 as an integer; so do editors, so do we
    return _JSON_TYPE_NAMES.get(expected, expected) == actual


def describe(schema: Schema, root: Schema) -> str:
    """A short phrase for what a schema accepts: 'string', 'list of string', 'string or list'."""
    schema = _resolve(schema, root)
    if "enum" in schema:
        return "one of: " + ", ".join(str(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(describe(s, root) for s in schema["anyOf"])
    types = schema.get("type")
    if isinstance(types, list):
        return " or ".join(_JSON_TYPE_NAMES.get(t, t) for t in cast(list[str], types))
    if types == "array" and "items" in schema:
        return f"list of {describe(schema['items'], root)}"
    if isinstance(types, str):
        return _JSON_TYPE_NAMES.get(types, types)
    return "a value"


def _resolve(schema: Schema, root: Schema) -> Schema:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return cast(Schema, node)


def validate(value: object, schema: Schema) -> list[tuple[Path, str]]:
    """Every violation of `schema` by `value`, as (YAML path, message) pairs."""
    return list(_check(value, schema, schema, ()))


def _check(value: object, schema: Schema, root: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        yield from _check_any_of(value, schema, root, path)
        return
    expected = schema.get("type")
    if expected is not None:
        options = cast(list[str], expected if isinstance(expected, list) else [expected])
        if not any(_matches_type(value, t) for t in options):
            yield path, f"wrong type: got {type_name(value)} (expected {describe(schema, root)})"
            return
    yield from _check_value(value, schema, path)
    if isinstance(value, dict):
        yield from _check_mapping(cast(dict[str, Any], value), schema, root, path)
    elif isinstance(value, list):
        yield from _check_list(cast(list[Any], value), schema, root, path)
    if "if" in schema and isinstance(value, dict):
        yield from _check_condition(cast(dict[str, Any], value), schema, root, path)


def _same(value: object, allowed: object) -> bool:
    """JSON Schema's equality: `false` is not 0, nor `true` 1 (Python's == says they are)."""
    return value == allowed and isinstance(value, bool) == isinstance(allowed, bool)


def _check_value(value: object, schema: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        choices = ", ".join(str(v) for v in schema["enum"])
        yield path, f"{value!r} is not allowed (expected one of: {choices})"
    if "const" in schema and not _same(value, schema["const"]):
        yield path, f"{value!r} is not allowed (expected {schema['const']!r})"
    if isinstance(value, float) and not math.isfinite(value):
        yield path, f"{value} is not a number (expected a finite number)"
        return
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            yield path, f"{value} is too small (expected at least {schema['minimum']})"
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            yield path, f"{value} is too small (expected more than {schema['exclusiveMinimum']})"
        if "maximum" in schema and value > schema["maximum"]:
            yield path, f"{value} is too large (expected at most {schema['maximum']})"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            yield path, "empty text (expected a non-empty string)"
        pattern = schema.get("pattern")
        if pattern is not None and not _regex(pattern).search(value):
            hint = schema.get("description", f"matching {pattern}")
            shown = "the value written" if schema.get("writeOnly") else repr(value)  # a secret is not repeated
            yield path, f"{shown} is not a valid value (expected {hint})"


def _check_mapping(value: dict[str, Any], schema: Schema, root: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    properties = cast(Mapping[str, Schema], schema.get("properties", {}))
    for key in schema.get("required", ()):
        if key not in value:
            wanted = describe(properties[key], root) if key in properties else "a value"
            yield path, f"missing required key '{key}' (expected {wanted})"
    names = schema.get("propertyNames")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        child = (*path, key)
        if names is not None:
            for _, message in _check(key, names, root, child):
                yield child, f"key {message}"
        if key in properties:
            yield from _check(item, properties[key], root, child)
        elif extra is False:
            yield child, _unknown_key(key, list(properties))
        elif isinstance(extra, Mapping):
            yield from _check(item, cast(Schema, extra), root, child)


def _check_condition(value: dict[str, Any], schema: Schema, root: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    """`if`/`then`/`else` whose branches only require keys, or hold another such condition (all our
    schemas need: a connector's type decides between three sets of keys)."""
    branch = schema.get("then" if not any(_check(value, schema["if"], root, path)) else "else")
    if not isinstance(branch, Mapping):
        return
    properties = cast(Mapping[str, Schema], schema.get("properties", {}))
    rule = cast(Mapping[str, Any], branch)
    why = rule.get("description")
    for key in rule.get("required", ()):
        if key not in value:
            wanted = describe(properties[key], root) if key in properties else "a value"
            yield path, f"missing required key '{key}' (expected {wanted}{'; ' + why if why else ''})"
    if "if" in rule:
        yield from _check_condition(value, {**rule, "properties": properties}, root, path)


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key '{key}' ({hint}expected one of: {', '.join(known)})"


def _check_list(value: list[Any], schema: Schema, root: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    minimum = schema.get("minItems", 0)
    if len(value) < minimum:
        yield path, f"too few items: {len(value)} (expected at least {minimum})"
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            yield from _check(item, cast(Schema, items), root, (*path, index))
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                yield (*path, index), f"duplicate item {item!r} (expected each item once)"
            seen.append(item)


def _check_any_of(value: object, schema: Schema, root: Schema, path: Path) -> Iterator[tuple[Path, str]]:
    branches = [_resolve(s, root) for s in schema["anyOf"]]
    results = [list(_check(value, b, root, path)) for b in branches]
    if any(not r for r in results):
        return
    # Report the branch whose type fits the value: its errors are the ones the author can fix.
    fitting = [r for b, r in zip(branches, results, strict=True) if _type_fits(value, b)]
    if len(fitting) == 1:
        yield from fitting[0]
    else:
        yield path, f"wrong type: got {type_name(value)} (expected {describe(schema, root)})"


def _type_fits(value: object, schema: Schema) -> bool:
    expected = schema.get("type")
    if expected is None:
        return ("enum" in schema and isinstance(value, str)) or "const" in schema
    options = cast(list[str], expected if isinstance(expected, list) else [expected])
    return any(_matches_type(value, t) for t in options)


def coerce_integers(value: Any, schema: Schema, root: Schema | None = None) -> Any:
    """`value` (valid for `schema`) with integral floats turned into ints where an integer is expected."""
    root = root or schema
    schema = _resolve(schema, root)
    if isinstance(value, float) and schema.get("type") == "integer":
        return int(value)
    if isinstance(value, dict):
        mapping = cast(dict[str, Any], value)
        properties = cast(Mapping[str, Schema], schema.get("properties", {}))
        extra = schema.get("additionalProperties")
        fallback = cast(Schema, extra) if isinstance(extra, Mapping) else None
        for key, item in mapping.items():
            sub = properties.get(key, fallback)
            if sub is not None:
                mapping[key] = coerce_integers(item, sub, root)
        return mapping
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = cast(list[Any], value)
        items[:] = [coerce_integers(item, cast(Schema, schema["items"]), root) for item in items]
        return items
    return cast(Any, value)
