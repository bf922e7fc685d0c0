"""The typed, validated form of an app's YAML files. Everything here is immutable."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from yao_agent.errors import NotFound, Problem
from yao_agent.vocabulary import OnBusy

from .envvars import EnvValue

ROLE_PREFIX = "use::"
DEFAULT_ROLE = "default"
DEFAULT_CONNECTOR = ROLE_PREFIX + DEFAULT_ROLE
DEFAULT_STORE = "sqlite:///.yao/agent.db"


@dataclass(frozen=True, slots=True)
class PromptSpec:
    role: Literal["system", "user", "assistant"]
    content: str  # a Jinja2 template, checked at load
    name: str | None = None
    origin: str = ""  # "file:line" of its content, for errors while rendering


@dataclass(frozen=True, slots=True)
class PerScope:
    """One number per kind of scope (a team, a user); None: no limit of that kind."""

    team: float | None = None
    user: float | None = None

    def of(self, kind: str) -> float | None:
        return self.team if kind == "team" else self.user


@dataclass(frozen=True, slots=True)
class Limits:
    max_turns: int = 10
    timeout_s: float = 300.0
    max_tool_retries: int = 3
    max_delegate_depth: int = 4
    max_output_continuations: int = 3  # a reply cut by the output limit is continued at most this often
    requests_per_minute: PerScope = PerScope()  # runs started per minute and scope (CONTRACT §8.2)
    tokens_per_minute: PerScope = PerScope()  # model tokens (in + out) per minute and scope

    @property
    def rate_limited(self) -> bool:
        return any(v is not None for r in (self.requests_per_minute, self.tokens_per_minute) for v in (r.team, r.user))


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Spend limits in USD for one scope: per calendar day and per calendar month (UTC); None: none."""

    per_day: float | None = None
    per_month: float | None = None


@dataclass(frozen=True, slots=True)
class Budgets:
    """`app.yml`'s `budgets`: the defaults for every team and every user (each may be set apart: §8.2)."""

    team: BudgetLimits = BudgetLimits()
    user: BudgetLimits = BudgetLimits()

    def of(self, kind: str) -> BudgetLimits:
        return self.team if kind == "team" else self.user


@dataclass(frozen=True, slots=True)
class OidcRole:
    """Who has a role (team admin, operator): a caller whose `claim` holds `value` (or a list of them that
    includes it)."""

    claim: str = "roles"
    value: str = "yao-admin"


@dataclass(frozen=True, slots=True)
class OidcSettings:
    """`server.oidc`: sign-in with an OpenID Connect identity provider, for the API and the web page."""

    issuer: str  # as the provider's tokens name it in `iss`; its discovery document is under it
    audience: str  # what the tokens' `aud` must hold
    client_id: str  # the page's client at the provider (authorization-code flow with PKCE)
    client_secret: EnvValue | None = None  # a confidential client's secret: only ever `$ENV.NAME`
    user_claim: str = "email"
    team_claim: str | None = "org"  # None: callers have no team
    admin: OidcRole | None = OidcRole()
    operator: OidcRole | None = None  # nobody is the operator by a sign-in unless this says who
    session_hours: float = 8.0  # how long the page's sign-in lasts


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """`yao-agent serve`'s settings: where it listens, and what one client may take of it."""

    host: str = "127.0.0.1"
    port: int = 8765
    max_body_bytes: int = 1 << 20
    max_upload_bytes: int = 20 << 20  # a document uploaded to a collection (POST .../documents)
    max_messages: int = 500  # per request: a run's input, an append
    header_timeout_s: float = 10.0  # for a whole request head, from the connection's opening or the head's first byte
    body_timeout_s: float = 30.0  # from a request's head to the end of its body
    keep_alive_s: float = 5.0  # an idle connection between two requests
    max_connections: int = 4096  # open at once; more are closed as they come
    max_requests: int = 2048  # in progress at once, streams included; more are a 503 (health checks never)
    cors_origins: tuple[str, ...] = ()  # origins whose pages may call the API from a browser (`*`: any); none
    oidc: OidcSettings | None = None  # sign-in with an identity provider besides the app's own tokens


