"""The JSON the HTTP API answers with: one TypedDict per shape, defined here once.

Each shape is both the type its builder returns (the `to_api` methods, the routes' own answers: pyright
holds them to it, key by key) and what the OpenAPI document declares (server/schemas.py reads these
classes; a field's docstring is its description there). A field that may be left out is `NotRequired`;
`X | None` is a field that is always there and may be null.

Below the server, the modules that build answers import these for type checking only (`TYPE_CHECKING`):
no command pays for describing what only the server documents. The events a run streams are events.py's.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict  # (pydantic reads a TypedDict of `typing` only from Python 3.12 on)

from yao_agent.vocabulary import EndStatus, MessageStatus, Role, RunStatus, StepStatus, StepType

# -- errors ------------------------------------------------------------------------------------------


class ErrorDetail(TypedDict):
    type: str
    """what went wrong: invalid_request, unauthorized, not_found, model_error, ..."""
    message: str
    """for a person to read; never a traceback"""
    code: str
    """for OpenAI clients: the type, or OpenAI's name for it"""
    param: NotRequired[str]
    """the request field at fault, when there is one"""


class ErrorBody(TypedDict):
    error: ErrorDetail


# -- messages ----------------------------------------------------------------------------------------


class ToolCallOut(TypedDict):
    id: str
    name: str
    arguments: str
    """JSON text, as the model wrote it"""


class DecisionOut(TypedDict):
    approved: bool
    by: str
    """the user who decided (or whose new message denied the call)"""
    at: str
    """ISO 8601, UTC"""
    reason: NotRequired[str]


class ReferenceOut(TypedDict):
    """One numbered result of a knowledge or web search, as a model was shown it and may cite it (`[n]`)."""

    n: int
    collection: str
    """the collection it was found in ('' for a web result)"""
    document_id: str
    title: str
    text: str
    score: float
    source: Literal["kb", "web"]
    heading: NotRequired[str]
    url: NotRequired[str]
    metadata: NotRequired[dict[str, str]]


class MessageOut(TypedDict):
    message_id: str
    run_id: str | None
    role: Role
    content: str | list[dict[str, Any]] | None
    tool_calls: NotRequired[list[ToolCallOut]]
    tool_call_id: NotRequired[str]
    reasoning: NotRequired[str]
    status: MessageStatus
    thread_id: NotRequired[str]
    summarises: NotRequired[list[str]]
    """a summary's first and last message ids: the earlier messages it stands for"""
    approval: NotRequired[DecisionOut]
    """a tool result's: what a person decided about the call"""
    connector: NotRequired[str]
    """an assistant message's: the connector that answered"""
    model: NotRequired[str | None]
    """an assistant message's: the model that answered"""
    references: NotRequired[list[ReferenceOut]]
    """an assistant message's: what the search step found for it, numbered as it may cite them"""
    citations: NotRequired[list[int]]
    """an assistant message's: the reference numbers its text cites"""
    unknown_citations: NotRequired[list[int]]
    """an assistant message's: numbers its text cites that match no reference"""
    replaced_by: NotRequired[str]
    """an earlier version's (listed with `?versions=true` only): the run, a regeneration or an edit, that
    replaced it; a current message has no such field"""
    continues: NotRequired[str]
    """an assistant message a resume made by continuing a reply cut off before: that (incomplete) reply's id;
    its content is the cut reply's text and what followed"""
    created_at: str
    """ISO 8601, UTC"""


class MessagesOut(TypedDict):
    chat_id: str
    messages: list[MessageOut]


# -- runs --------------------------------------------------------------------------------------------


class UsageOut(TypedDict):
    """What a run used, its child runs included."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None
    """USD; null when a call's price is unknown"""
    calls: int
    """model calls"""


class ApprovalOut(TypedDict):
    tool_call_id: str
    server: str
    tool: str
    arguments: Any


class ClientWaitOut(TypedDict):
    """A call of a tool the client brought, which the run waits for the client to run."""

    tool_call_id: str
    name: str
    arguments: Any
    """the JSON object the model wrote (its very text when it wrote none)"""


