"""What the OpenAPI document says the routes answer: their JSON, their event streams, their errors.

These models only describe; the routes build their answers themselves. The document drops FastAPI's
own 422 (bad input is a 400 here, in the error shape below) and declares the statuses each route uses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    type: str = Field(description="what went wrong: invalid_request, unauthorized, not_found, model_error, ...")
    message: str = Field(description="for a person to read; never a traceback")
    code: str = Field(description="for OpenAI clients: the type, or OpenAI's name for it")
    param: str | None = Field(None, description="the request field at fault, when there is one")


class ErrorBody(BaseModel):
    error: ErrorDetail


class ToolCallOut(BaseModel):
    id: str
    name: str
    arguments: str = Field(description="JSON text, as the model wrote it")


class DecisionOut(BaseModel):
    approved: bool
    by: str = Field(description="the user who decided (or whose new message denied the call)")
    at: str = Field(description="ISO 8601, UTC")
    reason: str | None = None


class ApprovalOut(BaseModel):
    tool_call_id: str
    server: str
    tool: str
    arguments: Any


class ApprovalsOut(BaseModel):
    chat_id: str
    run_id: str = Field(description="the run that waits")
    approvals: list[ApprovalOut]


class MessageOut(BaseModel):
    message_id: str
    run_id: str | None
    role: Literal["system", "user", "assistant", "tool", "summary"]
    content: str | list[dict[str, Any]] | None
    tool_calls: list[ToolCallOut] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None
    status: Literal["completed", "incomplete"]
    thread_id: str | None = None
    summarises: list[str] | None = Field(
        None, description="a summary's first and last message ids: the earlier messages it stands for"
    )
    approval: DecisionOut | None = Field(None, description="a tool result's: what a person decided about the call")
    connector: str | None = Field(None, description="an assistant message's: the connector that answered")
    model: str | None = Field(None, description="an assistant message's: the model that answered")
    created_at: str = Field(description="ISO 8601, UTC")


class UsageOut(BaseModel):
    """What a run used, its child runs included."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(description="USD; null when a call's price is unknown")
    calls: int = Field(description="model calls")


class CallUsageOut(BaseModel):
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    estimated: bool | None = Field(None, description="counted here: the call was cut off before the provider said")


class RunOut(BaseModel):
    """A finished run (`?stream=false`), whatever its end: its status and reason say how it ended."""

    run_id: str
    chat_id: str
    status: Literal["completed", "failed", "cancelled", "waiting"]
    reason: str = Field(description="the terminal reason: completed, cancelled, max_turns, model_error, ...")
    messages: list[MessageOut] = Field(description="the run's new messages")
    approvals: list[ApprovalOut] | None = Field(None, description="the calls waiting for a person (status waiting)")
    next: Any = Field(None, description="a Next hook's data")
    error: Any = Field(None, description="why it failed (for hooks: file, line, message)")
    output: Any = Field(None, description="the final answer's JSON value, for an assistant with an output schema")
    usage: UsageOut


class CancelOut(BaseModel):
    cancelled: int = Field(
        description="how many runs (the active one and those queued before) were cancelled, "
        "here and in the process running the chat (several servers on one database)"
    )


class AppendOut(BaseModel):
    run_id: str = Field(description="the run the messages were added to")


class ChatOut(BaseModel):
    chat_id: str
    assistant_id: str
    title: str
    updated_at: str | None
    last_status: Literal["running", "completed", "failed", "cancelled", "interrupted", "waiting"]


class ChatsOut(BaseModel):
    chats: list[ChatOut]


class DeletedOut(BaseModel):
    chat_id: str
    deleted: Literal[True]


Search = Annotated[
    str, Query(max_length=200, description="only the chats whose title or messages contain this text, ignoring case")
]


class MessagesOut(BaseModel):
    chat_id: str
    messages: list[MessageOut]


class StepOut(BaseModel):
    type: str
    status: str
    error: Any = None


class ResumePointOut(BaseModel):
    run_id: str
    status: Literal["failed", "interrupted", "cancelled"]
    reason: str | None
    error: Any = None
    steps: list[StepOut]


class RunStepOut(BaseModel):
    seq: int
    type: Literal["hook_create", "llm", "tool", "hook_next", "delegate"]
    status: Literal["completed", "failed", "recovered", "interrupted", "cancelled", "waiting"]
    transition: str | None = Field(None, description="an llm step's: why it was made (first, tool_results, ...)")
    thread_id: str | None = Field(None, description="the delegated assistant's thread a step ran in")
    connector: str | None = Field(
        None, description="an llm step's: the connector that answered (a failed try's: the one that failed)"
    )
    model: str | None = None
    usage: CallUsageOut | None = Field(None, description="an llm step's tokens and cost")
    fallbacks: list[dict[str, str]] | None = Field(
        None, description="an llm step's: the links of its chain it passed, each {from, to, reason}"
    )
    error: Any = Field(None, description="a failed try's: {connector, model, kind, message}")
    started_at: str | None = Field(None, description="ISO 8601, UTC")
    duration_ms: int | None


class RunViewOut(BaseModel):
    """One run of a chat, with every step it took."""

    run_id: str
    chat_id: str
    assistant_id: str
    status: Literal["running", "completed", "failed", "cancelled", "interrupted", "waiting"]
    reason: str | None
    error: Any = None
    usage: UsageOut | dict[str, Any]
    resumed_from: str | None = Field(description="the run this one resumed")
    started_at: str | None = Field(description="ISO 8601, UTC")
    ended_at: str | None
    duration_ms: int | None
    steps: list[RunStepOut]