GuardStage = Literal["input", "output", "tool_input", "tool_output"]
GUARD_STAGES: tuple[GuardStage, ...] = ("input", "output", "tool_input", "tool_output")
GuardKind = Literal["pii", "deny", "max_chars", "json_schema", "classifier", "hook"]
GUARD_KINDS: tuple[GuardKind, ...] = ("pii", "deny", "max_chars", "json_schema", "classifier", "hook")
GuardAction = Literal["mask", "block"]


@dataclass(frozen=True, slots=True)
class Classifier:
    """A model asked whether a text may pass: `with` (a connector or use::<role>), what to block, and how
    long it may take (longer counts as its failure: `on_error`)."""

    with_: str
    prompt: str
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class GuardCheck:
    """One guardrail check (CONTRACT §9.5), as `file`:`line` writes it."""

    kind: GuardKind
    action: GuardAction
    file: str
    line: int
    pii: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    max_chars: int = 0
    schema: Mapping[str, Any] | None = None
    classifier: Classifier | None = None
    hook: str | None = None  # as written, relative to the app root
    hook_path: Path | None = None


@dataclass(frozen=True, slots=True)
class Guardrails:
    """The checks of each stage; an assistant's are added to app.yml's (`over`)."""

    input: tuple[GuardCheck, ...] = ()
    output: tuple[GuardCheck, ...] = ()
    tool_input: tuple[GuardCheck, ...] = ()
    tool_output: tuple[GuardCheck, ...] = ()
    on_error: Literal["block", "allow"] | None = None  # None: as app.yml says (block by default)
    hold_back_chars: int | None = None  # None: as app.yml says (64 by default)

    def stage(self, stage: GuardStage) -> tuple[GuardCheck, ...]:
        return cast(tuple[GuardCheck, ...], getattr(self, stage))

    def over(self, base: Guardrails) -> Guardrails:
        """`base`'s checks, then these; this one's settings where it has them."""
        return Guardrails(
            *(base.stage(s) + self.stage(s) for s in GUARD_STAGES),
            on_error=self.on_error if self.on_error is not None else base.on_error,
            hold_back_chars=self.hold_back_chars if self.hold_back_chars is not None else base.hold_back_chars,
        )


@dataclass(frozen=True, slots=True)
class AppConfig:
    roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    store: str = DEFAULT_STORE
    history_size: int = 20
    prompts: tuple[PromptSpec, ...] = ()
    limits: Limits = Limits()
    server: ServerSettings = ServerSettings()
    budgets: Budgets = Budgets()
    guardrails: Guardrails = Guardrails()


