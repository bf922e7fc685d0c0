"""A loopback OpenID Connect identity provider for tests: real keys, real HTTP, nothing else.

    async with FakeIdP() as idp:
        token = idp.mint(email="bob@example.com", org="acme")   # an access token for the API
        ...                                                        # server.oidc.issuer: idp.issuer

Its keys are generated per run (RSA 2048 for RS256, P-256 for ES256). It serves the discovery document,
the key set (`/jwks`, counting fetches), an authorization endpoint that signs in `signs_in` at once and
redirects back with a code, and a token endpoint that checks the PKCE verifier (S256) and issues an
id_token (for the client, with the nonce) and an access token (for the API's audience). `rotate` starts
signing with a new key and publishes only that one. Tokens no provider should issue — `alg: none`, HS256
keyed with the public key, an unknown key — are made by `forged`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class SigningKey:
    kid: str
    alg: str  # RS256 or ES256
    private: PrivateKeyTypes

    @classmethod
    def new(cls, kid: str, alg: str = "RS256") -> SigningKey:
        if alg == "ES256":
            return cls(kid, alg, ec.generate_private_key(ec.SECP256R1()))
        return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        public = json.loads(algorithm.to_jwk(self.private.public_key()))  # pyright: ignore[reportArgumentType]
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass
class _Grant:
    challenge: str
    redirect_uri: str
    nonce: str
    claims: dict[str, Any]


@dataclass
class FakeIdP:
    """The provider. `client_id` is the web page's client; `audience` the API's."""

    client_id: str = "yao-web"
    audience: str = "yao-api"
    host: str = "127.0.0.1"
    # who signs in at the authorization endpoint (the browser-less flow has nobody to type a password)
    signs_in: dict[str, Any] = field(default_factory=lambda: {"email": "bob@example.com", "org": "acme"})
    keys: list[SigningKey] = field(default_factory=lambda: [SigningKey.new("k1")])
    jwks_fetches: int = 0
    token_requests: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    _grants: dict[str, _Grant] = field(default_factory=dict[str, _Grant])
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    _port: int | None = None

    @property
    def issuer(self) -> str:
        if self._port is None:
            raise RuntimeError("the fake identity provider is not running; use `async with FakeIdP()`")
        return f"http://{self.host}:{self._port}"

    # --- tokens -----------------------------------------------------------------------------------

    def claims(self, audience: str | None = None, expires_in: float = 300, **claims: Any) -> dict[str, Any]:
        """A token's claims: issuer, audience (the API's unless said), subject, times, and `claims` over them."""
        now = int(time.time())
        base = {"iss": self.issuer, "aud": audience or self.audience, "sub": "user-1", "iat": now,
                "exp": now + int(expires_in), **self.signs_in}  # fmt: skip
        return {**base, **claims}

    def mint(self, claims: dict[str, Any] | None = None, *, key: SigningKey | None = None, **more: Any) -> str:
        """A token signed with the current key (or `key`): `claims`, or `self.claims(**more)`."""
        key = key or self.keys[-1]
        return jwt.encode(claims or self.claims(**more), key.private, algorithm=key.alg, headers={"kid": key.kid})  # pyright: ignore[reportArgumentType]

    def forged(self, how: str, **more: Any) -> str:
        """A token no provider issues: `none` (unsigned), `hs256` (HMAC keyed with the public key's PEM)."""
        header = {"alg": "none" if how == "none" else "HS256", "typ": "JWT", "kid": self.keys[-1].kid}
        signing = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(self.claims(**more)).encode())
        if how == "none":
            return signing + "."
        mac = hmac.new(self.keys[-1].public_pem(), signing.encode(), hashlib.sha256).digest()
        return signing + "." + _b64(mac)

    def rotate(self, alg: str = "RS256") -> SigningKey:
        """Sign with a new key from now on; the key set publishes only it."""
        key = SigningKey.new(f"k-{alg.lower()}-{secrets.token_hex(4)}", alg)
        self.keys = [key]
        return key

    # --- routes -----------------------------------------------------------------------------------

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse({"issuer": self.issuer, "jwks_uri": self.issuer + "/jwks",
                             "authorization_endpoint": self.issuer + "/authorize",
                             "token_endpoint": self.issuer + "/token", "response_types_supported": ["code"],
                             "code_challenge_methods_supported": ["S256"],
                             "id_token_signing_alg_values_supported": ["RS256", "ES256"]})  # fmt: skip

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        return JSONResponse({"keys": [k.jwk() for k in self.keys]})

    async def _authorize(self, request: Request) -> Response:
        q = request.query_params
        if q.get("client_id") != self.client_id or q.get("response_type") != "code":
            return JSONResponse({"error": "unauthorized_client"}, status_code=400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request", "error_description": "PKCE (S256) required"}, 400)
        code = secrets.token_urlsafe(16)
        redirect = q.get("redirect_uri", "")
        self._grants[code] = _Grant(q["code_challenge"], redirect, q.get("nonce", ""), dict(self.signs_in))
        back = {"code": code, "state": q.get("state", "")}
        return RedirectResponse(f"{redirect}?{urlencode(back)}", status_code=302)

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append(form)
        grant = self._grants.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        if grant is None or form.get("redirect_uri") != grant.redirect_uri:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        if _b64(hashlib.sha256(verifier.encode()).digest()) != grant.challenge:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE verifier mismatch"}, 400)
        id_token = self.mint(self.claims(audience=self.client_id, nonce=grant.nonce, **grant.claims))
        access = self.mint(self.claims(**grant.claims))
        return JSONResponse({"id_token": id_token, "access_token": access, "token_type": "Bearer", "expires_in": 300})

    # --- running ----------------------------------------------------------------------------------

    async def start(self) -> None:
        app = Starlette(routes=[
            Route("/.well-known/openid-configuration", self._discovery), Route("/jwks", self._jwks),
            Route("/authorize", self._authorize), Route("/token", self._token, methods=["POST"]),
        ])  # fmt: skip
        self._server = uvicorn.Server(uvicorn.Config(app, host=self.host, port=0, log_level="warning", lifespan="off"))
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        self._port = self._server.servers[0].sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None

    async def __aenter__(self) -> FakeIdP:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