class ApprovalsOut(TypedDict):
    chat_id: str
    run_id: str
    """the run that waits"""
    approvals: list[ApprovalOut]


class RunOut(TypedDict):
    """A finished run (`?stream=false`), whatever its end: its status and reason say how it ended."""

    run_id: str
    chat_id: str
    status: EndStatus
    reason: str
    """the terminal reason: completed, cancelled, max_turns, model_error, ..."""
    messages: list[MessageOut]
    """the run's new messages"""
    next: NotRequired[Any]
    """a Next hook's data"""
    error: NotRequired[Any]
    """why it failed (for hooks: file, line, message)"""
    output: NotRequired[Any]
    """the final answer's JSON value, for an assistant with an output schema"""
    approvals: NotRequired[list[ApprovalOut]]
    """the calls waiting for a person (status waiting)"""
    client_calls: NotRequired[list[ClientWaitOut]]
    """the calls waiting for the client to run its own tools (status waiting, reason client_tools)"""
    usage: UsageOut


class CancelOut(TypedDict):
    cancelled: int
    """how many runs (the active one and those queued before) were cancelled, here and in the process running
    the chat (several servers on one database)"""


class AppendOut(TypedDict):
    run_id: str
    """the run the messages were added to"""


class StepOut(TypedDict):
    type: StepType
    status: StepStatus
    error: NotRequired[Any]


class ResumePointOut(TypedDict):
    run_id: str
    status: Literal["failed", "interrupted", "cancelled", "waiting"]
    """waiting: a run whose calls were all decided, not yet continued"""
    reason: str | None
    error: NotRequired[Any]
    steps: list[StepOut]


class CallUsageOut(TypedDict):
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    estimated: NotRequired[bool]
    """counted here: the call was cut off before the provider said"""


class RunStepOut(TypedDict):
    seq: int
    type: StepType
    status: StepStatus
    transition: NotRequired[str]
    """an llm step's: why it was made (first, tool_results, ...)"""
    thread_id: NotRequired[str]
    """the delegated assistant's thread a step ran in"""
    connector: NotRequired[str]
    """an llm step's: the connector that answered (a failed try's: the one that failed)"""
    model: NotRequired[str]
    usage: NotRequired[CallUsageOut]
    """an llm step's tokens and cost"""
    fallbacks: NotRequired[list[dict[str, str]]]
    """an llm step's: the links of its chain it passed, each {from, to, reason}"""
    error: NotRequired[Any]
    """a failed try's: {connector, model, kind, message}"""
    started_at: str
    """ISO 8601, UTC"""
    duration_ms: int | None


class RunViewOut(TypedDict):
    """One run of a chat, with every step it took."""

    run_id: str
    chat_id: str
    assistant_id: str
    status: RunStatus
    reason: str | None
    error: NotRequired[Any]
    usage: UsageOut | dict[str, Any]
    """a run that has not ended has used nothing yet: {}"""
    resumed_from: str | None
    """the run this one resumed"""
    started_at: str
    """ISO 8601, UTC"""
    ended_at: str | None
    duration_ms: int | None
    app_version: str | None
    """the app's files the run started with"""
    steps: list[RunStepOut]


# -- chats -------------------------------------------------------------------------------------------


class ChatOut(TypedDict):
    chat_id: str
    assistant_id: str
    title: str
    updated_at: str
    last_status: RunStatus


class ChatsOut(TypedDict):
    chats: list[ChatOut]


class DeletedOut(TypedDict):
    chat_id: str
    deleted: Literal[True]


# -- assistants and roles ----------------------------------------------------------------------------


class AssistantOut(TypedDict):
    id: str
    name: str
    description: str


class AssistantsOut(TypedDict):
    assistants: list[AssistantOut]


class RoleOut(TypedDict):
    role: str
    scope: str
    """team:<id>, or user:<id> for a caller without a team"""
    connectors: list[str]