class AssistantOut(BaseModel):
    id: str
    name: str
    description: str


class AssistantsOut(BaseModel):
    assistants: list[AssistantOut]


class RoleOut(BaseModel):
    role: str
    scope: str = Field(description="team:<id>, or user:<id> for a caller without a team")
    connectors: list[str]


class RoleSettingOut(BaseModel):
    role: str
    connectors: list[str] = Field(description="the connector ids, a fallback chain in order")
    updated_at: str = Field(description="ISO 8601, UTC")


class AppRoleOut(BaseModel):
    role: str
    connectors: list[str]


class RolesOut(BaseModel):
    scope: str = Field(description="team:<id>, or user:<id> for a caller without a team")
    roles: list[RoleSettingOut] = Field(description="the scope's own mappings; each wins over app.yml's")
    app_roles: list[AppRoleOut] = Field(description="app.yml's mappings, for the roles the scope does not map")


class RoleDeletedOut(BaseModel):
    role: str
    scope: str
    deleted: Literal[True]


class UsageScopeOut(BaseModel):
    team_id: str | None = Field(None, description="absent for a caller without a team")
    user_id: str | None = Field(None, description="absent when the report is the whole team's")


class UsageTotalOut(BaseModel):
    runs: int = Field(description="runs with model calls (a child run's count as its root's)")
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="USD, the calls whose price is known")
    unpriced_tokens: int = Field(description="tokens of the calls whose price is unknown (not in cost_usd)")


class UsageRowOut(UsageTotalOut):
    key: str = Field(description="the day (YYYY-MM-DD, UTC), assistant id, connector id or user id")


class UsageReportOut(BaseModel):
    """Usage and cost over a span of days."""

    scope: UsageScopeOut
    from_: str = Field(alias="from", description="the first day, YYYY-MM-DD")
    to: str = Field(description="the last day, included")
    by: Literal["day", "assistant", "connector", "user"]
    rows: list[UsageRowOut]
    total: UsageTotalOut = Field(description="the whole span (a run in several rows counts once)")


class BudgetOut(BaseModel):
    scope: Literal["team", "user"]
    id: str = Field(description="the team id, or user@team (the user id alone without a team)")
    window: Literal["per_day", "per_month"]
    budget_usd: float | None = Field(
        description="the budget that binds: the lower of the ceiling and the team "
        "admin's budget; null: no budget in this window"
    )
    source: Literal["app.yml", "operator", "admin"] = Field(
        description="what sets it: app.yml's default, the operator's ceiling, or a team admin's budget under it"
    )
    ceiling_usd: float | None = Field(
        description="the operator's ceiling (app.yml's, unless the operator set "
        "the scope's own): a team admin sets the budget at or below it; null: none"
    )
    ceiling_source: Literal["app.yml", "operator"]
    admin_usd: float | None = Field(description="a team admin's budget, null when none is set")
    spent_usd: float = Field(description="spent in the current window (calls of unknown price are not counted)")
    remaining_usd: float | None
    since: str = Field(description="the current window's start, ISO 8601, UTC")
    resets_at: str = Field(description="the next window's start, ISO 8601, UTC")


class BudgetsOut(BaseModel):
    """The budgets that hold the scope's runs: its team's and its user's, each window."""

    scope: UsageScopeOut
    budgets: list[BudgetOut]


class HealthOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    status: Literal["ready"]
    app_version: str


class AppProblemOut(BaseModel):
    file: str
    line: int = Field(description="0 when the problem is about the file as a whole")
    field: str | None = Field(None, description="the field's path inside the file, when there is one")
    message: str
    text: str = Field(description="the problem as `validate` prints it: file:line field: message")


class AppStateOut(BaseModel):
    app_version: str = Field(description="short hash of the YAML and hook files being served")
    loaded_at: str = Field(description="when that version was loaded (UTC)")
    checked_at: str = Field(description="when the files were last read (UTC)")
    errors: list[AppProblemOut] = Field(
        description="why the files as they are now are not served (those in the files of what the caller may "
        "use: its assistants' folders and hooks, its connectors); empty when they are"
    )
    other_errors: int = Field(description="problems in other files (the server log and `yao-agent validate` show them)")


class ModelOut(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelsOut(BaseModel):
    object: Literal["list"]
    data: list[ModelOut]


class AnswerOut(BaseModel):
    role: Literal["assistant"]
    content: str
    reasoning_content: str | None = None


class ChoiceOut(BaseModel):
    index: int
    message: AnswerOut
    finish_reason: Literal["stop", "length"] = Field(description="length: a limit (max_turns) cut the run short")


class CompletionOut(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: dict[str, int]


WHY = {
    400: "invalid input: malformed JSON, a wrong type, a value out of range, an unknown field",
    401: "no valid bearer token (checked before the body is read)",
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


def answers(model: type[BaseModel], *errors: int, stream: str | None = None) -> dict[int | str, dict[str, Any]]:
    """A route's `responses`: its 200 (JSON, and an event stream when it streams), then its error statuses."""
    ok: dict[str, Any] = {"model": model}
    if stream is not None:
        ok["content"] = {"text/event-stream": {"schema": {"type": "string", "description": stream}}}
    declared: dict[int | str, dict[str, Any]] = {200: ok}
    body_limits = (408,) if 413 in errors else ()  # a route that reads a body may also wait too long for it
    for status in (*errors, *body_limits, 503, 500):
        declared[status] = {"model": ErrorBody, "description": WHY[status]}
    return declared


def install(app: FastAPI) -> None:
    """The app's document, without FastAPI's 422 that no route returns."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document