@dataclass(frozen=True, slots=True)
class Pricing:
    """A connector's price in USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float


@dataclass(frozen=True, slots=True)
class Capabilities:
    tool_calls: bool = True
    vision: bool = False
    reasoning: bool = False
    structured_output: bool = True
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ScriptToolCall:
    name: str
    arguments: Mapping[str, Any]  # string values are Jinja2 templates


@dataclass(frozen=True, slots=True)
class ScriptRule:
    """One rule of a `type: scripted` connector: when `match` fits, answer this way."""

    line: int
    user: re.Pattern[str] | None = None
    role: str | None = None
    reply: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ScriptToolCall, ...] = ()
    error_status: int | None = None
    error_message: str = ""


def member(user_id: str, team_id: str | None) -> str:
    """How `access.users` names an identity: `team/user` for a member of a team, `user` for one without."""
    return f"{team_id}/{user_id}" if team_id is not None else user_id


@dataclass(frozen=True, slots=True)
class Access:
    """Who may use an assistant (list and run it) or a connector (name it in a role setting, and have runs
    call it through one). No `access` at all means public.

    A user id means something only with its team (two teams may each have a `bob`), so `users` entries
    are whole identities, as `member` writes them: `acme/bob` is bob of acme, a bare `bob` is the user
    bob without a team; `teams` admits every member of those teams. Neither id may contain `/`, so an
    entry names exactly one identity and a bare name never admits a member of any team.
    """

    public: bool = True
    teams: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()

    def allows(self, user_id: str, team_id: str | None) -> bool:
        if self.public:
            return True
        return member(user_id, team_id) in self.users or (team_id is not None and team_id in self.teams)

    def reaches(self, kind: str, owner: str) -> bool:
        """Whether anybody a role setting of this scope applies to may use it: some member of team
        `owner` (kind `team`), or the user `owner` without a team (kind `user`)."""
        if kind != "team":
            return self.allows(owner, None)
        return self.public or owner in self.teams or any(u.startswith(owner + "/") for u in self.users)


LOCAL_TYPE = "local"
LOCAL_MODELS = ("wordllama-256",)  # what `type: local` can run; the first is its default


@dataclass(frozen=True, slots=True)
class ConnectorSpec:
    id: str
    type: str
    file: str
    model: str = ""
    api_key: EnvValue | None = None
    base_url: EnvValue | None = None
    api_version: str | None = None
    headers: Mapping[str, EnvValue] = field(default_factory=dict[str, EnvValue])
    timeout_s: float = 60.0
    cooldown_s: float = 30.0
    engine: Literal["auto", "openai", "litellm"] = "auto"
    capabilities: Capabilities = Capabilities()
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    rules: tuple[ScriptRule, ...] = ()
    chunk_size: int = 4
    delay_ms: float = 0.0
    access: Access = Access()
    pricing: Pricing | None = None  # None: litellm's offline price map, where it knows the model

    @property
    def scripted(self) -> bool:
        return self.type == "scripted"

    @property
    def local(self) -> bool:
        """An embedder run in this process (`type: local`): it serves embeddings, never a chat."""
        return self.type == LOCAL_TYPE


APPROVE_ALL = "all"  # `approve: all`: every tool of the server waits for a person


@dataclass(frozen=True, slots=True)
class McpUse:
    """An assistant's use of one MCP server, optionally limited to some of its tools; `approve` names the
    tools whose every call waits for a person's approval (`all`: each of the server's tools)."""

    server: str
    tools: tuple[str, ...] | None = None
    approve: tuple[str, ...] = ()

    def needs_approval(self, tool: str) -> bool:
        return tool in self.approve or APPROVE_ALL in self.approve


@dataclass(frozen=True, slots=True)
class McpSettings:
    servers: tuple[McpUse, ...] = ()
    tool_loop: bool = True
    max_turns: int = 5


@dataclass(frozen=True, slots=True)
class HookPolicy:
    timeout_ms: int = 1000
    memory_mb: int = 64
    on_error: Literal["fail", "ignore"] = "fail"


@dataclass(frozen=True, slots=True)
class HookSource:
    """A hook file's text as the app version read and checked it. A version's runs compile this text (V8
    contexts are keyed by `digest`), never the file on disk, which may have changed since (CONTRACT §8.4)."""

    text: str = field(repr=False)
    digest: str

    @classmethod
    def of(cls, text: str) -> HookSource:
        return cls(text, hashlib.sha256(text.encode()).hexdigest())


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """An assistant's `output`: its final answer must be JSON valid against `schema` (checked at load to
    be a JSON Schema); an answer that is not is sent back to the model at most `retries` times."""

    schema: Mapping[str, Any]
    retries: int = 2


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """An assistant's `context` (CONTRACT §3.3, §4 item 5): how a request is kept inside the model's window.

    The budget is `max_input_tokens - reserve_output_tokens`; `max_input_tokens` None means the
    connector's `capabilities.max_input_tokens`, and with neither there is no budget. `summarize_with`
    is a connector id or `use::<role>`; None: the assistant's own connectors write summaries.
    """

    max_input_tokens: int | None = None
    reserve_output_tokens: int = 1024
    tool_result_max_tokens: int = 4000
    compact_at: float = 0.8
    keep_recent_turns: int = 4
    summarize_with: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    max_tokens: int = 400  # words, the approximation of tokens chunking uses
    overlap_tokens: int = 40


TEAM_COLLECTIONS = "team"  # in `search.knowledge`: every collection of the caller's team


@dataclass(frozen=True, slots=True)
class CollectionSpec:
    """An operator's collection, `knowledge/<path>.yml` (CONTRACT §9.1)."""

    id: str
    file: str
    name: str
    sources: tuple[str, ...] = ()  # relative to the app root, as written
    embedding: str | None = None  # a connector id or use::<role>; None: full text only
    chunk: ChunkSettings = ChunkSettings()
    access: Access = Access()