class RoleSettingOut(TypedDict):
    role: str
    connectors: list[str]
    """the connector ids, a fallback chain in order"""
    updated_at: str
    """ISO 8601, UTC"""


class AppRoleOut(TypedDict):
    role: str
    connectors: list[str]


class RolesOut(TypedDict):
    scope: str
    """team:<id>, or user:<id> for a caller without a team"""
    roles: list[RoleSettingOut]
    """the scope's own mappings; each wins over app.yml's"""
    app_roles: list[AppRoleOut]
    """app.yml's mappings, for the roles the scope does not map"""


class RoleDeletedOut(TypedDict):
    role: str
    scope: str
    deleted: Literal[True]


# -- usage and budgets -------------------------------------------------------------------------------


class UsageScopeOut(TypedDict):
    team_id: NotRequired[str]
    """absent for a caller without a team (and for the whole deployment's report)"""
    user_id: NotRequired[str]
    """absent when the report is the whole team's (or the whole deployment's)"""


class UsageTotalOut(TypedDict):
    runs: int
    """runs with model calls (a child run's count as its root's)"""
    input_tokens: int
    output_tokens: int
    cost_usd: float
    """USD, the calls whose price is known"""
    unpriced_tokens: int
    """tokens of the calls whose price is unknown (not in cost_usd)"""


class UsageRowOut(UsageTotalOut):
    """One row of a report: what its `key` used, counted as in the report's `total`."""

    key: str
    """the day (YYYY-MM-DD, UTC), assistant id, connector id, user id or team id ("" for the users without
    a team)"""


# `from` is a Python keyword: the two days are declared in the functional form, and described below.
_Span = TypedDict("_Span", {"from": str, "to": str})


class UsageReportOut(_Span):
    """Usage and cost over a span of days: `from` the first day (YYYY-MM-DD), `to` the last, included."""

    scope: UsageScopeOut
    by: Literal["day", "assistant", "connector", "user", "team"]
    rows: list[UsageRowOut]
    total: UsageTotalOut
    """the whole span (a run in several rows counts once)"""


class BudgetOut(TypedDict):
    scope: Literal["team", "user"]
    id: str
    """the team id, or user@team (the user id alone without a team)"""
    window: Literal["per_day", "per_month"]
    budget_usd: float | None
    """the budget that binds: the lower of the ceiling and the team admin's budget; null: no budget in this
    window"""
    source: Literal["app.yml", "operator", "admin"]
    """what sets it: app.yml's default, the operator's ceiling, or a team admin's budget under it"""
    ceiling_usd: float | None
    """the operator's ceiling (app.yml's, unless the operator set the scope's own): a team admin sets the
    budget at or below it; null: none"""
    ceiling_source: Literal["app.yml", "operator"]
    admin_usd: float | None
    """a team admin's budget, null when none is set"""
    spent_usd: float
    """spent in the current window (calls of unknown price are not counted)"""
    remaining_usd: float | None
    since: str
    """the current window's start, ISO 8601, UTC"""
    resets_at: str
    """the next window's start, ISO 8601, UTC"""


class BudgetsOut(TypedDict):
    """The budgets that hold the scope's runs: its team's and its user's, each window."""

    scope: UsageScopeOut
    budgets: list[BudgetOut]


# -- tokens ------------------------------------------------------------------------------------------


class TokenBase(TypedDict):
    """What a token's listing and its making both say of it: never its secret's hash."""

    id: str
    """its public id (for DELETE /api/tokens/{id}); nothing of the secret"""
    user_id: str
    team_id: str | None
    kind: Literal["member", "admin", "operator"]
    admin: bool
    """a team admin's token"""
    label: str
    created_at: str
    """ISO 8601, UTC, as every time below"""
    expires_at: str | None
    """null: it never expires"""


class TokenOut(TokenBase):
    """An API token as it is listed: never its secret."""

    last_used_at: str | None
    """noted at most once a minute; null: never used"""
    expired: bool


