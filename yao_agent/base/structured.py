"""Structured output's JSON work: is a schema usable, what does an answer say, does it fit the schema.

Shared by the DSL (an assistant's `output.schema` is checked at load), the OpenAI-compatible route (a
request's `response_format` schema is checked before the run) and the pipeline (a run's final answer is
read and validated, CONTRACT §4 item 7). Schemas are JSON Schema Draft 2020-12.

A schema may come from any caller, so checking one, and checking an answer against it, is bounded:

* a schema nests at most MAX_DEPTH levels and is at most MAX_BYTES of JSON (deeper ones overflowed
  Python's stack; bigger ones cost seconds of CPU to check);
* its `pattern`s, `patternProperties` and `regex` formats run on RE2, in linear time (safe_regex); a
  pattern RE2 cannot run (backreferences, lookaround) makes the schema unusable;
* every `$ref` points inside the schema: nothing is fetched, and a remote one is refused up front;
* checking one answer takes at most MAX_STEPS keyword evaluations (`anyOf` branches over a recursive
  `$ref` multiply with the answer's nesting).

`jsonschema` is imported inside the functions: it takes a tenth of a second, and `validate` and the
CLI start without it unless an app uses structured output.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import urldefrag, urljoin

from yao_agent.base import schema_bounds
from yao_agent.base.jsonvalue import NotPlainJson, strict_loads
from yao_agent.base.safe_regex import RegexRefused

Where = tuple[str | int, ...]
MAX_REPORTED = 3  # validation errors told to the model at once: the first few are what it can act on
TYPES = "string, number, integer, boolean, object, array, null, or a list of them"
# Objects and arrays inside one another: OpenAI allows 10 levels of properties, which take 21 here.
MAX_DEPTH = 64
MAX_BYTES = 256 * 1024  # of compact JSON: OpenAI's largest schemas (5,000 properties) fit
MAX_STEPS = schema_bounds.MAX_STEPS
FENCE = "```"
_CHECKED: OrderedDict[str, tuple[tuple[Where, str], ...]] = OrderedDict()  # schema digest -> its problems
_CHECKED_LOCK = threading.Lock()
_CHECKED_KEPT = 256  # clients send the same response_format with every request: checked once


class AnswerProblem(Exception):
    """The answer is no JSON, or does not fit the schema; `str()` says why, in words for the model."""


class SchemaUnusable(Exception):
    """The schema cannot be applied to any answer (a `$ref` to nothing): no retry can help."""


def schema_problems(schema: Mapping[str, Any]) -> list[tuple[Where, str]]:
    """Why `schema` cannot be an output schema, each with where inside it; none when it can.

    Its shape and size are looked at first, without recursion: what follows recurses through it."""
    odd = _too_deep(schema) or _not_json(schema, ())
    if odd is not None:
        return [odd]  # the checks below would fail on it, or pass values no provider can be sent
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode()
    if len(text) > MAX_BYTES:
        return [
            ((), f"the schema is {len(text)} bytes of JSON, more than this server takes ({MAX_BYTES} bytes at most)")
        ]
    digest = hashlib.sha256(text).hexdigest()
    with _CHECKED_LOCK:  # checked in threads, off the event loop
        known = _CHECKED.get(digest)
    if known is None:
        known = tuple(_problems(schema))
        with _CHECKED_LOCK:
            _CHECKED[digest] = known
            while len(_CHECKED) > _CHECKED_KEPT:
                _CHECKED.popitem(last=False)
    return list(known)


def _problems(schema: Mapping[str, Any]) -> list[tuple[Where, str]]:
    meta = schema_bounds.meta_validator()
    found: list[tuple[Where, str]] = []
    with schema_bounds.bounded(steps=None):  # the meta-schema's own patterns on RE2 too
        errors = sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path])
    for error in errors:
        where = tuple(error.absolute_path)
        if error.validator == "format" and error.validator_value == "regex" and isinstance(error.instance, str):
            found.append((where, schema_bounds.regex_problem(error.instance)))
            continue
        hint = f" (expected {TYPES})" if where[-1:] == ("type",) else ""
        found.append((where, f"not a valid JSON Schema (Draft 2020-12): {error.message}{hint}"))
    return found or _unresolved(schema)


def _too_deep(schema: object) -> tuple[Where, str] | None:
    """Where a schema (or an answer) nests more than MAX_DEPTH objects and arrays, looked at without recursion."""
    stack: list[tuple[object, Where]] = [(schema, ())]
    while stack:
        value, where = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        if len(where) >= MAX_DEPTH:
            return where, f"nested more than {MAX_DEPTH} levels deep (objects and arrays; expected at most {MAX_DEPTH})"
        if isinstance(value, Mapping):
            stack.extend((item, (*where, str(key))) for key, item in cast(Mapping[object, object], value).items())
        else:
            stack.extend((item, (*where, n)) for n, item in enumerate(cast(list[object], value)))
    return None


def _not_json(value: object, where: Where) -> tuple[Where, str] | None:
    """The first value that is not JSON (YAML also reads dates, and numbers such as .inf; JSON's escapes
    also write lone surrogates): it could not be sent to a provider."""
    if isinstance(value, Mapping):
        for key, item in cast(Mapping[object, object], value).items():
            if isinstance(key, str) and not _unicode(key):
                return where, f"the key {_lone(key)}"
            found = _not_json(item, (*where, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        items = cast(list[object], value)
        return next((f for n, item in enumerate(items) if (f := _not_json(item, (*where, n))) is not None), None)
    if isinstance(value, float) and not math.isfinite(value):
        return where, f"{value} is not a JSON number (expected a finite number)"
    if isinstance(value, str) and not _unicode(value):
        return where, f"the string {_lone(value)}"
    if value is None or isinstance(value, str | int | float | bool):
        return None
    return where, f"a YAML {type(value).__name__} is not a JSON value (expected a string: quote it)"


def _unicode(text: str) -> bool:
    """Whether `text` is Unicode text: JSON's escapes also write lone surrogates ("\\ud800"), which no
    provider can be sent."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _lone(text: str) -> str:
    return f"{text[:40]!r} holds a lone surrogate, which is not Unicode text (expected a whole character)"


