"""What the OpenAPI document says the routes answer: their JSON, their event streams, their errors.

The JSON's shapes are yao_agent/shapes.py's, the very types the routes' answers are built as; here they
are declared per route, with the statuses each route uses. The document drops FastAPI's own 422 (bad
input is a 400 here, in the error shape) and takes each field's description from its docstring.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import itertools
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from yao_agent import shapes as shapes_module
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


# The shapes the routes declare. The document's schemas for them are made once per process, when it is first
# asked for: a `model` in a route's `responses` would make FastAPI build its schema again for every app and
# route at the app's first request (seconds, for a server that has not answered anyone yet).
DECLARED: set[type] = set()
REF = "#/components/schemas/{model}"


def schema_of(shape: type) -> dict[str, Any]:
    """`shape` (a TypedDict of yao_agent/shapes.py) as a JSON answer of the document: a reference to it."""
    DECLARED.add(shape)
    return {"application/json": {"schema": {"$ref": REF.format(model=shape.__name__)}}}


def answers(shape: type, *errors: int, stream: str | None = None, error: type = ErrorBody) -> dict[int | str, Any]:
    """A route's `responses`: its 200 (JSON, and an event stream when it streams), then its error statuses
    (in `error`'s shape)."""
    ok: dict[str, Any] = {"description": "Successful Response", "content": schema_of(shape)}
    if stream is not None:
        ok["content"]["text/event-stream"] = {"schema": {"type": "string", "description": stream}}
    answered: dict[int | str, dict[str, Any]] = {200: ok}
    body_limits = (408,) if 413 in errors else ()  # a route that reads a body may also wait too long for it
    for status in (*errors, *body_limits, 503, 500):
        answered[status] = {"content": schema_of(error), "description": WHY[status]}
    return answered


@functools.cache
def shape_schemas(shapes: frozenset[type]) -> dict[str, Any]:
    """The document's schemas of `shapes` and of the shapes inside them, each field described by its
    docstring (read from the source once: pydantic would read the whole module again for every class)."""
    adapters = [(shape, "serialization", TypeAdapter(shape)) for shape in sorted(shapes, key=lambda t: t.__name__)]
    _, found = TypeAdapter.json_schemas(adapters, ref_template=REF)  # pyright: ignore[reportArgumentType]
    schemas: dict[str, Any] = found.get("$defs", {})
    for name, schema in schemas.items():
        for field, described in field_docs().get(name, {}).items():
            if field in schema.get("properties", {}):
                schema["properties"][field].setdefault("description", described)
    return schemas


@functools.cache
def field_docs() -> dict[str, dict[str, str]]:
    """Each class of yao_agent/shapes.py: its fields' docstrings (the string right after a field)."""
    tree = ast.parse(inspect.getsource(shapes_module))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            docs[node.name] = dict(_field_docstrings(node.body))
    return docs


def _field_docstrings(body: list[ast.stmt]) -> Iterator[tuple[str, str]]:
    for field, after in itertools.pairwise(body):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):  # fmt: skip
            yield field.target.id, inspect.cleandoc(after.value.value)


def install(app: FastAPI) -> None:
    """The app's document, without FastAPI's 422 that no route returns."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            shapes: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
            shapes.update(copy.deepcopy(shape_schemas(frozenset(DECLARED))))  # (each app's own: it is edited below)
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