class TokensOut(TypedDict):
    tokens: list[TokenOut]
    """oldest first; revoked tokens are not listed"""


class TokenMadeOut(TokenBase):
    """A token just made. `token` is its secret, shown this once: only its hash is stored."""

    token: str


class TokenRevokedOut(TypedDict):
    id: str
    revoked: Literal[True]


# -- the audit log -----------------------------------------------------------------------------------


class AuditActorOut(TypedDict):
    user_id: str | None
    """null: the CLI, or the deployment itself (a reload, the app's collections declared)"""
    team_id: str | None
    kind: Literal["member", "admin", "operator", "cli", "oidc"]


class AuditRowOut(TypedDict):
    """One change: who made it, what it changed, and what that was before and after (secrets never shown)."""

    id: int
    """the row's place in the chain, from 1, without a gap"""
    at: str
    """ISO 8601, UTC"""
    actor: AuditActorOut
    action: str
    """e.g. token.create, role.set, budget.set, kb.document.add, approval.decide, app.reload"""
    target: str
    """what changed, e.g. role/team/acme/default, kb/acme:policies/doc_1, token/ya_1a2b3c4d5"""
    before: Any
    """what it was (null: nothing, or not told)"""
    after: Any
    """what it is now (null: nothing, it was removed)"""
    hash: str
    """sha256 of the row's canonical JSON with prev_hash"""
    prev_hash: str
    """the hash of the row before ('' for the first)"""


class AuditOut(TypedDict):
    """The caller's rows, newest first."""

    rows: list[AuditRowOut]


# -- the server itself -------------------------------------------------------------------------------


class HealthOut(TypedDict):
    status: Literal["ok"]


class ReadyOut(TypedDict):
    status: Literal["ready"]
    app_version: str


class AppProblemOut(TypedDict):
    file: str
    line: int
    """0 when the problem is about the file as a whole"""
    field: NotRequired[str]
    """the field's path inside the file, when there is one"""
    message: str
    text: str
    """the problem as `validate` prints it: file:line field: message"""


class AppStateOut(TypedDict):
    app_version: str
    """short hash of the YAML and hook files being served"""
    loaded_at: str
    """when that version was loaded (UTC)"""
    checked_at: str
    """when the files were last read (UTC)"""
    errors: list[AppProblemOut]
    """why the files as they are now are not served (those in the files of what the caller may use: its
    assistants' folders and hooks, its connectors); empty when they are"""
    other_errors: int
    """problems in other files (the server log and `yao-agent validate` show them)"""


# -- the OpenAI-compatible API -----------------------------------------------------------------------


