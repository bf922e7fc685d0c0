"""The checks that read a text and nothing else — `pii`, `deny`, `max_chars`, `json_schema` — compiled once
per check, run on each text a stage gives them. (A classifier or a hook asks something outside: those
are the pipeline's, pipeline/guard.py.)

`scan` answers with the text as it may pass (masked where a `mask` check matched) and the hits, or the
hit that blocks it. Every pattern runs in linear time: the PII detectors are bounded, a `deny` pattern
runs on RE2.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from yao_agent.base import safe_regex, structured
from yao_agent.dsl.specs import GuardAction, GuardCheck
from yao_agent.guardrails import pii

DENIED = "[denied]"  # what a `deny` check masks a match with


@dataclass(frozen=True, slots=True)
class Hit:
    """A check that matched: which, what it did, and why in words (never the matched text itself)."""

    check: str  # its kind: pii, deny, max_chars, json_schema, classifier, hook
    action: GuardAction
    reason: str


@dataclass(slots=True)
class Scan:
    text: str
    hits: list[Hit] = field(default_factory=list[Hit])
    blocked: Hit | None = None


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    label: str  # what replaces it: [email], [denied]


def scan(text: str, checks: Sequence[GuardCheck]) -> Scan:
    """Run the text-only checks of `checks` in order: masks applied as they match, the first block ends it."""
    out = Scan(text)
    for check in checks:
        if check.kind in ("pii", "deny"):
            spans = spans_of(out.text, check)
            if not spans:
                continue
            hit = Hit(check.kind, check.action, _named(check, spans))
            if check.action == "block":
                out.blocked = hit
                return out
            out.text = masked(out.text, spans)
            out.hits.append(hit)
        elif check.kind == "max_chars" and len(out.text) > check.max_chars:
            out.blocked = Hit("max_chars", "block", f"{len(out.text):,} characters, more than {check.max_chars:,}")
            return out
        elif check.kind == "json_schema" and (why := _unfit(out.text, check)) is not None:
            out.blocked = Hit("json_schema", "block", why)
            return out
    return out


def spans_of(text: str, check: GuardCheck) -> list[Span]:
    """Where a `pii` or `deny` check matches, in order, none overlapping."""
    if check.kind == "pii":
        return [Span(f.start, f.end, f"[{f.kind}]") for f in pii.find(text, check.pii)]
    found = sorted(s for pattern in check.deny for s in _regex(pattern).spans(text))
    spans: list[Span] = []
    for start, end in found:
        if end > start and (not spans or start >= spans[-1].end):
            spans.append(Span(start, end, DENIED))
    return spans


def masked(text: str, spans: Sequence[Span]) -> str:
    parts: list[str] = []
    at = 0
    for span in spans:
        parts += [text[at : span.start], span.label]
        at = span.end
    return "".join(parts) + text[at:]


def _named(check: GuardCheck, spans: Sequence[Span]) -> str:
    if check.kind == "pii":
        kinds = sorted({s.label.strip("[]") for s in spans})
        return f"{len(spans)} × {', '.join(kinds)}"
    return f"{len(spans)} match{'es' if len(spans) > 1 else ''} of a deny pattern"


def _unfit(text: str, check: GuardCheck) -> str | None:
    """Why the text is not a JSON value that fits the check's schema, or None when it is."""
    try:
        structured.check_answer(check.schema or {}, structured.parse_answer(text))
    except (structured.AnswerProblem, structured.SchemaUnusable) as exc:
        return str(exc)
    return None


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> safe_regex.Regex:
    return safe_regex.compile(pattern)  # valid: validate checked it
