"""Every failure as JSON `{"error": {"type", "message", "code"}}` with a fitting status — never a traceback.

Bad input is always a 4xx: malformed JSON, wrong types, unknown ids, a body too large or too slow. Only a bug
is a 500, and it says no more than that it is one.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import (
    ApprovalConflict,
    BudgetExceeded,
    ChatBusy,
    Conflict,
    Draining,
    EnvVarMissing,
    Forbidden,
    ModelError,
    NoActiveRun,
    NotFound,
    PermissionDenied,
    RateLimited,
    Refused,
    RunError,
    UsageError,
    YaoAgentError,
)
from yao_agent.shapes import ErrorBody, ErrorDetail

log = logging.getLogger("yao_agent.server")


class Unauthorized(YaoAgentError):
    """No valid bearer token; `code` says why when a client can act on it (`token_expired`)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class IssuerUnavailable(YaoAgentError):
    """The identity provider did not answer, or answered nonsense: no token of it can be told good (503)."""


class TooLarge(YaoAgentError):
    """A request over one of the server's limits (413); the message names the setting."""


class InvalidParam(UsageError):
    """Bad input in one field of the request: the error names it in `param`, as OpenAI's errors do."""

    def __init__(self, message: str, *, param: str, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def field_name(name: str) -> str:
    """A field's name fit for the one line of an error: as it is, or quoted when it is odd (`"\\r"`)."""
    return name if name.isidentifier() else json.dumps(name)


def error_body(kind: str, message: str, code: str | None = None, param: str | None = None) -> ErrorBody:
    """The error shape of every route; `code` (OpenAI clients read it) is the type unless said otherwise,
    and `param` names the field at fault when there is one.

    A message may quote what the client sent; a lone surrogate in it could not be encoded, so it is escaped.
    """
    said = message.encode("utf-8", "backslashreplace").decode("utf-8")
    error: ErrorDetail = {"type": kind, "message": said, "code": code or kind}
    if param is not None:
        error["param"] = param.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": error}


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(kind, message), status_code=status, headers=headers)


def unauthorized(message: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body("unauthorized", message, code), status_code=401,
                        headers={"WWW-Authenticate": "Bearer"})  # fmt: skip


def retry_after(seconds: float) -> str:
    """HTTP's Retry-After: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def refusal_headers(exc: Refused) -> dict[str, str]:
    """When to try again; and, for a budget spent, that an OpenAI client must not resend it at once (it
    would, three times, for any 429 without `x-should-retry: false`)."""
    headers = {"Retry-After": retry_after(exc.retry_after)} if exc.retry_after is not None else {}
    return headers | ({"x-should-retry": "false"} if isinstance(exc, BudgetExceeded) else {})


def classify(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, error type) for one of our errors."""
    table: list[tuple[type[BaseException], int, str]] = [
        (Unauthorized, 401, "unauthorized"),
        (TooLarge, 413, "request_too_large"),
        (ChatBusy, 409, "chat_busy"),
        (NoActiveRun, 409, "no_active_run"),
        (ApprovalConflict, 409, "approval_conflict"),
        (Conflict, 409, "conflict"),
        (BudgetExceeded, 429, "budget_exceeded"),
        (RateLimited, 429, "rate_limited"),
        (Draining, 503, "unavailable"),
        (IssuerUnavailable, 503, "unavailable"),
        (Forbidden, 403, "forbidden"),
        (NotFound, 404, "not_found"),
        (PermissionDenied, 403, "permission_denied"),
        (UsageError, 400, "invalid_request"),
        (EnvVarMissing, 500, "configuration_error"),
        (ModelError, 502, "model_error"),  # a provider's failure, met outside a run (an embedding)
        (RunError, 500, "run_failed"),
    ]
    for kind, status, name in table:
        if isinstance(exc, kind):
            return status, name
    return 500, "internal_error"


def _where(error: Any) -> str | None:
    """The field an error is about (`stop`, `messages.0.role`), or None for the body as a whole."""
    return ".".join(str(p) for p in error.get("loc", ()) if p != "body") or None


