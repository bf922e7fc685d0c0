"""Bearer tokens → identities. The identity of a request comes from its token, never from its body.

The token is checked before anything else of the request is looked at — its size, its JSON, its fields —
so a caller without a valid token learns nothing but 401, whatever it sends.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from yao_agent.errors import TokenExpired
from yao_agent.identity import Identity
from yao_agent.server import oidc_web
from yao_agent.server.errors import IssuerUnavailable, Unauthorized, error_response, unauthorized
from yao_agent.server.oidc import Verifier, looks_like_jwt
from yao_agent.service.runs import Runs
from yao_agent.service.tokens import expired_message

log = logging.getLogger("yao_agent.server")
MISSING = "missing bearer token (expected the header Authorization: Bearer <token>)"
MISSING_KEY = "missing API key (expected the header x-api-key: <token>, or Authorization: Bearer <token>)"
# The routes of Anthropic's API, whose clients send the key as `x-api-key`: there it is taken when the
# request has no Authorization header (which wins when both are sent).
API_KEY_ROUTES = frozenset({"/v1/messages"})
INVALID = "invalid or revoked token"  # (an expired one is told so: `token_expired`)
SCOPE_KEY = "yao_agent.identity"  # where `Authenticate` leaves the identity for the route's `caller`


class Declared(HTTPBearer):
    """The scheme as the OpenAPI document declares it. The check itself is `authenticate`, the same for
    both paths in, so this dependency reads nothing (HTTPBearer's own would parse the header into a
    pydantic model on every request, for nobody)."""

    async def __call__(self, request: HTTPConnection) -> None:
        return None


bearer = Declared(
    auto_error=False, scheme_name="HTTPBearer", description="a token printed by `yao-agent tokens create`"
)


def token_of(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def authorization(scope: Scope) -> tuple[str, str]:
    """(the request's Authorization header — or, on an API_KEY_ROUTES route without one, its x-api-key
    as a bearer token —, what to say when it has none)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    header = next((v for k, v in headers if k == b"authorization"), b"").decode("latin-1")
    if header or local_path(scope) not in API_KEY_ROUTES:
        return header, MISSING
    key = next((v for k, v in headers if k == b"x-api-key"), b"").decode("latin-1").strip()
    return (f"Bearer {key}" if key else ""), MISSING_KEY


async def authenticate(runs: Runs, header: str, missing: str = MISSING, oidc: Verifier | None = None) -> Identity:
    token = token_of(header)
    if token is None:
        raise Unauthorized(missing)
    if oidc is not None and looks_like_jwt(token):  # the identity provider's; ours never hold a dot
        return await oidc.identity(token)
    try:
        identity = await runs.tenancy.identity_for(token)
    except TokenExpired as exc:
        raise Unauthorized(expired_message(exc), code="token_expired") from None
    if identity is None:
        raise Unauthorized(INVALID)
    return identity


async def caller(request: Request, _scheme: Annotated[None, Depends(bearer)]) -> Identity:
    """The FastAPI dependency every API route takes: 401 without a valid, unrevoked token."""
    known = request.scope.get(SCOPE_KEY)
    if isinstance(known, Identity):
        return known  # checked by `Authenticate` for this very request
    return await authenticate(request.app.state.runs, *authorization(request.scope), oidc=request.app.state.oidc)


Caller = Annotated[Identity, Depends(caller)]


# What may be fetched without a user token: liveness, metrics (their own token: metrics_route.py), the page
# and its files, its sign-in (oidc_web.py), the API's documentation. Anything else needs one, even a path
# no route serves: a route added later is closed until it is listed here.
PUBLIC = frozenset(
    {"/", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    | oidc_web.ROUTES
)
PUBLIC_UNDER = ("/static/",)


def local_path(scope: Scope) -> str:
    """The request's path as the app's routes know it: without a proxy's prefix (`root_path`)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def needs_token(scope: Scope) -> bool:
    path = local_path(scope)
    return path not in PUBLIC and not path.startswith(PUBLIC_UNDER)


class Authenticate:
    """The outermost layer: a request outside `PUBLIC` is refused (401) without a valid token — or, with
    sign-in by an identity provider (`oidc`), without its JWT or the page's session cookie."""

    def __init__(self, app: ASGIApp, runs: Runs, oidc: Verifier | None = None) -> None:
        self.app = app
        self.runs = runs
        self.oidc = oidc

    async def identity(self, scope: Scope) -> Identity:
        header, missing = authorization(scope)
        session_id = oidc_web.cookie_of(scope, oidc_web.SESSION_COOKIE) if self.oidc and not header else None
        if session_id is not None:
            return await oidc_web.session_identity(self.runs, scope, session_id)
        return await authenticate(self.runs, header, missing, self.oidc)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and needs_token(scope):
            try:
                identity = await self.identity(scope)
            except Unauthorized as exc:
                await unauthorized(str(exc), exc.code)(scope, receive, send)
                return
            except oidc_web.CsrfRefused as exc:
                await error_response(403, "forbidden", str(exc))(scope, receive, send)
                return
            except IssuerUnavailable as exc:
                await error_response(503, "unavailable", str(exc), {"Retry-After": "5"})(scope, receive, send)
                return
            except Exception:  # the store failing is the server's fault, and says so in our error shape
                log.exception("token check failed on %s", scope["path"])
                response = error_response(500, "internal_error", "internal error (the server log has the details)")
                await response(scope, receive, send)
                return
            scope[SCOPE_KEY] = identity  # the request's own scope: never shared with another request
        await self.app(scope, receive, send)