def _unresolved(schema: Mapping[str, Any]) -> list[tuple[Where, str]]:
    """The `$ref`s (and `$dynamicRef`s) that point nowhere in the schema, which the meta-schema does not
    see: to a part that is not there, or outside the schema, which is never fetched (the schema may come
    from a request: no server-side requests for it, and no paid model call before its failure)."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    empty: Registry[Any] = Registry()
    registry = empty.with_resource("", DRAFT202012.create_resource(schema)).crawl()  # with nested `$id`s
    known = set(registry)
    found: list[tuple[Where, str]] = []
    for where, base, ref in _refs(schema, (), ""):
        said = f"{where[-1]} '{ref}'"
        if urldefrag(urljoin(base, ref)).url not in known:
            found.append((where, f"{said} is outside this schema, and this server fetches no schema "
                                 "(expected a reference inside it, e.g. '#/$defs/<name>')"))  # fmt: skip
            continue
        try:
            registry.resolver(base_uri=base).lookup(ref)
        except Unresolvable:
            found.append((where, f"{said} points to nothing in this schema (expected e.g. '#/$defs/<name>')"))
    return found


def _refs(value: object, where: Where, base: str, named: bool = False) -> Iterator[tuple[Where, str, str]]:
    """Every `$ref` and `$dynamicRef` of a schema: where it is, the URI it is relative to, and itself.
    `named`: `value` maps names to sub-schemas (schema_bounds.SCHEMA_MAPS)."""
    if isinstance(value, list):
        for n, item in enumerate(cast(list[object], value)):
            yield from _refs(item, (*where, n), base)
    if not isinstance(value, Mapping):
        return
    given = cast(Mapping[str, object], value)
    if named:
        for key, item in given.items():
            yield from _refs(item, (*where, key), base)
        return
    own_id = given.get("$id")
    base = urljoin(base, own_id) if isinstance(own_id, str) else base
    for key, item in given.items():
        if key in ("$ref", "$dynamicRef") and isinstance(item, str):
            yield (*where, key), base, item
        elif key not in schema_bounds.DATA_KEYWORDS:
            yield from _refs(item, (*where, key), base, key in schema_bounds.SCHEMA_MAPS)


def unfenced(text: str) -> str:
    """The answer without the code fence a model may have wrapped it in: ```json … ``` (or a bare ```),
    the whole answer in one fence, as models like to write JSON. (Read without a regex, which on a long
    answer took time growing with its square.)"""
    inner = text.strip()
    if len(inner) < 2 * len(FENCE) or not (inner.startswith(FENCE) and inner.endswith(FENCE)):
        return text
    head, newline, rest = inner[len(FENCE) :].partition("\n")
    head = head.removesuffix("\r").strip(" \t")
    if not newline or head not in ("", "json", "JSON") or not rest.endswith(FENCE):
        return text
    body = rest[: -len(FENCE)].rstrip(" \t")
    return body.removesuffix("\n").removesuffix("\r")


def parse_answer(text: str) -> Any:
    """The JSON value an answer is (fenced or not), or AnswerProblem saying why it is none."""
    body = unfenced(text).strip()
    if not body:
        raise AnswerProblem("the answer is empty (expected one JSON value)")
    try:
        return strict_loads(body)  # NaN, 1e999 or a key named twice: values no other reader agrees on
    except json.JSONDecodeError as exc:
        raise AnswerProblem(
            f"the answer is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
            "(expected one JSON value only, no other text)"
        ) from None
    except NotPlainJson as exc:
        raise AnswerProblem(f"the answer is not plain JSON: {exc} (expected one JSON value only)") from None
    except RecursionError:
        raise AnswerProblem(NESTED) from None


NESTED = f"the answer nests objects and arrays too deeply (expected at most {MAX_DEPTH} levels)"


def check_answer(schema: Mapping[str, Any], value: Any, steps: int = MAX_STEPS) -> None:
    """AnswerProblem listing the first few ways `value` does not fit `schema`, each with its place
    (`$` is the answer, `$.items[0].name` inside it); SchemaUnusable when the schema cannot be applied.

    It takes CPU time growing with the schema and the answer, `steps` keyword evaluations at most (then
    SchemaUnusable): callers run it off the event loop."""
    from referencing.exceptions import Unresolvable

    if _too_deep(value) is not None:  # validating recurses through the answer: keep within Python's stack
        raise AnswerProblem(NESTED)
    validator = schema_bounds.validator(schema)
    try:
        with schema_bounds.bounded(steps):
            errors = sorted(validator.iter_errors(value), key=lambda e: ([str(p) for p in e.absolute_path], e.message))
    except Unresolvable as exc:
        raise SchemaUnusable(f"the output schema cannot be applied: {exc}") from None
    except RegexRefused as exc:  # a schema that `schema_problems` was not asked about
        raise SchemaUnusable(f"the output schema cannot be applied: {exc}") from None
    except RecursionError:  # the answer's depth is bounded above: a reference leads back to itself
        raise SchemaUnusable("the output schema cannot be applied: a $ref leads back to itself without end") from None
    except schema_bounds.TooCostly:
        raise SchemaUnusable(
            f"checking the answer against the output schema took more than {steps:,} steps (its anyOf, "
            "oneOf or $ref branches multiply with the answer's nesting: expected a simpler schema)"
        ) from None
    if errors:
        said = "; ".join(f"at {place(e.absolute_path)}: {e.message}" for e in errors[:MAX_REPORTED])
        more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
        raise AnswerProblem(said + more)


def place(parts: Iterable[str | int]) -> str:
    """A place in the answer: `$`, `$.city`, `$.days[2]`."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text
