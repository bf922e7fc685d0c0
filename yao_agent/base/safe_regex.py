"""Regular expressions written by people the server does not trust: a caller's JSON Schema `pattern`,
an author's rule that callers' text is matched against.

Python's `re` backtracks: `(a+)+$` over 30 characters takes minutes, and on the event loop it stops every
request of every tenant. These run on RE2 (`google-re2`), which matches in time linear in the text, whatever
the pattern. RE2 has no backreferences (`\\1`) and no lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`): a pattern
that uses them is refused with the reason, never run another way.

The syntax is RE2's, close to the ECMA-262 regexes JSON Schema names: `\\d`, `\\w` and `\\b` are ASCII, and
`$` is the end of the text (Python's `$` also matches before a final newline).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from yao_agent.errors import RegexRefused

__all__ = ["SYNTAX", "Regex", "RegexRefused", "compile", "problem", "search"]

SYNTAX = "RE2 syntax: no backreferences or lookaround"
# Hints for RE2's own words, which name the construct but not why it is missing.
_HINTS = (
    ("invalid perl operator: (?=", "lookahead is not supported"),
    ("invalid perl operator: (?!", "lookahead is not supported"),
    ("invalid perl operator: (?<", "lookbehind is not supported"),
)


@dataclass(frozen=True, slots=True)
class Regex:
    """A compiled pattern; `search` says whether it matches somewhere in a text."""

    pattern: str
    _compiled: Any

    def search(self, text: str) -> bool:
        try:
            return self._compiled.search(text) is not None
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): RE2 reads UTF-8, which has none
            return self._compiled.search(_well_formed(text)) is not None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where it matches, (start, end) in characters, left to right, none overlapping."""
        try:
            found = self._compiled.finditer(text)
        except UnicodeEncodeError:
            found = self._compiled.finditer(_well_formed(text))  # (one character for one: the same places)
        return [cast(tuple[int, int], m.span()) for m in found]


def compile(pattern: str) -> Regex:
    """The pattern compiled for linear-time matching, or RegexRefused saying why it cannot be."""
    return _compiled(pattern)


def problem(pattern: str) -> str | None:
    """Why `pattern` is refused (a sentence), or None when it can be used."""
    try:
        _compiled(pattern)
    except RegexRefused as exc:
        return str(exc)
    return None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text`; RegexRefused when the pattern cannot be used."""
    return _compiled(pattern).search(text)


@dataclass(frozen=True, slots=True)
class _Binding:
    """The two names of the `re2` binding used here, typed (it has no annotations), and its options."""

    compile: Callable[[str, Any], Any]
    error: type[Exception]
    options: Any


@functools.cache
def _binding() -> _Binding:
    """Imported on first use: most commands (and `validate` of an app without structured output) need none."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused pattern (a caller's text) on stderr
    compiling = cast(Callable[[str, Any], Any], re2.compile)  # pyright: ignore[reportUnknownMemberType]
    return _Binding(compiling, cast(type[Exception], re2.error), options)  # pyright: ignore[reportUnknownMemberType]


@functools.lru_cache(maxsize=512)  # a schema's patterns are matched against every value of every answer
def _compiled(pattern: str) -> Regex:
    binding = _binding()
    try:
        return Regex(pattern, binding.compile(pattern, binding.options))
    except UnicodeEncodeError:
        raise RegexRefused(f"the pattern {_shown(pattern)} is not valid Unicode (a lone surrogate)") from None
    except binding.error as exc:
        said = _said(exc)
        hint = next((why for start, why in _HINTS if said.startswith(start)), "")
        if said.startswith("invalid escape sequence: \\") and said[-1:].isdigit():
            hint = "backreferences are not supported"
        because = f"{said}: {hint}" if hint else said
        raise RegexRefused(f"the pattern {_shown(pattern)} cannot be used: {because} ({SYNTAX})") from None


def _said(exc: Exception) -> str:
    """RE2's message, which the binding gives as bytes."""
    first = exc.args[0] if exc.args else exc
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def _shown(pattern: str) -> str:
    """The pattern in a message: quoted, and cut when long (a message is one readable line)."""
    return repr(pattern if len(pattern) <= 80 else pattern[:77] + "...")


def _well_formed(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, as a UTF-8 reader would see it."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