def _validation_message(exc: RequestValidationError) -> str:
    parts: list[str] = []
    for error in exc.errors()[:5]:
        if error.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        parts.append(f"{_where(error) or 'body'}: {said(error)}")
    return "; ".join(parts) or "invalid request"


# What a request's field should have been, in the API's own words (pydantic's read "Input should be a valid
# dictionary or object to extract fields from"); `{}` takes the limit the error carries.
_OBJECT, _LIST, _WHOLE, _NUMBER, _BOOL = ("expected an object", "expected a list", "expected a whole number",
                                         "expected a number", "expected true or false")  # fmt: skip
_EXPECTED = {
    "dict_type": _OBJECT, "model_type": _OBJECT, "model_attributes_type": _OBJECT, "mapping_type": _OBJECT,
    "list_type": _LIST, "tuple_type": _LIST, "string_type": "expected a string",
    "int_type": _WHOLE, "int_parsing": _WHOLE, "int_from_float": _WHOLE,
    "float_type": _NUMBER, "float_parsing": _NUMBER,
    "bool_type": _BOOL, "bool_parsing": _BOOL, "missing": "required",
    "extra_forbidden": "unknown field", "none_required": "expected null",
    "literal_error": "expected {expected}", "enum": "expected {expected}",
    "greater_than": "expected a number greater than {gt}", "greater_than_equal": "expected a number of at least {ge}",
    "less_than": "expected a number less than {lt}", "less_than_equal": "expected a number of at most {le}",
    "string_too_short": "expected at least {min_length} characters",
    "string_too_long": "expected at most {max_length} characters",
    "too_short": "expected at least {min_length} items", "too_long": "expected at most {max_length} items",
    "string_pattern_mismatch": "expected text matching {pattern}",
}  # fmt: skip
_JSON_WORDS = {"True": "true", "False": "false", "None": "null"}  # a literal as the body writes it


def _plain(value: Any) -> Any:
    """A limit as a person writes it: 2, not 2.0; false, not False."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return _JSON_WORDS.get(value, value) if isinstance(value, str) else value


def said(error: Any) -> str:
    """One validation error in the API's words: our own validators' messages as they are, pydantic's
    phrasing never."""
    kind, context = str(error.get("type", "")), as_mapping(error.get("ctx"))
    template = _EXPECTED.get(kind)
    if template is not None:
        try:
            return template.format(**{k: _plain(v) for k, v in context.items()})
        except (KeyError, IndexError, ValueError):
            pass
    message = str(error.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):  # what our own validators raised, said by pydantic
        message = message.removeprefix(prefix)
    if message.startswith("Input should be "):
        message = "expected " + message.removeprefix("Input should be ")
    return message


def _validation_param(exc: RequestValidationError) -> str | None:
    """The first field at fault; only the top-level name, as OpenAI's `param` (`response_format`, not its inside)."""
    first = next(iter(exc.errors()), None)
    where = _where(first) if first is not None and first.get("type") != "json_invalid" else None
    return where.split(".")[0] if where else None


def install(app: FastAPI) -> None:
    @app.exception_handler(YaoAgentError)
    async def ours(request: Request, exc: YaoAgentError) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        status, kind = classify(exc)
        if isinstance(exc, Unauthorized):
            return unauthorized(str(exc), exc.code)
        message = next((line for line in str(exc).splitlines() if line.strip()), kind)  # its first line with words
        if isinstance(exc, InvalidParam):
            return JSONResponse(error_body(kind, message, exc.code, exc.param), status_code=status)
        if isinstance(exc, Refused):
            return error_response(status, kind, message, refusal_headers(exc))
        return error_response(status, kind, message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        body = error_body("invalid_request", _validation_message(exc), param=_validation_param(exc))
        return JSONResponse(body, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        kind = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status_code, "http_error"
        )
        return error_response(exc.status_code, kind, str(exc.detail))

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error (the server log has the details)")
