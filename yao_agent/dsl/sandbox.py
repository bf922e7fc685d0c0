"""Jinja2's sandbox, as templates.py runs templates in it: checked at load, compiled once, run
bounded. Imported with the first text that is a template (templates.py says which are).

A template renders on the event loop, before every model call, so it gets a time budget
(`RENDER_BUDGET_S` of CPU time) and a size budget (`MAX_RENDERED` characters): `range` checks it as it
counts, the rendered text is checked as it is produced, and the operators and filters that can make
a huge value from a small one (`*`, `**`, `center`, `replace`, ...) refuse to. Whatever goes wrong
while rendering — a Jinja error, a division by zero, a budget — is a `RenderError` naming the file and
line of the template (and the line inside it), never an internal error.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sized
from functools import lru_cache
from types import TracebackType
from typing import Any, cast

from jinja2 import ChainableUndefined, TemplateRuntimeError, TemplateSyntaxError, nodes
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from yao_agent.errors import RenderError

RENDER_BUDGET_S = 0.1  # a prompt renders in microseconds; this is a loop gone wrong
# The budget is of the rendering thread's CPU time, not of the clock: a loop gone wrong spends CPU, and a
# busy server, which makes a thread wait for its turn, must not fail a prompt that took microseconds.
_cpu_time = time.thread_time
MAX_RENDERED = 1_000_000  # characters of one rendered template (or of one value made inside it)
MAX_RANGE = 100_000  # items of one range (Jinja's sandbox limit)
MAX_POWER_BITS = 10_000
TEMPLATE_NAME = "<template>"  # how Jinja names a template made from a string, in its tracebacks

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("yao_agent_render_deadline", default=0.0)


def _check_clock() -> None:
    deadline = _deadline.get()
    if deadline and _cpu_time() > deadline:
        raise TemplateRuntimeError(f"the template took longer than {RENDER_BUDGET_S:g} s to render")


class _Range:
    """Jinja's `range`, bounded in size, and watching the clock as a loop counts through it."""

    def __init__(self, *args: int) -> None:
        self.numbers = range(*args)
        if len(self.numbers) > MAX_RANGE:
            raise TemplateRuntimeError(f"range of {len(self.numbers):,} items (at most {MAX_RANGE:,})")

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self) -> Iterator[int]:
        for index, number in enumerate(self.numbers):
            if index % 1000 == 0:
                _check_clock()
            yield number


def _length(value: object) -> int | None:
    """The length of a text or a list, the values whose size a template can multiply."""
    return len(cast(Sized, value)) if isinstance(value, str | list | tuple) else None


def _sized(value: Any) -> Any:
    size = _length(value)
    if size is not None and size > MAX_RENDERED:
        raise TemplateRuntimeError(f"a value of {size:,} items (at most {MAX_RENDERED:,})")
    return value


def _bounded_filter(name: str, apply: Callable[..., Any]) -> Callable[..., Any]:
    """A filter whose numbers (widths, counts) and result stay within the budgets."""

    @functools.wraps(apply)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RANGE:
                raise TemplateRuntimeError(f"filter {name}: {value:,} is too large (at most {MAX_RANGE:,})")
        _check_clock()
        return _sized(apply(*args, **kwargs))

    return bounded


class _Bounded(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and _power_too_large(left, right):
            raise TemplateRuntimeError(f"{left} ** {right} is too large a number")
        if operator == "*":
            counts = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
            sizes = [n for n in (_length(left), _length(right)) if n is not None]
            if counts and sizes and sizes[0] * counts[0] > MAX_RENDERED:
                raise TemplateRuntimeError(f"a value of {sizes[0] * counts[0]:,} items (at most {MAX_RENDERED:,})")
        return super().call_binop(context, operator, left, right)


def _power_too_large(base: object, exponent: object) -> bool:
    if not isinstance(base, int) or not isinstance(exponent, int) or exponent <= 0:
        return False
    return abs(base).bit_length() * exponent > MAX_POWER_BITS


# Unknown top-level names are rejected at load (check_template); a missing key inside request data
# such as `metadata.city` renders empty, since request metadata is optional by nature.
_env = _Bounded(undefined=ChainableUndefined, autoescape=False, keep_trailing_newline=True)
_env.globals["range"] = cast(Any, _Range)  # bounded, and watching the clock as it counts
del _env.globals["lipsum"]  # paragraphs of filler text, any number of them: no use in a prompt
for _name in ("center", "indent", "wordwrap", "truncate", "batch", "slice", "replace", "join", "format", "string"):
    _env.filters[_name] = _bounded_filter(_name, _env.filters[_name])
# Names Jinja provides itself: its globals (range, dict, namespace, ...) and loop/macro variables.
_BUILTIN_NAMES = frozenset(_env.globals) | {"loop", "self", "caller", "varargs", "kwargs", "super"}


def check_template(source: str, allowed: frozenset[str]) -> tuple[int, str] | None:
    """(line within the template, message) for a syntax error or an unknown variable; None if fine.

    Parsing is enough to find both, and much cheaper than compiling; compilation waits for the
    first render.
    """
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


def render(source: str, variables: Mapping[str, Any], origin: str = "") -> str:
    """Render a template that passed `check_template`, within the budgets (templates.py passes plain
    text by). `origin` ("file:line") says where the template is written, for the error."""
    try:
        template = _compiled(source)  # once per template: compiling (slow under a tracer) is not rendering
    except Exception as exc:
        raise RenderError(_failure(exc, origin)) from None
    token = _deadline.set(_cpu_time() + RENDER_BUDGET_S)
    try:
        return _produce(template, variables)
    except Exception as exc:  # a template can fail in any way its expressions can
        raise RenderError(_failure(exc, origin)) from None
    finally:
        _deadline.reset(token)


def _produce(template: Any, variables: Mapping[str, Any]) -> str:
    parts: list[str] = []
    size = 0
    for part in template.generate(variables):
        size += len(part)
        if size > MAX_RENDERED:
            raise TemplateRuntimeError(f"the template rendered more than {MAX_RENDERED:,} characters")
        _check_clock()
        parts.append(part)
    return "".join(parts)


def _failure(exc: Exception, origin: str) -> str:
    where = f"{origin} " if origin else ""
    line = _template_line(exc.__traceback__)
    inside = f" (line {line} of the template)" if line else ""
    what = str(exc) if isinstance(exc, TemplateRuntimeError) else f"{type(exc).__name__}: {exc}"
    return f"{where}template failed to render{inside}: {what}"


def _template_line(tb: TracebackType | None) -> int | None:
    """The template line the error happened on: Jinja rewrites tracebacks so template frames carry it."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == TEMPLATE_NAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
