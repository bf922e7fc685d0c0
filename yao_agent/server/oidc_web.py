"""The web page's sign-in with the identity provider: the authorization-code flow with PKCE, and a session.

`GET /auth/login` sends the browser to the provider with a fresh `state`, `nonce` and PKCE challenge
(S256); the three are kept in a short-lived HttpOnly cookie of the callback's path, so the callback
knows the browser that started the sign-in is the one finishing it. `GET /auth/callback` exchanges the
code at the token endpoint (with the PKCE verifier), verifies the id_token (signature, issuer, the client
as audience, expiry, nonce) and opens a session: a random id in an HttpOnly, SameSite=Lax cookie
(Secure when the page is served over https) whose hash the store keeps, so every worker knows it and
`POST /auth/logout` ends it everywhere.

The cookie authenticates the page's API calls (auth.py) only when the request has no Authorization
header. A write made with it (any method but GET, HEAD, OPTIONS) must carry the session's CSRF token
in `X-CSRF-Token`: the page reads it from `GET /auth/session`, which another site's page cannot (no CORS
answer ever allows credentials), and a cross-site form cannot set a header.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import Any
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.requests import cookie_parser
from starlette.types import Scope

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import Forbidden, UsageError
from yao_agent.identity import Identity
from yao_agent.server.errors import IssuerUnavailable, Unauthorized
from yao_agent.server.oidc import Verifier
from yao_agent.service.runs import Runs

SESSION_COOKIE = "yao_session"
LOGIN_COOKIE = "yao_oidc_login"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_TTL_S = 600  # a sign-in must come back from the provider within this
PENDING = ("state", "nonce", "verifier")  # what the login cookie holds
ROUTES = frozenset({"/auth/login", "/auth/callback", "/auth/logout", "/auth/session"})

router = APIRouter(include_in_schema=False)  # the page's, like `/`: documented in the HTTP reference


class CsrfRefused(Forbidden):
    """A write authenticated by the session cookie without the session's CSRF token."""


def cookie_of(scope: Scope, name: str) -> str | None:
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    raw = b"; ".join(v for k, v in headers if k == b"cookie").decode("latin-1")
    return cookie_parser(raw).get(name) or None if raw else None


async def session_identity(runs: Runs, scope: Scope, session_id: str) -> Identity:
    """Who the session cookie of this request signed in as; a write must also carry the CSRF token."""
    session = await runs.rt.store.session(session_id)
    if session is None:
        raise Unauthorized("the sign-in has ended or expired: sign in again")
    if scope["method"] not in SAFE_METHODS:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        sent = next((v for k, v in headers if k == CSRF_HEADER), b"").decode("latin-1")
        if not sent or not secrets.compare_digest(sent, session.csrf):
            raise CsrfRefused("a write signed in by the session cookie needs its X-CSRF-Token header")
    return session.identity


def _verifier(request: Request) -> Verifier:
    verifier: Verifier | None = request.app.state.oidc
    if verifier is None:
        raise UsageError("sign-in with an identity provider is not configured (server.oidc in app.yml)")
    return verifier


def _under_root(request: Request, path: str) -> str:
    return request.scope.get("root_path", "") + path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int, path: str) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, max_age=max_age, path=path, httponly=True, secure=secure, samesite="lax")


@router.get("/auth/session")
async def session_state(request: Request) -> JSONResponse:
    """Whether sign-in with the provider is on, and who this browser is signed in as (with its CSRF token)."""
    verifier: Verifier | None = request.app.state.oidc
    body: dict[str, Any] = {"oidc": verifier is not None, "signed_in": False}
    session_id = cookie_of(request.scope, SESSION_COOKIE)
    if verifier is not None and session_id:
        session = await request.app.state.runs.rt.store.session(session_id)
        if session is not None:
            who = session.identity
            body |= {"signed_in": True, "user_id": who.user_id, "team_id": who.team_id, "admin": who.admin,
                     "operator": who.operator, "csrf": session.csrf}  # fmt: skip
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/auth/login")
async def login(request: Request) -> Response:
    """Off to the provider's authorization endpoint, with PKCE (S256), `state` and `nonce`."""
    verifier = _verifier(request)
    found = await verifier.discovery()
    state, nonce, code_verifier = (secrets.token_urlsafe(32) for _ in range(3))
    challenge = _b64(hashlib.sha256(code_verifier.encode("ascii")).digest())
    query = {"response_type": "code", "client_id": verifier.settings.client_id, "scope": "openid email profile",
             "redirect_uri": str(request.url_for("oidc_callback")), "state": state, "nonce": nonce,
             "code_challenge": challenge, "code_challenge_method": "S256"}  # fmt: skip
    response = RedirectResponse(f"{found.authorization_endpoint}?{urlencode(query)}", status_code=302)
    pending = _b64(json.dumps({"state": state, "nonce": nonce, "verifier": code_verifier}).encode())
    _cookie(response, request, LOGIN_COOKIE, pending, LOGIN_TTL_S, _under_root(request, "/auth/callback"))
    response.headers["Cache-Control"] = "no-store"
    return response


