"""Personal data in text: where it is, so it can be masked before a model, the store or a client sees it.

Each kind is found by a bounded regular expression and then confirmed the way the thing itself is checked
(Luhn for card numbers, ISO 13616 mod-97 for IBANs, the issuing rules for SSNs and NI numbers). Precision
beats recall here: a missed number leaks one value, but a false hit rewrites a reply the user asked for —
a version, a date, an address or an order id turned into `[phone]` corrupts it silently, on every run. So a
candidate that is ambiguous (digits running on into more digits, a shape a date or an IP address also has)
is left alone.

This runs on the hold-back buffer of every streamed chunk, so it must be cheap: every quantifier is bounded
(no catastrophic backtracking whatever the text), a detector is skipped when the text cannot hold what it
looks for (too few digits, no `@`), and most patterns start at a rare character (`+`, `-`, `(`, `@`) so the
engine leaps between them instead of trying every position: what comes before that character is checked
by a look-behind, and the match's start moved back by that much."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

KINDS: tuple[str, ...] = ("email", "phone", "credit_card", "iban", "us_ssn", "uk_nino")

# Every match is at most this long (longer candidates are dropped), so a streaming filter that holds back
# this many characters finds the same things in pieces as in the whole. Only an address comes near it: the
# others are at most 44 characters (a `+` number in many groups; a grouped IBAN, 43). 64 covers all but the
# rarest addresses, and keeps the delay a stream suffers short.
LONGEST = 64


@dataclass(frozen=True, slots=True)
class Found:
    start: int
    end: int
    kind: str


Spans = Iterator[tuple[int, int]]

# All patterns are ASCII: a letter of any script next to a number is no `\w` (text in Chinese or Japanese
# runs words straight into numbers, and must not hide them), and only 0-9 are digits.
_A = re.ASCII
_END = r"(?!\w)(?![.,/-]\d)"  # not running on into a word or a longer number (`.5`, `-12`); `4111….` ends a sentence
_EMAIL = re.compile(
    r"(?<![\w.%+-])[\w.%+-]{1,64}+@(?:[A-Za-z0-9-]{1,63}+\.){1,4}[A-Za-z]{2,24}+"
    # not the start of a longer name, nor `me@code.example.com:team/app` (a repository's address, not a mailbox)
    r"(?![\w-])(?!\.[A-Za-z0-9])(?!:[\w/~])",
    _A,
)
_LOCAL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.%+-"  # what the local part is made of
# Endings of file names that are no top-level domain: `logo@2x.png`, `icon@3x.webp` are images, not addresses.
_FILE_TYPE_NAMES = (
    "png jpg jpeg gif svg webp bmp tif tiff heic avif pdf txt csv tsv json yaml yml xml html htm css js ts"
)
_FILE_TYPES = frozenset(_FILE_TYPE_NAMES.split())
# International: `+`, then digit groups split by one space, dot or dash, maybe one group in parentheses.
# Each group's digits are possessive, so only the number of groups can backtrack: at most 8 ways per `+`.
_PHONE_INTL = re.compile(
    r"\+(?<![\w+]\+)\d{1,15}+(?:[ .-]?\(\d{1,4}+\)[ .-]?\d{1,5}+|[ .-]\d{1,5}+){0,7}(?!\w)(?![.,:/-]\d)", _A
)
# What a `+` number must not hold: a date or an IPv4 address (`GMT +1 2026-12-03`).
_NOT_PHONE = re.compile(r"(?<!\d)(?:\d{4}-\d\d?-\d\d?|\d\d?[./-]\d\d?[./-]\d{4}|\d{1,3}(?:\.\d{1,3}){3})(?!\d)", _A)
# North American, in its usual shapes only: (555) 123-4567, 555-123-4567, 1-800-555-1234, 555.123.4567;
# an area code never starts with 0 or 1. Each with how many characters come before its first character.
_NOT_BEFORE_NA = r"(?<![\w.+/(-])"
_PHONES_NA: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(rf"\((?<={_NOT_BEFORE_NA}\()[2-9]\d\d\) ?\d{{3}}-\d{{4}}{_END}", _A), 0),
    (re.compile(rf"-(?<={_NOT_BEFORE_NA}[2-9]\d\d-)\d{{3}}-\d{{4}}{_END}", _A), 3),
    (re.compile(rf"-(?<={_NOT_BEFORE_NA}1-[2-9]\d\d-)\d{{3}}-\d{{4}}{_END}", _A), 5),
    (re.compile(rf"\.(?<={_NOT_BEFORE_NA}[2-9]\d\d\.)\d{{3}}\.\d{{4}}{_END}", _A), 3),
)
# A card: one run of digits, or 4-4-4-4(-3) / 4-6-4(5) groups split by one space or dash, the same each
# time. Not part of a longer number: no digit and separator just before, no further group just after.
_CARD = re.compile(
    r"\d(?<=\b\d)\d{3}(?<!\d[ .,/-]\d{4})"
    r"(?:\d{9,15}+"
    r"|(?P<s>[ -])\d{4}(?P=s)\d{4}(?P=s)\d{4}(?:(?P=s)\d{3})?(?!(?P=s)\d{4})"
    rf"|(?P<a>[ -])\d{{6}}(?P=a)\d{{4,5}}(?!(?P=a)\d{{4}})){_END}",
    _A,
)
# An IBAN: country, check digits, then 11 to 30 capitals and digits, run together or in groups of four.
_IBAN = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]\d\d(?:[A-Z\d]{11,30}+|(?: [A-Z\d]{4}){2,7}+(?: [A-Z\d]{1,3}+)?)(?!\w)", _A)
# AAA-GG-SSSS, found from its first dash. Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
_SSN = re.compile(rf"-(?<=(?<![\w.+/-])[0-8]\d\d-)(?<!000-)(?<!666-)(?!00)\d\d-(?!0000)\d{{4}}{_END}", _A)
# The prefix letters leave out those never issued (D F I Q U V first; D F I O Q U V second); six digits,
# run together or in spaced pairs; the suffix A-D.
_NINO = re.compile(r"[A-CEGHJ-PR-TW-Z](?<!\w[A-Z])[A-CEGHJ-NPR-TW-Z](?:\d{6}|(?: \d\d){3} )[A-D](?!\w)", _A)
_NINO_NEVER = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})  # prefixes never issued

# Issuer prefixes (as ranges over the same number of leading digits) and the lengths each issues.
_ISSUERS: tuple[tuple[str, str, range], ...] = (
    ("4", "4", range(13, 20, 3)),  # 13, 16, 19
    ("51", "55", range(16, 17)),
    ("2221", "2720", range(16, 17)),
    ("34", "34", range(15, 16)),
    ("37", "37", range(15, 16)),
    ("6011", "6011", range(16, 20)),
    ("65", "65", range(16, 20)),
    ("644", "649", range(16, 20)),
    ("35", "35", range(16, 20)),
    ("30", "30", range(14, 20)),
    ("36", "36", range(14, 20)),
    ("38", "38", range(14, 20)),
)
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # a Luhn digit doubled, its two digits summed
# Countries that issue IBANs (the ISO 13616 registry and the countries using the format nationally).
_IBAN_COUNTRY_CODES = (
    "AD AE AL AO AT AZ BA BE BF BG BH BI BJ BR BY CF CG CH CI CM CR CV CY CZ DE DJ DK DO DZ EE EG ES FI FK FO FR "
    "GA GB GE GI GL GQ GR GT GW HN HR HU IE IL IQ IR IS IT JO KM KW KZ LB LC LI LT LU LV LY MA MC MD ME MG MK ML "
    "MN MR MT MU MZ NE NI NL NO OM PK PL PS PT QA RO RS RU SA SC SD SE SI SK SM SN SO ST SV TD TG TL TN TR UA VA "
    "VG XK YE"
)
_IBAN_COUNTRIES = frozenset(_IBAN_COUNTRY_CODES.split())
_DIGITS = b"0123456789"
_LETTER_VALUES = {ord(c): str(value) for value, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10)}  # for mod-97


def _luhn(digits: str) -> bool:
    odd = sum(map(int, digits[-1::-2]))
    even = sum(_DOUBLED[int(d)] for d in digits[-2::-2])
    return (odd + even) % 10 == 0


def _card_ok(digits: str) -> bool:
    issued = any(lo <= digits[: len(lo)] <= hi and len(digits) in lengths for lo, hi, lengths in _ISSUERS)
    return issued and _luhn(digits)


def _cards(text: str) -> Spans:
    for m in _CARD.finditer(text):
        shown = m.group()
        digits = shown.replace(" ", "").replace("-", "")
        if _card_ok(digits):
            yield m.span()
        elif len(shown) == 23 and _card_ok(digits[:16]):
            # 4-4-4-4 and then three more digits (a security code, say): the card is the first 16
            yield m.start(), m.start() + 19


def _iban_ok(compact: str) -> bool:
    if compact[:2] not in _IBAN_COUNTRIES:
        return False
    # The country and check digits go to the end, each letter becomes its value 10..35: the number mod 97 is 1.
    return int((compact[4:] + compact[:4]).translate(_LETTER_VALUES)) % 97 == 1


def _ibans(text: str) -> Spans:
    for m in _IBAN.finditer(text):
        shown = m.group()
        if _iban_ok(shown.replace(" ", "")):
            yield m.span()
            continue
        # A grouped IBAN followed by a word in capitals (`… 1332 BIC`, `… 00 EUR`) took the word in as a
        # group; an IBAN's last group is never all letters, so it is tried once without it.
        head, _, last = shown.rpartition(" ")
        compact = head.replace(" ", "")
        if last.isalpha() and len(compact) >= 15 and _iban_ok(compact):
            yield m.start(), m.start() + len(head)


def _phones(text: str) -> Spans:
    if "+" in text:
        for m in _PHONE_INTL.finditer(text):
            shown = m.group()
            digits = sum(c.isdigit() for c in shown)
            # Run together, a `+` number is just a signed number unless it is as long as a full one.
            fewest = 10 if shown[1:].isdigit() else 8
            if fewest <= digits <= 15 and not _NOT_PHONE.search(shown):
                yield m.span()
    for pattern, before in _PHONES_NA:
        for m in pattern.finditer(text):
            yield m.start() - before, m.end()


def _ssns(text: str) -> Spans:
    for m in _SSN.finditer(text):
        yield m.start() - 3, m.end()


def _emails(text: str) -> Spans:
    # From each `@`, back over what a local part is made of (at most 64 characters: a longer run is no
    # address, and the pattern's look-behind refuses it), then the whole address forward from there.
    at = text.find("@")
    while at >= 0:
        head = text[max(0, at - 64) : at]
        m = _EMAIL.match(text, at - (len(head) - len(head.rstrip(_LOCAL))))
        if m and m.group().rpartition(".")[2].lower() not in _FILE_TYPES:
            yield m.span()
        at = text.find("@", m.end() if m else at + 1)


def _ninos(text: str) -> Spans:
    for m in _NINO.finditer(text):
        if m.group()[:2] not in _NINO_NEVER:
            yield m.span()


class _Detector(NamedTuple):
    spans: Callable[[str], Spans]
    digits: int  # the fewest digits a match holds: with fewer in the whole text, it is not run
    needs: str  # a character every match holds ("" for none)


_DETECTORS: dict[str, _Detector] = {
    "email": _Detector(_emails, 0, "@"),
    "phone": _Detector(_phones, 8, ""),
    "credit_card": _Detector(_cards, 13, ""),
    "iban": _Detector(_ibans, 8, ""),  # every issued IBAN holds far more digits than this
    "us_ssn": _Detector(_ssns, 9, "-"),
    "uk_nino": _Detector(_ninos, 6, ""),
}


def find(text: str, kinds: Collection[str]) -> list[Found]:
    """Non-overlapping matches of the given kinds, sorted by start (when two overlap, the earlier/longer wins)."""
    unknown = set(kinds).difference(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds of personal data: {', '.join(sorted(unknown))} (known: {', '.join(KINDS)})")
    digits = -1  # counted once, and only when a detector that needs digits is asked for
    found: list[Found] = []
    for kind in KINDS:
        detector = _DETECTORS[kind]
        if kind not in kinds or (detector.needs and detector.needs not in text):
            continue
        if detector.digits:
            if digits < 0:
                # ASCII digits are single bytes in UTF-8, never part of another character's bytes
                encoded = text.encode("utf-8", "surrogatepass")
                digits = len(encoded) - len(encoded.translate(None, _DIGITS))
            if digits < detector.digits:
                continue
        found += (Found(s, e, kind) for s, e in detector.spans(text) if e - s <= LONGEST)
    return _apart(found)


def _apart(found: list[Found]) -> list[Found]:
    """`found` by start, without overlaps: of two that overlap the earlier wins, or at the same start the longer
    (`4111111111111111@example.com` is an address, not a card followed by text)."""
    found.sort(key=lambda f: (f.start, -f.end))  # stable: at the same span, the kind first in KINDS
    kept: list[Found] = []
    end = 0
    for f in found:
        if f.start >= end:
            kept.append(f)
            end = f.end
    return kept


def mask(text: str, found: Sequence[Found]) -> str:
    """`text` with each found span replaced by `[kind]` (e.g. `[credit_card]`)."""
    parts: list[str] = []
    at = 0
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if f.start < at:
            # Overlapping spans (not from `find`): the earlier's label covers both, so nothing of either shows.
            at = max(at, f.end)
            continue
        parts += (text[at : f.start], f"[{f.kind}]")
        at = f.end
    parts.append(text[at:])
    return "".join(parts)