class ModelOut(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelsOut(TypedDict):
    object: Literal["list"]
    data: list[ModelOut]


class FunctionCallOut(TypedDict):
    name: str
    arguments: str


class ClientCallOut(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCallOut


class AnswerOut(TypedDict):
    role: Literal["assistant"]
    content: str | None
    """null only beside `tool_calls`, when the model said nothing with them"""
    reasoning_content: NotRequired[str]
    tool_calls: NotRequired[list[ClientCallOut]]
    """calls of the client's own tools, for the client to run"""


class ChoiceOut(TypedDict):
    index: int
    message: AnswerOut
    finish_reason: Literal["stop", "length", "tool_calls"]
    """length: a limit (max_turns) cut the run short; tool_calls: the client is to run `tool_calls`"""


class CompletionUsageOut(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionOut(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: CompletionUsageOut


# -- knowledge (CONTRACT §9.1) -----------------------------------------------------------------------


class CollectionOut(TypedDict):
    id: str
    name: str
    team_id: str | None
    """the owning team's id; null for the app's collections"""
    origin: Literal["app", "team"]
    embedding: str | None
    """the connector id or use::<role> that embeds it; null: full text only"""
    documents: int
    chunks: int


class CollectionsOut(TypedDict):
    data: list[CollectionOut]


class DocumentOut(TypedDict):
    id: str
    collection: str
    title: str
    source: str
    """a synced file's path, upload:<name> for an uploaded file, empty for text given as JSON"""
    content_hash: str
    metadata: dict[str, str]
    chunks: int
    created_at: str
    updated_at: str


class DocumentsOut(TypedDict):
    data: list[DocumentOut]


class AddedOut(TypedDict):
    document: DocumentOut
    unchanged: bool
    """the same content (and metadata) was there already: nothing was done"""
    embedded: int
    """chunks embedded now"""
    reused: int
    """chunks whose stored vectors were kept"""


class DocumentDeletedOut(TypedDict):
    id: str
    deleted: Literal[True]


class ReferencesOut(TypedDict):
    references: list[ReferenceOut]


class EmbeddingOut(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str
    """the vector; base64 of little-endian float32 when `encoding_format` was base64"""


class EmbeddingUsageOut(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsOut(TypedDict):
    object: Literal["list"]
    data: list[EmbeddingOut]
    model: str
    usage: EmbeddingUsageOut


# -- the Anthropic Messages API (CONTRACT §9.2) ------------------------------------------------------


class AnthropicErrorDetail(TypedDict):
    type: str
    """Anthropic's kind: invalid_request_error, authentication_error, permission_error, not_found_error,
    request_too_large, rate_limit_error, api_error, overloaded_error, timeout_error, conflict_error"""
    message: str
    """for a person to read; never a traceback"""
    details: NotRequired[dict[str, str]]
    """`error_code`: this server's own name for the error (chat_busy, budget_exceeded, model_error, ...)"""


class AnthropicErrorBody(TypedDict):
    type: Literal["error"]
    error: AnthropicErrorDetail


class TextBlockOut(TypedDict):
    type: Literal["text"]
    text: str


class ToolUseBlockOut(TypedDict):
    """A call of one of the client's own tools, for the client to run."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class MessageUsageOut(TypedDict):
    input_tokens: int
    output_tokens: int


class AnthropicMessageOut(TypedDict):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[TextBlockOut | ToolUseBlockOut]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
    """max_tokens: a limit (max_turns) cut the run short; tool_use: the client is to run the `tool_use` blocks"""
    stop_sequence: str | None
    usage: MessageUsageOut


# -- the OpenAI Responses API ----------------------------------------------------------------------


class OutputTextOut(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    """always empty"""


class OutputMessageOut(TypedDict):
    type: Literal["message"]
    id: str
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputTextOut]


class FunctionCallItemOut(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    """what the `function_call_output` answering it names"""
    name: str
    arguments: str
    """a JSON object, as text"""
    status: Literal["completed"]


class InputDetailsOut(TypedDict):
    cached_tokens: int


class OutputDetailsOut(TypedDict):
    reasoning_tokens: int


class ResponseUsageOut(TypedDict):
    input_tokens: int
    input_tokens_details: InputDetailsOut
    output_tokens: int
    output_tokens_details: OutputDetailsOut
    total_tokens: int


class ResponseErrorOut(TypedDict):
    code: str
    """the run's terminal reason (model_error, timeout, ...)"""
    message: str


class IncompleteOut(TypedDict):
    reason: str
    """why the run was cut short (max_turns)"""


class ResponseOut(TypedDict):
    id: str
    """resp_<run id>.<chat id>: the run, readable and continuable as soon as it ended"""
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    """the assistant id"""
    output: list[OutputMessageOut | FunctionCallItemOut]
    """the run's answers, one message each (a structured run's: its validated answer only), then the calls
    of the client's tools it waits for"""
    previous_response_id: str | None
    instructions: str | None
    usage: ResponseUsageOut
    error: ResponseErrorOut | None
    incomplete_details: IncompleteOut | None
    parallel_tool_calls: bool
    tool_choice: str | dict[str, Any]
    tools: list[Any]
    """the client's function tools, as given (the assistant's own run on the server, unlisted)"""
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    store: bool
    text: dict[str, Any]
    """the format asked for ({"format": {"type": "text"}} by default)"""
    metadata: dict[str, Any]
