"""What a browser is told besides the answer: the page's security headers, and CORS (CONTRACT §6).

Every response says how a browser may use it: the page runs only its own scripts and styles, talks only
to this server, is never framed by another site (`frame-ancestors`, and `X-Frame-Options` for older
browsers), sends no `Referer` to the links a reply holds, and no response is read as another type than
it says it is. The page needs nothing inline: markdown is sanitised with no images and no style, the
favicon is an empty `data:` URL.

CORS is off unless `server.cors_origins` in app.yml lists origins (or `*`): a page served elsewhere may
then call the API from a browser with its bearer token. No cookie ever authenticates a request, so no
credentials are allowed. A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here,
before authentication — a browser sends it without the token — with 204: with the CORS headers for a
listed origin, without them (the browser then refuses the call) for any other.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# The API's reference pages (FastAPI's Swagger UI and ReDoc) load their code from a CDN and start it inline.
DOCS_CSP = (
    "default-src 'none'; script-src https://cdn.jsdelivr.net 'unsafe-inline'; "
    "style-src https://cdn.jsdelivr.net https://fonts.googleapis.com 'unsafe-inline'; "
    "font-src https://fonts.gstatic.com; "
    "img-src 'self' data: https://fastapi.tiangolo.com https://cdn.jsdelivr.net; connect-src 'self'; worker-src blob:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DOCS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
_OTHERS: list[tuple[bytes, bytes]] = [
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]
SECURITY: list[tuple[bytes, bytes]] = [(b"content-security-policy", CSP.encode()), *_OTHERS]
DOCS_SECURITY: list[tuple[bytes, bytes]] = [(b"content-security-policy", DOCS_CSP.encode()), *_OTHERS]
METHODS = b"GET, POST, PUT, PATCH, DELETE"
# What a script on another origin may read of an answer besides the simple headers.
EXPOSED = b"X-Chat-Id, X-Yao-Status, Retry-After, X-Should-Retry"
MAX_AGE = b"600"
_HEADER_LIST = re.compile(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*")


class BrowserHeaders:
    """Adds the security headers to every response, answers preflights, and marks CORS answers."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.any_origin = "*" in origins
        self.origins = frozenset(o.encode() for o in origins if o != "*")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])  # (lowercase names, as ASGI gives them; the last of a repeated one)
        origin = headers.get(b"origin")
        allowed = origin is not None and (self.any_origin or origin in self.origins)
        if scope["method"] == "OPTIONS":
            await self._options(send, origin if allowed else None, headers)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [*(DOCS_SECURITY if scope["path"] in DOCS else SECURITY), (b"vary", b"Origin")]
                if allowed and origin is not None:
                    extra += [(b"access-control-allow-origin", origin), (b"access-control-expose-headers", EXPOSED)]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, marked)

    @staticmethod
    async def _options(send: Send, origin: bytes | None, headers: dict[bytes, bytes]) -> None:
        """204 to any OPTIONS (it needs no token): a preflight from a listed origin gets what it asks for."""
        out = [*SECURITY, (b"vary", b"Origin"), (b"allow", b"GET, POST, PUT, PATCH, DELETE, OPTIONS")]
        if origin is not None and b"access-control-request-method" in headers:
            out += [(b"access-control-allow-origin", origin), (b"access-control-allow-methods", METHODS),
                    (b"access-control-max-age", MAX_AGE)]  # fmt: skip
            asked = headers.get(b"access-control-request-headers", b"").strip()
            if asked and _HEADER_LIST.fullmatch(asked):  # any header: no cookie or ambient right rides along
                out.append((b"access-control-allow-headers", asked))
        await send({"type": "http.response.start", "status": 204, "headers": out})
        await send({"type": "http.response.body", "body": b""})
