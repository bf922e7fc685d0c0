"""OpenID Connect: bearer JWTs from the app's identity provider, verified against its published keys.

The provider is `server.oidc` in app.yml. Its discovery document (`{issuer}/.well-known/openid-configuration`)
names its key set (JWKS) and the endpoints the page's sign-in uses (oidc_web.py). Both are fetched with
an async client under a timeout, so a provider that is down costs a request a few seconds and a 503,
never a hung worker, and the event loop keeps serving meanwhile.

A token is accepted when it is signed with RS256 or ES256 by one of the provider's keys (never `none`,
never an HMAC: a public key must not double as a shared secret), was issued by the issuer, is meant for
the audience, and is inside its `exp`/`nbf` window (a minute of leeway for clocks). Keys are kept; a token
naming a key not seen yet makes the set be fetched again — that is how a rotation is picked up — but at
most once per `REFETCH_S`, so a flood of made-up key ids cannot turn the server against the provider.

Claims become an `Identity` as configured: the user from `user_claim`, the team from `team_claim`, team
admin when the `admin.claim` holds `admin.value`, the operator likewise by `operator` (nobody unless set).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx
import jwt

from yao_agent.dsl.specs import OidcRole, OidcSettings
from yao_agent.errors import PermissionDenied
from yao_agent.identity import Identity
from yao_agent.server.errors import IssuerUnavailable, Unauthorized

log = logging.getLogger("yao_agent.server")
ALGORITHMS = ("RS256", "ES256")
LEEWAY_S = 60.0  # clocks of the provider and of this server may differ this much
REFETCH_S = 30.0  # the key set is fetched again at most this often (an unknown key, a failed fetch)
SEEN_MAX = 4096  # verified bearer tokens kept (a client sends the same one until it expires)
TIMEOUT_S = 5.0  # for each request to the provider


@dataclass(frozen=True, slots=True)
class _Seen:
    """A bearer token verified before: whom it stands for, until when, and by which key."""

    identity: Identity
    until: float  # its `exp` (with the leeway), wall-clock seconds
    kid: str


@dataclass(frozen=True, slots=True)
class Discovery:
    """What the provider's discovery document says that this server uses."""

    issuer: str
    jwks_uri: str
    authorization_endpoint: str
    token_endpoint: str


