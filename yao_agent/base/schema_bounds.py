"""`jsonschema`, bounded for schemas a caller wrote: regexes on RE2, and a step budget per check.

`jsonschema` 4.26 runs Python's `re` (which backtracks: minutes for `(a+)+$` over 30 characters) in its
`pattern` and `patternProperties` keywords and in the helpers behind `additionalProperties` and
`unevaluatedProperties`, through the `re` name of two of its modules. That name is given a stand-in whose
`search` runs on RE2 (safe_regex) inside `bounded()`, and is Python's own everywhere else (other users
of `jsonschema` in the process, such as the MCP SDK, are not changed). tests/pipeline/
test_structured_output.py tells the engine apart in each of those keywords (`^a$` against "a\\n"), so an
upgrade that matches another way fails there. Used for output schemas (structured.py) and for MCP tool
schemas over a model's arguments (tools/validate.py).

The budget counts keyword evaluations: `anyOf` branches over a recursive `$ref` multiply with an
answer's nesting, which no size limit bounds. A validator switches to another draft's class where a
schema says `$schema`; the counting class is kept by validating a copy without `$schema` (the schema is
checked against Draft 2020-12's meta-schema anyway, so it is read as 2020-12).

`jsonschema` is imported inside the functions (see structured.py).
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from yao_agent.base import safe_regex

if TYPE_CHECKING:
    from jsonschema import FormatChecker
    from jsonschema.protocols import Validator

# Keyword evaluations to check one answer, a few seconds of CPU: an answer of 300,000 values took 400,000.
MAX_STEPS = 1_000_000
# Measured costs, in keyword evaluations: a reference is looked up and a validator made for its target;
# an error is built with its paths, and kept by each `anyOf`/`oneOf` above it.
_WEIGHTS = {"$ref": 4, "$dynamicRef": 4}
_ERROR_WEIGHT = 4
# Keys whose values are data, not sub-schemas: a "$ref" or "$schema" inside them is no keyword.
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keys whose values map names to sub-schemas: there, a key such as "enum" names a property.
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_PATCHED = ("jsonschema._keywords", "jsonschema._utils")


class TooCostly(Exception):
    """The check took more than its budget of steps."""


@dataclass(slots=True)
class _Budget:
    left: float

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly("over the budget of steps")


_BUDGET: ContextVar[_Budget | None] = ContextVar("schema_budget", default=None)


@contextmanager
def bounded(steps: int | None = MAX_STEPS) -> Generator[None]:
    """Inside: `jsonschema`'s regexes run on RE2, and validators of `validator()` spend at most `steps`
    keyword evaluations (none counted when None), then raise TooCostly."""
    _install()
    token = _BUDGET.set(_Budget(float("inf") if steps is None else steps))
    try:
        yield
    finally:
        _BUDGET.reset(token)


class _Re:
    """Python's `re` module as `jsonschema` sees it, but `search` runs on RE2 inside `bounded()`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def search(self, pattern: str, string: str, flags: int = 0) -> object:
        if _BUDGET.get() is None or flags:
            return re.search(pattern, string, flags)
        return safe_regex.search(pattern, string)  # only its truth is used: `if re.search(...)`


_INSTALLING = threading.Lock()


def _install() -> None:
    with _INSTALLING:  # checks run in threads: two may be first at once
        for name in _PATCHED:
            module = importlib.import_module(name)
            current = getattr(module, "re", None)
            if isinstance(current, _Re):
                continue
            if current is not re:
                raise RuntimeError(f"{name} no longer matches with `re`: see yao_agent/base/schema_bounds.py")
            module.re = _Re()  # pyright: ignore[reportAttributeAccessIssue]


def regex_problem(pattern: str) -> str:
    """Why a schema's pattern is refused, for a 400 or a `validate` line."""
    return safe_regex.problem(pattern) or f"the pattern {pattern!r} cannot be used ({safe_regex.SYNTAX})"


@functools.cache
def format_checker() -> FormatChecker:
    """Draft 2020-12's format checks, with `regex` meaning: RE2 can run it."""
    from jsonschema import FormatChecker
    from jsonschema.validators import Draft202012Validator

    checker = FormatChecker(formats=())
    checker.checkers.update(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks("regex", raises=safe_regex.RegexRefused)(_is_regex)
    return checker


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        safe_regex.compile(instance)
    return True


def meta_validator() -> Validator:
    """Draft 2020-12's meta-schema, with formats (`regex`: RE2 can run it) checked."""
    from jsonschema.validators import Draft202012Validator

    return Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=format_checker())


def validator(schema: Mapping[str, Any]) -> Validator:
    """A Draft 2020-12 validator that checks formats too, counts its steps inside `bounded()`, and
    fetches nothing: with an empty registry, a `$ref` to a URL is unresolvable (the schema may come from
    a request: no server-side requests for it)."""
    from referencing import Registry

    return _counting()(_without_dialects(schema), registry=Registry(), format_checker=format_checker())


@functools.cache
def _counting() -> type[Validator]:
    from jsonschema.validators import Draft202012Validator, extend  # pyright: ignore[reportUnknownVariableType]

    keywords = {name: _counted(check, _WEIGHTS.get(name, 1)) for name, check in Draft202012Validator.VALIDATORS.items()}
    return cast("type[Validator]", extend(Draft202012Validator, validators=keywords))


def _counted(keyword: Callable[..., Any], steps: int) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return keyword(validator, value, instance, schema)
        budget.spend(steps)
        return _errors(budget, keyword(validator, value, instance, schema) or ())

    return counted


def _errors(budget: _Budget, errors: Iterable[Any]) -> Iterator[Any]:
    for error in errors:
        budget.spend(_ERROR_WEIGHT)
        yield error


def _without_dialects(value: Any, named: bool = False) -> Any:
    """A copy of a schema without `$schema` keywords (data, such as an `enum`'s values, is kept whole);
    `named`: `value` maps names to sub-schemas (SCHEMA_MAPS)."""
    if isinstance(value, Mapping):
        given = cast(Mapping[str, Any], value)
        if named:
            return {key: _without_dialects(item) for key, item in given.items()}
        return {key: item if key in DATA_KEYWORDS else _without_dialects(item, key in SCHEMA_MAPS)
                for key, item in given.items() if not (key == "$schema" and isinstance(item, str))}  # fmt: skip
    if isinstance(value, list):
        return [_without_dialects(item) for item in cast(list[Any], value)]
    return value
