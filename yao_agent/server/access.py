"""One access line per HTTP request: method, route template, status, duration and bytes sent.

The route is the template the request matched (`/api/chats/{chat_id}/messages`), never its path or
query string: a path holds ids and a query string may hold a secret, and neither a header nor a body
is ever looked at. The middleware only watches what the app sends, passing each message on as it
comes, so a stream is not held back; its line is written when the response has ended, and its
duration is the whole stream's.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from fastapi import FastAPI
from starlette.routing import Mount, Route, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yao_agent.identity import Identity
from yao_agent.server.auth import SCOPE_KEY
from yao_agent.server.sse import OUTLET_KEY, Outlet

log = logging.getLogger("yao_agent.access")
UNMATCHED = "(unmatched)"  # the route of a request no route takes (a 404)


class AccessLog:
    """The outermost layer: it sees every response, those the other layers refuse included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        outlet = scope[OUTLET_KEY] = Outlet(send)  # (the request's own scope) a stream's frames count there

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                outlet.bytes += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            # no response started: the app failed, and the server answers 500 for it
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            _write(scope, route_of(scope), (status or 500, duration_ms, outlet.bytes))


def _write(scope: Scope, route: str, outcome: tuple[int, float, int]) -> None:
    method, (status, duration_ms, size) = scope["method"], outcome
    fields: dict[str, Any] = {"method": method, "route": route, "status": status,
                              "duration_ms": duration_ms, "bytes": size}  # fmt: skip
    identity = scope.get(SCOPE_KEY)
    if isinstance(identity, Identity):  # the caller, once its token was taken
        fields["user_id"] = identity.user_id
        if identity.team_id:
            fields["team_id"] = identity.team_id
    log.info("%s %s %d %.1fms %dB", method, route, status, duration_ms, size, extra=fields)


def route_of(scope: Scope) -> str:
    """The template of the route the request took: the one the router left in the scope, or else the
    first of the app's templates its path fits (a request refused before routing, a mount's file)."""
    taken = scope.get("route")
    if isinstance(taken, Route):
        return taken.path
    app = scope.get("app")
    path = scope["path"]
    for pattern, template in _templates(app) if isinstance(app, FastAPI) else ():
        if pattern.match(path):
            return template
    return UNMATCHED


def _templates(app: FastAPI) -> list[tuple[re.Pattern[str], str]]:
    """Every path template the app serves, those without a parameter first (`/api/chats/search` before
    `/api/chats/{chat_id}`), made at its first request and kept with it. The app lists its routers' (an
    included router keeps its routes to itself); its own routes and mounts add the rest."""
    made: list[tuple[re.Pattern[str], str]] | None = getattr(app.state, "route_templates", None)
    if made is None:
        made = app.state.route_templates = _made_templates(app)
    return made


def _made_templates(app: FastAPI) -> list[tuple[re.Pattern[str], str]]:
    paths: list[str] = list(getattr(app.state, "api_paths", []))
    for route in app.router.routes:
        if isinstance(route, Mount):
            paths.append(f"{route.path}/{{path:path}}")
        elif isinstance(route, Route):
            paths.append(route.path)
    ordered = sorted(dict.fromkeys(paths), key=lambda template: template.count("{"))
    return [(compiled, shown) for compiled, shown, _ in map(compile_path, ordered)]


__all__ = ["AccessLog", "route_of"]
