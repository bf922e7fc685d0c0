"""What the OpenAPI document says the routes answer: their JSON, their event streams, their errors.

The JSON's shapes are yao_agent/shapes.py's, the very types the routes' answers are built as; here they
are declared per route, with the statuses each route uses. The document drops FastAPI's own 422 (bad
input is a 400 here, in the error shape) and takes each field's description from its docstring.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.openapi.utils import get_openapi
from pydantic import ConfigDict, with_config

from yao_agent.shapes import ErrorBody

Search = Annotated[
    str, Query(max_length=200, description="only the chats whose title or messages contain this text, ignoring case")
]


WHY = {
    400: "invalid input: malformed JSON, a wrong type, a value out of range, an unknown field",
    401: "no valid bearer token (checked before the body is read); an expired one says so (code token_expired)",
    403: "forbidden: a team-wide change or view (another member's) with a member's token; team admins only",
    404: "no such chat, assistant, resume point or role setting for this caller (another tenant's is the same 404)",
    408: "the request body did not arrive in time (server.body_timeout_s)",
    409: "the chat is busy (a run is in progress; on_busy: reject), has no active run, or its run was cancelled",
    413: "the request body, or its number of messages, is over the server's limit (server.max_body_bytes, "
    "server.max_messages)",
    429: "a budget is spent (budget_exceeded, with Retry-After and x-should-retry: false) or a rate limit reached "
    "(rate_limited, with Retry-After): the run was not started; or, for a completion, a budget stopped its run "
    "before a model call (budget_exceeded)",
    500: "a bug (internal_error); the server log has the details",
    502: "the model, a tool, a hook or a delegated assistant failed",
    503: "the server has as many requests in progress as it takes (server.max_requests), or it is shutting "
    "down (draining: no new runs); retry after Retry-After",
    504: "the run timed out",
    508: "the run was stopped repeating the same tool call (loop_detected)",
}
EVENTS = ("`data: <json>` frames, one event each: `stream_start`, `message_start`, `message_delta`, `message_end`, "
          "`tool_result`, `fallback`, `compaction`, and always last `stream_end`")  # fmt: skip
CHUNKS = "`data: <json>` frames of `chat.completion.chunk` (or one `{error}`), then `data: [DONE]`"


# The fields' docstrings become their descriptions; a shape inside another is read with the outer one's config.
DESCRIBED = ConfigDict(use_attribute_docstrings=True)


def declared(shape: type) -> type:
    """`shape` (a TypedDict of yao_agent/shapes.py) as the document declares it: its fields described."""
    return with_config(DESCRIBED)(shape)


def answers(shape: type, *errors: int, stream: str | None = None) -> dict[int | str, dict[str, Any]]:
    """A route's `responses`: its 200 (JSON, and an event stream when it streams), then its error statuses."""
    ok: dict[str, Any] = {"model": declared(shape)}
    if stream is not None:
        ok["content"] = {"text/event-stream": {"schema": {"type": "string", "description": stream}}}
    answered: dict[int | str, dict[str, Any]] = {200: ok}
    body_limits = (408,) if 413 in errors else ()  # a route that reads a body may also wait too long for it
    for status in (*errors, *body_limits, 503, 500):
        answered[status] = {"model": declared(ErrorBody), "description": WHY[status]}
    return answered


def install(app: FastAPI) -> None:
    """The app's document, without FastAPI's 422 that no route returns."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            shapes: dict[str, Any] = schema.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                shapes.pop(name, None)
            for shape in shapes.values():
                one_line(shape)
                for field in shape.get("properties", {}).values():
                    one_line(field)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document


def one_line(schema: dict[str, Any]) -> None:
    """A description as one line: a docstring wraps where the source does."""
    if "description" in schema:
        schema["description"] = " ".join(schema["description"].split())