def _pending(request: Request) -> dict[str, str]:
    """The sign-in this browser started: its state (checked against the provider's), nonce and PKCE verifier."""
    raw = cookie_of(request.scope, LOGIN_COOKIE)
    try:
        pending = as_mapping(json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))) if raw else None)
    except ValueError:
        pending = as_mapping(None)
    if not all(isinstance(pending.get(k), str) for k in PENDING):
        raise UsageError("no sign-in was started in this browser, or it took too long: start again at /auth/login")
    if not secrets.compare_digest(request.query_params.get("state", ""), pending["state"]):
        raise UsageError("the sign-in's state does not match the one this browser sent: start again at /auth/login")
    return {k: str(pending[k]) for k in PENDING}


@router.get("/auth/callback", name="oidc_callback")
async def callback(request: Request) -> Response:
    """Back from the provider: the code exchanged, the id_token verified, a session opened."""
    verifier = _verifier(request)
    if "error" in request.query_params:
        said = request.query_params.get("error_description") or request.query_params["error"]
        raise Unauthorized(f"the identity provider refused the sign-in: {said[:200]}")
    pending = _pending(request)
    code = request.query_params.get("code")
    if not code:
        raise UsageError("the identity provider sent no code")
    id_token = await _exchange(verifier, request, code, pending["verifier"])
    claims = await verifier.claims(id_token, verifier.settings.client_id, nonce=pending["nonce"])
    identity = verifier.identity_of(claims)
    lifetime = verifier.settings.session_hours * 3600
    session_id, _ = await request.app.state.runs.rt.store.create_session(identity, lifetime)
    response = RedirectResponse(_under_root(request, "/"), status_code=303)
    _cookie(response, request, SESSION_COOKIE, session_id, int(lifetime), _under_root(request, "/") or "/")
    response.delete_cookie(LOGIN_COOKIE, path=_under_root(request, "/auth/callback"))
    return response


async def _exchange(verifier: Verifier, request: Request, code: str, code_verifier: str) -> str:
    """The id_token the token endpoint gives for `code`."""
    s = verifier.settings
    form = {"grant_type": "authorization_code", "code": code, "code_verifier": code_verifier,
            "redirect_uri": str(request.url_for("oidc_callback")), "client_id": s.client_id}  # fmt: skip
    auth = (s.client_id, s.client_secret.resolve()) if s.client_secret is not None else None
    endpoint = (await verifier.discovery()).token_endpoint
    try:
        answer = await verifier.client().post(endpoint, data=form, auth=auth or httpx.USE_CLIENT_DEFAULT)
    except httpx.HTTPError as exc:
        raise IssuerUnavailable(f"the identity provider did not answer at {endpoint} ({type(exc).__name__})") from None
    try:
        body = as_mapping(answer.json())
    except ValueError:
        body = as_mapping(None)
    id_token = body.get("id_token")
    if answer.status_code != 200 or not isinstance(id_token, str):
        said = str(body.get("error_description") or body.get("error") or "no id_token")[:200]
        raise Unauthorized(f"the identity provider did not exchange the code ({answer.status_code}: {said})")
    return id_token


@router.post("/auth/logout")
async def logout(request: Request) -> Response:
    """End this browser's session, here and on every worker (the write needs the session's CSRF token)."""
    session_id = cookie_of(request.scope, SESSION_COOKIE)
    if session_id:
        await session_identity(request.app.state.runs, request.scope, session_id)  # the CSRF check
        await request.app.state.runs.rt.store.end_session(session_id)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path=_under_root(request, "/") or "/")
    return response
