"""Every engine's failures, sorted into the same few kinds.

| kind              | when                                         | retry / fall back |
|-------------------|----------------------------------------------|-------------------|
| auth              | 401, 403                                     | no                |
| bad_request       | 400, 404, 422, other 4xx                     | no                |
| context_overflow  | 400 saying the context is too long           | no                |
| rate_limit        | 429                                          | yes               |
| server            | 5xx                                          | yes               |
| timeout           | no first byte, or a silent gap, > timeout_s  | yes               |
| connection        | refused, reset, DNS                          | yes               |
| config            | a `$ENV` value is missing, unknown provider  | falls back only   |
| incomplete        | the stream broke after the first token       | no (never spliced)|

"Yes" holds only before the first token: once text reached the client, retrying would show it twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from yao_agent.base.redact import redact
from yao_agent.errors import ModelError
from yao_agent.vocabulary import ModelErrorKind

RETRYABLE: frozenset[ModelErrorKind] = frozenset({"rate_limit", "server", "timeout", "connection"})
# Kinds after which the next connector of a chain is tried: the retryable ones, and a connector
# that cannot even be called (its key is not set), since the chain exists for exactly that.
FALLBACK: frozenset[ModelErrorKind] = RETRYABLE | frozenset[ModelErrorKind]({"config"})

_CONTEXT = re.compile(r"context[_ ]length|maximum context|too many tokens|prompt is too long|context window", re.I)


def kind_for_status(status: int | None, message: str = "", code: str | None = None) -> ModelErrorKind:
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status is not None and status >= 500:
        return "server"
    if status == 408:
        return "timeout"
    if code == "context_length_exceeded" or _CONTEXT.search(message):
        return "context_overflow"
    return "bad_request"


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secret values (these, every resolved `$ENV` value, anything shaped like an API key)."""
    return redact(text, secrets)


_WHAT = {
    "auth": "authentication failed",
    "bad_request": "request rejected",
    "context_overflow": "context too long",
    "rate_limit": "rate limited",
    "server": "provider error",
    "timeout": "timed out",
    "connection": "connection failed",
    "incomplete": "stream broke off",
    "config": "not configured",
}


def model_error(
    kind: ModelErrorKind,
    connector: str,
    detail: str,
    *,
    status: int | None = None,
    secrets: Iterable[str] = (),
    partial: str = "",
) -> ModelError:
    """A ModelError with a message that says which connector, what happened and the provider's words."""
    where = f" (HTTP {status})" if status else ""
    detail = scrub(detail, secrets).strip()
    message = f"model call to {connector} failed: {_WHAT.get(kind, kind)}{where}" + (f": {detail}" if detail else "")
    return ModelError(
        message, kind=kind, retryable=kind in RETRYABLE, status=status, connector=connector, partial=partial
    )