@dataclass(frozen=True, slots=True)
class WebSearch:
    server: str
    tool: str = "search"


SearchMode = Literal["always", "auto", "tool", "off"]


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """An assistant's `search`: which collections its runs search, and when."""

    knowledge: tuple[str, ...] = ()
    mode: SearchMode = "always"
    intent_with: str | None = None
    top_k: int = 6
    min_score: float = 0.0
    web: WebSearch | None = None
    cite: bool = True


@dataclass(frozen=True, slots=True)
class AssistantSpec:
    id: str
    name: str
    file: str
    description: str = ""
    connector: str = DEFAULT_CONNECTOR
    prompts: tuple[PromptSpec, ...] = ()
    prompt_presets: Mapping[str, tuple[PromptSpec, ...]] = field(default_factory=dict[str, tuple[PromptSpec, ...]])
    disable_global_prompts: bool = False
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    hook: str | None = None  # as written, relative to the app root
    hook_path: Path | None = None
    hook_source: HookSource | None = None  # the file's text as this version loaded it (None: read at each call)
    hook_policy: HookPolicy = HookPolicy()
    mcp: McpSettings = McpSettings()
    access: Access = Access()
    on_busy: OnBusy = "queue"
    context: ContextSettings = ContextSettings()
    output: OutputSpec | None = None
    search: SearchSettings | None = None
    guardrails: Guardrails = Guardrails()  # its own, added to app.yml's


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    id: str
    file: str
    transport: Literal["stdio", "http"] = "stdio"
    command: EnvValue | None = None
    args: tuple[EnvValue, ...] = ()
    env: Mapping[str, EnvValue] = field(default_factory=dict[str, EnvValue])
    cwd: Path | None = None
    url: EnvValue | None = None
    headers: Mapping[str, EnvValue] = field(default_factory=dict[str, EnvValue])
    timeout_s: float = 30.0

    @property
    def tool_prefix(self) -> str:
        """Tool names given to the model are `<prefix>__<tool>`."""
        return self.id.replace(".", "_")


@dataclass(frozen=True, slots=True)
class EvalCase:
    """One case of an eval file: the conversation it sends, and what the answer must show (each expectation
    a one-key mapping as written: `{"contains": "30 days"}`)."""

    name: str
    messages: tuple[Mapping[str, Any], ...]
    expect: tuple[Mapping[str, Any], ...]
    line: int  # where it is written, for the report to point at


@dataclass(frozen=True, slots=True)
class EvalSpec:
    """`evals/<path>.yml` (CONTRACT §9.4): cases an assistant must pass."""

    id: str
    file: str
    assistant: str
    cases: tuple[EvalCase, ...]
    judge_with: str | None = None
    repeat: int = 1
    concurrency: int = 4


@dataclass(frozen=True, slots=True)
class App:
    """A loaded, fully validated app."""

    root: Path
    config: AppConfig
    assistants: Mapping[str, AssistantSpec]
    connectors: Mapping[str, ConnectorSpec]
    mcps: Mapping[str, McpServerSpec]
    knowledge: Mapping[str, CollectionSpec] = field(default_factory=dict[str, CollectionSpec])
    evals: Mapping[str, EvalSpec] = field(default_factory=dict[str, EvalSpec])
    warnings: tuple[Problem, ...] = ()
    version: str = ""  # a short hash of the files it was loaded from (YAML and hooks): what a run ran with

    def assistant(self, assistant_id: str) -> AssistantSpec:
        try:
            return self.assistants[assistant_id]
        except KeyError:
            known = ", ".join(sorted(self.assistants)) or "none"
            raise NotFound(f"unknown assistant '{assistant_id}' (known: {known})") from None

    def assistants_for(self, user_id: str, team_id: str | None) -> list[str]:
        """The ids of the assistants whose `access` admits this caller."""
        return [a.id for a in self.assistants.values() if a.access.allows(user_id, team_id)]

    def connectors_for(self, user_id: str, team_id: str | None) -> list[str]:
        """The ids of the connectors whose `access` admits this caller."""
        return [c.id for c in self.connectors.values() if c.access.allows(user_id, team_id)]
