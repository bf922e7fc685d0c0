"""An answer checked as it streams (CONTRACT §9.5): `pii` and `deny` matches masked, or the answer blocked,
before any character of a match is sent.

The text not yet sent is held; after each chunk, everything but its last `hold` characters goes out,
masked — and never cut inside a match, so a match that the cut would split is held whole. A PII match is
at most `pii.LONGEST` characters long, the smallest `hold` allowed, so text older than that can no
longer become part of one: what is sent is what the whole answer, checked at once, would have been.
(A `deny` pattern that matches more than `hold` characters may have its start sent before it is
complete: such a pattern wants a larger `hold_back_chars`.) The client, the store and a non-streamed
caller get the same text.

A check that needs the whole answer (`max_chars`, `json_schema`, a classifier, a hook) holds all of it:
nothing is sent until the answer is complete and has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from yao_agent.dsl.specs import GuardCheck
from yao_agent.errors import GuardrailBlocked
from yao_agent.guardrails.checks import Hit, Span, masked, spans_of

STREAMED = ("pii", "deny")  # the kinds checked chunk by chunk; the others need the whole answer


@dataclass(slots=True)
class HoldBack:
    """One streamed text (an answer, or its reasoning) on its way out."""

    checks: Sequence[GuardCheck]  # the stage's pii and deny checks
    hold: int
    whole: bool = False  # a check needs the whole answer: hold it all
    pending: str = ""  # received, not yet sent
    sent: list[str] = field(default_factory=list[str])
    hits: dict[int, int] = field(default_factory=dict[int, int])  # check's index → matches masked

    def feed(self, text: str) -> str:
        """What may be sent now of the text so far; GuardrailBlocked when a `block` check matches."""
        self.pending += text
        if self.whole or len(self.pending) <= self.hold:
            return ""
        spans = self._spans()
        cut = len(self.pending) - self.hold
        for span in spans:
            if span.start < cut < span.end:
                cut = span.start  # never send part of a match
        return self._send(cut, [s for s in spans if s.end <= cut])

    def finish(self) -> str:
        """The rest, checked: the answer is complete."""
        return self._send(len(self.pending), self._spans())

    def drop(self) -> None:
        """Forget what was held: the answer broke off, and what was not sent is not kept either."""
        self.pending = ""

    @property
    def shown(self) -> str:
        return "".join(self.sent)

    def found(self) -> list[Hit]:
        """One hit per check that masked something, with how many matches."""
        return [Hit(self.checks[i].kind, "mask", f"{n} match{'es' if n > 1 else ''}") for i, n in self.hits.items()]

    def _spans(self) -> list[_Owned]:
        """Every match in what is held, of the first check that matched where two overlap; a block raises."""
        found: list[_Owned] = []
        for index, check in enumerate(self.checks):
            spans = spans_of(self.pending, check)
            if spans and check.action == "block":
                self.pending = ""  # none of it is ever sent
                raise GuardrailBlocked(f"the answer was blocked by a {check.kind} check ({check.file}:{check.line})",
                                       stage="output", check=check.kind)  # fmt: skip
            found += [_Owned(s.start, s.end, s.label, index) for s in spans]
        found.sort(key=lambda s: (s.start, -s.end))
        kept: list[_Owned] = []
        for span in found:
            if not kept or span.start >= kept[-1].end:
                kept.append(span)
        return kept

    def _send(self, cut: int, spans: Sequence[_Owned]) -> str:
        out = masked(self.pending[:cut], spans)
        for span in spans:
            self.hits[span.check] = self.hits.get(span.check, 0) + 1
        self.pending = self.pending[cut:]
        if out:
            self.sent.append(out)
        return out


@dataclass(frozen=True, slots=True)
class _Owned(Span):
    check: int  # the index of the check that matched
