"""What one request may take of the server, checked in front of every route.

* `Admission`: at most `server.max_requests` requests in progress at once, streams included; one
  more is a 503 at once (`Retry-After: 1`), refused before its token is even looked up, rather than
  queued behind the others. Health checks are never refused: a busy server is alive.
* `RequestBody`: the body is read here, whole, before the route runs — within `server.body_timeout_s`
  of the request's head (else 408, and the connection is closed) and `server.max_body_bytes` (else
  413) — and, when it is JSON, checked for NaN, Infinity and numbers beyond a double (else 400).
  Python's `json` reads those, no JSON writer produces them, and past the edge they would fail far
  from the cause (a 500 when stored, or when sent to a model).
* `check_messages`: a route's messages, at most `server.max_messages` (else 413).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any, cast

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yao_agent.dsl.specs import ServerSettings
from yao_agent.server.auth import local_path
from yao_agent.server.errors import TooLarge, error_body, error_response

PROBES = frozenset({"/healthz", "/readyz"})  # liveness and readiness: answered even when the server is full
# Where a non-standard number may hide; only a body that has one of these is parsed a second time.
SUSPECT = re.compile(rb"NaN|Infinity|[0-9][eE][+-]?[0-9]{3}|[0-9]{309}")


def check_messages(settings: ServerSettings, messages: list[Any]) -> None:
    if len(messages) > settings.max_messages:
        raise TooLarge(f"the request carries {len(messages)} messages, more than the {settings.max_messages} "
                       "one request may carry (server.max_messages)")  # fmt: skip


class Admission:
    """Refuse a request with a 503 while `limit` others are in progress (see the module's doc)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or local_path(scope) in PROBES:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            message = f"the server has {self.limit} requests in progress (server.max_requests); retry shortly"
            await error_response(503, "overloaded", message, {"Retry-After": "1"})(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


class BodyTooLarge(Exception):
    """The body is over `max_body_bytes`, as declared or as read."""


class RequestBody:
    """Read the body whole, in time and within its size, refuse non-standard JSON numbers, then hand it on."""

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float, upload_limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.upload_limit = upload_limit if upload_limit is not None else limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        limit, setting = self._limit(scope)
        try:
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise BodyTooLarge
            async with asyncio.timeout(self.timeout_s):
                body = await self._read(receive, limit)
        except BodyTooLarge:
            message = f"the request body is larger than {limit} bytes ({setting})"
            await error_response(413, "request_too_large", message)(scope, receive, send)
            return
        except TimeoutError:
            message = f"the request body did not arrive within {self.timeout_s:g} s (server.body_timeout_s)"
            headers = {"Connection": "close"}  # the client is still sending: stop reading it
            await error_response(408, "request_timeout", message, headers)(scope, receive, send)
            return
        if body is None:
            return  # the client left before its body was in: nobody to answer
        odd = odd_number(body) if is_json(scope) else None
        if odd is not None:
            await not_json(odd)(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)

    def _limit(self, scope: Scope) -> tuple[int, str]:
        """A document upload may be larger than any other request (server.max_upload_bytes)."""
        path: str = scope.get("path", "")
        if scope.get("method") == "POST" and path.startswith("/api/knowledge/") and path.endswith("/documents"):
            return self.upload_limit, "server.max_upload_bytes"
        return self.limit, "server.max_body_bytes"

    async def _read(self, receive: Receive, limit: int) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """The request's messages as the route reads them: the whole body first, then the connection's own."""
    sent = False

    async def receiving() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # (a route waits here to learn that its client has left)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receiving


def is_json(scope: Scope) -> bool:
    """Whether the routes parse the body as JSON (FastAPI's rule: application/json or application/*+json)."""
    content_type = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    kind, _, subtype = content_type.partition(b"/")
    return kind == b"application" and (subtype == b"json" or subtype.endswith(b"+json"))


class Odd:
    """A number the body holds that JSON has not: NaN, Infinity, or one beyond a double."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _float(literal: str) -> float | Odd:
    value = float(literal)
    return value if math.isfinite(value) else Odd(literal)


def odd_number(body: bytes) -> tuple[str, str] | None:
    """(where, literal) of the first non-standard number in a JSON body, or None (also for a body that
    is not JSON at all: the route says what is wrong with it)."""
    if not SUSPECT.search(body):
        return None
    try:
        value = json.loads(body, parse_constant=Odd, parse_float=_float)
    except (ValueError, RecursionError):
        return None
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:  # depth-first, in the body's order, without recursion (a body may nest deeply)
        where, item = pending.pop()
        if isinstance(item, Odd):
            return where or "body", item.literal
        if isinstance(item, dict):
            fields = cast(dict[str, Any], item).items()
            pending.extend(reversed([(f"{where}.{k}" if where else k, v) for k, v in fields]))
        elif isinstance(item, list):
            items = enumerate(cast(list[Any], item))
            pending.extend(reversed([(f"{where}.{i}" if where else str(i), v) for i, v in items]))
    return None


def not_json(odd: tuple[str, str]) -> JSONResponse:
    where, literal = odd
    message = f"{where}: {literal} is not a JSON number (JSON has no NaN or Infinity; a number must fit a double)"
    param = where.split(".")[0] if where != "body" else None
    return JSONResponse(error_body("invalid_request", message, param=param), status_code=400)
