"""`$ENV.NAME` values: kept as written at load, resolved when used, never shown resolved.

`$ENV` belongs to the operator's YAML files only: nothing a hook, a request or a tenant supplies is
ever resolved, and every resolved value is handed to `redact`, which keeps it out of what leaves the
process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from yao_agent.base import redact
from yao_agent.errors import EnvVarMissing

ENV_PATTERN = re.compile(r"\$ENV\.([A-Za-z_][A-Za-z0-9_]*)")


def env_names(text: str) -> list[str]:
    """The variable names a string refers to, in order."""
    return ENV_PATTERN.findall(text)


def resolve_env(text: str, origin: str, environ: Mapping[str, str] | None = None, *, secret: bool = True) -> str:
    """Replace every `$ENV.NAME` in `text`; a missing NAME raises `EnvVarMissing` naming it and `origin`.

    An empty variable counts as missing: an empty API key or URL is never what the author meant. A
    `secret` value (all but a connector reference, which names a connector of the app) is redacted from
    then on.
    """
    if "$ENV." not in text:
        return text
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        value = env.get(match.group(1), "")
        if not value:
            raise EnvVarMissing(match.group(1), origin)
        if secret:
            redact.note(value)  # from now on, it is masked wherever it would leave the process
        return value

    return ENV_PATTERN.sub(substitute, text)


class EnvValue:
    """A string from YAML that may hold `$ENV.NAME` references.

    `repr` and `str` show the text as written (with the references, never their values); a
    literal written without `$ENV` in a secret field is masked, since it *is* the secret.
    """

    __slots__ = ("origin", "raw", "secret")

    def __init__(self, raw: str, origin: str, *, secret: bool = False) -> None:
        self.raw = raw
        self.origin = origin
        self.secret = secret

    def resolve(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_env(self.raw, self.origin, environ)

    def __repr__(self) -> str:
        return f"EnvValue({self!s})"

    def __str__(self) -> str:
        if self.secret and not ENV_PATTERN.fullmatch(self.raw):
            return "****"
        return self.raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnvValue) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)
