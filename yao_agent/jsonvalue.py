"""Typed views of untyped JSON-like values (parsed YAML, provider bodies, hook results)."""

from __future__ import annotations

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
