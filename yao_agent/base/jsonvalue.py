"""Typed views of untyped JSON-like values (parsed YAML, provider bodies, hook results)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, cast


def as_mapping(value: object) -> Mapping[str, Any]:
    """`value` if it is a mapping, else an empty one."""
    if type(value) is dict:  # parsed JSON: asked first, since the check against the ABC costs several times more
        return cast(dict[str, Any], value)
    return cast(Mapping[str, Any], value) if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """`value` if it is a list, else an empty one."""
    return cast(list[Any], value) if isinstance(value, list) else []


class NotPlainJson(ValueError):
    """Text that Python's JSON reader takes but that is no plain JSON; `str(error)` says why."""


def strict_loads(text: str) -> Any:
    """The JSON value `text` is, read as every other reader of it would: `json.JSONDecodeError` for text
    that is no JSON, `NotPlainJson` for what Python's reader takes but JSON has not — NaN, Infinity, a
    number beyond a double (`1e999`) — and for an object naming a key twice (readers disagree on which
    value wins, and a person approving a call must see the value that runs)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_once)


def _no_constant(literal: str) -> Any:
    raise NotPlainJson(f"{literal} is not a JSON number")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise NotPlainJson(f"{literal} is beyond what a JSON number may hold (a double)")
    return value


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise NotPlainJson(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return out


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def object_in(text: str) -> Mapping[str, Any]:
    """The JSON object a model wrote, read leniently (a fence, words around it); empty when there is none."""
    found = _OBJECT.search(text)
    if found is None:
        return {}
    try:
        return as_mapping(json.loads(found.group(0)))
    except (json.JSONDecodeError, RecursionError):
        return {}