DISCOVERED = ("issuer", "jwks_uri", "authorization_endpoint", "token_endpoint")  # Discovery's fields, in order


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: a JWT, not one of our `ya_` tokens (which have no dot)."""
    return token.count(".") == 2


class Verifier:
    """Verifies the provider's JWTs with its keys, kept in memory and fetched again as `REFETCH_S` allows."""

    def __init__(
        self, settings: OidcSettings, *, clock: Callable[[], float] = time.monotonic, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.timeout_s = timeout_s
        self.keys: dict[str, jwt.PyJWK] = {}
        self._discovery: Discovery | None = None
        self._fetched_at: float | None = None  # the last attempt to fetch the key set, failed or not
        self._failure: str | None = None  # why the last attempt failed, if it did
        self._attempts = 0  # fetches of the key set begun and ended, to tell a waiting request one happened
        self._lock: asyncio.Lock | None = None
        self._client: httpx.AsyncClient | None = None
        self._seen: dict[str, _Seen] = {}

    # --- tokens -----------------------------------------------------------------------------------

    async def identity(self, token: str) -> Identity:
        """The caller an API bearer JWT stands for; `Unauthorized` saying what is wrong with it.

        A token verified before is known until it expires — a client sends the same one with every
        request — unless its key has left the provider's set meanwhile.
        """
        seen = self._seen.get(token)
        if seen is not None and time.time() < seen.until:
            return seen.identity
        claims, kid = await self._verified(token, self.settings.audience, None)
        identity = self.identity_of(claims)
        if len(self._seen) >= SEEN_MAX:
            self._seen = {t: s for t, s in self._seen.items() if time.time() < s.until}
            if len(self._seen) >= SEEN_MAX:
                del self._seen[next(iter(self._seen))]  # the oldest
        self._seen[token] = _Seen(identity, float(claims["exp"]) + LEEWAY_S, kid)
        return identity

    async def claims(self, token: str, audience: str, nonce: str | None = None) -> dict[str, Any]:
        """The verified claims of `token`; an id_token is checked against `nonce` too."""
        return (await self._verified(token, audience, nonce))[0]

    async def _verified(self, token: str, audience: str, nonce: str | None) -> tuple[dict[str, Any], str]:
        """(the verified claims, the id of the key that signed them)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized("the bearer token is not a well-formed JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthorized(f"the token's algorithm {alg!r} is not accepted (only {' or '.join(ALGORITHMS)})")
        kid, key = await self._key(header.get("kid"))
        if key.algorithm_name != alg:
            raise Unauthorized(f"the token's algorithm {alg} does not fit its key {header.get('kid')!r}")
        claims = self._decode(token, key, audience)
        if nonce is not None and claims.get("nonce") != nonce:
            raise Unauthorized("the id_token's nonce is not the one this sign-in sent")
        return claims, kid

    def _decode(self, token: str, key: jwt.PyJWK, audience: str) -> dict[str, Any]:
        issuer = self.settings.issuer
        try:
            return jwt.decode(
                token, key.key, algorithms=[key.algorithm_name], audience=audience, issuer=issuer,
                leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("the token is not valid yet (its nbf or iat is in the future)") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(f"the token's audience is not {audience}") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized(f"the token's issuer is not {issuer}") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the token's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(f"the token has no {exc.claim} claim") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the token is not valid ({exc})") from None

    def identity_of(self, claims: Mapping[str, Any]) -> Identity:
        """The identity `claims` map to under `server.oidc`."""
        s = self.settings
        user = claims.get(s.user_claim)
        team = claims.get(s.team_claim) if s.team_claim else None
        if isinstance(team, list) and len(cast(list[Any], team)) == 1:
            team = cast(list[Any], team)[0]  # a provider may put even one group in a list
        if not isinstance(user, str):
            raise Unauthorized(f"the token has no {s.user_claim} claim naming the user")
        if team is not None and not isinstance(team, str):
            raise Unauthorized(f"the token's {s.team_claim} claim does not name one team")
        try:
            return Identity(user, team or None, admin=_holds(claims, s.admin), operator=_holds(claims, s.operator),
                            via="oidc")  # fmt: skip
        except PermissionDenied as exc:
            raise Unauthorized(f"the token's claims do not name a usable caller: {exc}") from None

    # --- keys -------------------------------------------------------------------------------------

    async def _key(self, kid: Any) -> tuple[str, jwt.PyJWK]:
        if kid is not None and not isinstance(kid, str):
            raise Unauthorized("the token's key id (kid) is not a string")
        found = self._known(kid)
        fetching = self._lock is not None and self._lock.locked()  # then wait for that fetch, whatever its age
        if found is None and (fetching or self._may_fetch()):
            await self._refresh()
            found = self._known(kid)
        if found is None and not self.keys and self._failure is not None:
            raise IssuerUnavailable(self._failure)
        if found is None:
            named = f"{kid!r}" if kid else "(the token names none)"
            raise Unauthorized(f"the token's signing key {named} is not among the issuer's keys")
        return found

    def _known(self, kid: str | None) -> tuple[str, jwt.PyJWK] | None:
        if kid is not None:
            return (kid, self.keys[kid]) if kid in self.keys else None
        return next(iter(self.keys.items())) if len(self.keys) == 1 else None  # no kid: only if there is one key

    def _may_fetch(self) -> bool:
        return self._fetched_at is None or self.clock() - self._fetched_at >= REFETCH_S

    async def _refresh(self) -> None:
        """Fetch the key set, once for all the requests waiting on it."""
        self._lock = self._lock or asyncio.Lock()
        seen = self._attempts
        async with self._lock:
            if self._attempts != seen:
                if not self.keys and self._failure is not None:
                    raise IssuerUnavailable(self._failure)
                return  # another request fetched it while this one waited: that answer is this one's too
            self._fetched_at = self.clock()
            try:
                discovery = await self.discovery()
                self.keys = _usable_keys(await self._get_json(discovery.jwks_uri))
                self._failure = None
                self._seen = {t: s for t, s in self._seen.items() if s.kid in self.keys}  # a retired key's go
            except IssuerUnavailable as exc:
                self._failure = str(exc)
                log.warning("OIDC key set not fetched: %s", exc)
                if not self.keys:
                    raise
            finally:
                self._attempts += 1

    async def discovery(self) -> Discovery:
        """The provider's discovery document (fetched once, then kept)."""
        if self._discovery is None:
            issuer = self.settings.issuer
            doc = await self._get_json(issuer + "/.well-known/openid-configuration")
            try:
                found = Discovery(*(str(doc[k]) for k in DISCOVERED))
            except KeyError as exc:
                raise IssuerUnavailable(f"the identity provider's discovery document has no {exc.args[0]}") from None
            if found.issuer.rstrip("/") != issuer:
                raise IssuerUnavailable(f"the discovery document names the issuer {found.issuer}, not {issuer}")
            self._discovery = found
        return self._discovery

    def client(self) -> httpx.AsyncClient:
        """The HTTP client for the provider (made on first use, in the serving event loop)."""
        self._client = self._client or httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False)
        return self._client

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            response = await self.client().get(url, headers={"Accept": "application/json"})
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise IssuerUnavailable(f"the identity provider did not answer at {url} ({type(exc).__name__})") from None
        if not isinstance(body, dict):
            raise IssuerUnavailable(f"the identity provider's answer at {url} is not a JSON object")
        return cast(dict[str, Any], body)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _holds(claims: Mapping[str, Any], role: OidcRole | None) -> bool:
    """Whether the claims give the role: its claim is its value, or a list holding it."""
    if role is None:
        return False
    held = claims.get(role.claim)
    return held == role.value or (isinstance(held, list) and role.value in cast(list[Any], held))


def _usable_keys(jwks: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    """The signing keys of a JWKS this server accepts (RS256, ES256), by kid; others are left out."""
    keys: dict[str, jwt.PyJWK] = {}
    for n, data in enumerate(cast(list[Any], jwks.get("keys", [])) if isinstance(jwks.get("keys"), list) else []):
        if not isinstance(data, dict) or cast(dict[str, Any], data).get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(cast(dict[str, Any], data))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue  # a key type or curve we do not take; the others still count
        if key.algorithm_name in ALGORITHMS:
            keys[str(key.key_id) if key.key_id is not None else f"#{n}"] = key
    return keys
