"""Secret values kept out of everything that leaves the process: errors, events, stored text, log lines.

Every `$ENV` value the app resolves (an API key, a URL with a token in it, a database password) is
noted here when it is resolved, and `redact` replaces each occurrence — and its tail after a
`sk-`-style prefix, since providers quote keys without it — with `****`. Text shaped like an API key
is masked too, known or not. Values shorter than `MIN_CHARS` are not secrets worth the damage their
masking would do to ordinary text.

Log records are redacted as they are made (a record factory, installed when the first secret is
noted), so a line from any library — an HTTP client logging a URL, say — is covered as well.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

MIN_CHARS = 8
MASK = "****"
KEY_SHAPES = re.compile(r"\b(sk|pk|rk|key|tok)[-_][A-Za-z0-9_\-]{8,}\b")
_SEPARATORS = re.compile(r"[-_.]")

_lock = threading.Lock()
_known: set[str] = set()
_pattern: re.Pattern[str] | None = None
_factory_installed = False


def note(value: str) -> None:
    """Remember a resolved secret (its tails after a prefix, the secret parts of a URL) so `redact` removes it."""
    global _pattern
    variants = {tail for part in _parts(value) for tail in _tails(part) if len(tail) >= MIN_CHARS} - _known
    if not variants:
        return
    with _lock:
        _known.update(variants)
        ordered = sorted(_known, key=len, reverse=True)  # the longest first: a key, then its tail
        _pattern = re.compile("|".join(re.escape(v) for v in ordered))
    _install_factory()


def _parts(value: str) -> Iterable[str]:
    """The value, and, for a URL, each part that may hold a secret on its own: the password, every
    segment of the path and every query value (a provider's error quotes the path, not the URL)."""
    yield value
    if "://" not in value:
        return
    try:
        url = urlsplit(value)
        password = url.password
    except ValueError:
        return
    if password:
        yield password
    yield from (segment for segment in url.path.split("/") if segment)
    yield from (item for _, item in parse_qsl(url.query))


def _tails(value: str) -> Iterable[str]:
    """The value, and what follows each of its first two separators (`sk-proj-XYZ` → `proj-XYZ`, `XYZ`)."""
    yield value
    for match in list(_SEPARATORS.finditer(value))[:2]:
        yield value[match.end() :]


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """`text` without any secret noted so far (or given in `extra`), nor anything shaped like an API key."""
    for secret in extra:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    return KEY_SHAPES.sub(MASK, text)


def _install_factory() -> None:
    global _factory_installed
    with _lock:
        if _factory_installed:
            return
        _factory_installed = True
        previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)  # pyright: ignore[reportArgumentType]
        _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: logging reports it its own way, later
        return
    cleaned = redact(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info and record.exc_info[1] is not None:
        shown = "".join(traceback.format_exception(record.exc_info[1])).rstrip("\n")
        record.exc_text = redact(shown)  # formatters print exc_text when it is set
