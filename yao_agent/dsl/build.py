"""Valid YAML values → typed specs.

Only files without problems get here (schema and `checks` passed), so shapes, types, regexes
and templates are known to be right and this module only converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from .checks import author_regex
from .envvars import EnvValue
from .guardrails import build_guardrails
from .knowledge import build_search
from .source import Document, format_path
from .source import Path as YamlPath
from .specs import (
    DEFAULT_CONNECTOR,
    DEFAULT_STORE,
    LOCAL_MODELS,
    LOCAL_TYPE,
    Access,
    AppConfig,
    AssistantSpec,
    BudgetLimits,
    Budgets,
    Capabilities,
    ConnectorSpec,
    ContextSettings,
    HookPolicy,
    Limits,
    McpServerSpec,
    McpSettings,
    McpUse,
    OidcRole,
    OidcSettings,
    OutputSpec,
    PerScope,
    Pricing,
    PromptSpec,
    ScriptRule,
    ScriptToolCall,
    ServerSettings,
)

Data = Mapping[str, Any]


def _prompts(doc: Document, path: YamlPath, items: list[Data]) -> tuple[PromptSpec, ...]:
    return tuple(
        PromptSpec(role=i["role"], content=i["content"], name=i.get("name"),
                   origin=f"{doc.file}:{doc.line((*path, n, 'content'))}")
        for n, i in enumerate(items)
    )  # fmt: skip


def _env(doc: Document, path: YamlPath, value: str, *, secret: bool = False) -> EnvValue:
    return EnvValue(value, f"{doc.file}:{doc.line(path)} {format_path(path)}", secret=secret)


def _env_map(doc: Document, path: YamlPath, values: Data, *, secret: bool) -> dict[str, EnvValue]:
    return {key: _env(doc, (*path, key), value, secret=secret) for key, value in values.items()}


def _optional_env(doc: Document, data: Data, key: str, *, secret: bool = False) -> EnvValue | None:
    return _env(doc, (key,), data[key], secret=secret) if key in data else None


def build_app_config(doc: Document, root: Path) -> AppConfig:
    data: Data = doc.value or {}
    roles = {
        name: (value,) if isinstance(value, str) else tuple(cast(list[str], value))
        for name, value in cast(Data, data.get("roles", {})).items()
    }
    limits: Data = data.get("limits", {})
    defaults = Limits()
    return AppConfig(
        roles=roles,
        store=data.get("store", DEFAULT_STORE),
        history_size=data.get("history_size", 20),
        prompts=_prompts(doc, ("prompts",), data.get("prompts", [])),
        limits=Limits(
            max_turns=limits.get("max_turns", defaults.max_turns),
            timeout_s=float(limits.get("timeout_s", defaults.timeout_s)),
            max_tool_retries=limits.get("max_tool_retries", defaults.max_tool_retries),
            max_delegate_depth=limits.get("max_delegate_depth", defaults.max_delegate_depth),
            max_output_continuations=limits.get("max_output_continuations", defaults.max_output_continuations),
            requests_per_minute=PerScope(**cast(Data, limits.get("requests_per_minute", {}))),
            tokens_per_minute=PerScope(**cast(Data, limits.get("tokens_per_minute", {}))),
        ),
        server=_server(doc, cast(Data, data.get("server", {}))),
        budgets=_budgets(cast(Data, data.get("budgets", {}))),
        guardrails=build_guardrails(doc, data.get("guardrails"), root),
    )


def _server(doc: Document, data: Data) -> ServerSettings:
    settings: dict[str, Any] = dict(data)
    settings["cors_origins"] = tuple(str(o) for o in cast(list[Any], data.get("cors_origins", [])))
    if data.get("oidc") is not None:
        settings["oidc"] = _oidc(doc, cast(Data, data["oidc"]))
    return ServerSettings(**settings)


def _oidc(doc: Document, data: Data) -> OidcSettings:
    where = ("server", "oidc", "client_secret")
    secret = _env(doc, where, data["client_secret"], secret=True) if "client_secret" in data else None
    admin = cast(Data | None, data.get("admin", {}))
    operator = cast(Data | None, data.get("operator"))
    return OidcSettings(
        issuer=str(data["issuer"]).rstrip("/"),
        audience=data["audience"],
        client_id=data["client_id"],
        client_secret=secret,
        user_claim=data.get("user_claim", "email"),
        team_claim=data.get("team_claim", "org"),
        admin=OidcRole(**admin) if admin is not None else None,
        operator=OidcRole(**operator) if operator is not None else None,
        session_hours=float(data.get("session_hours", 8)),
    )


def _budgets(data: Data) -> Budgets:
    return Budgets(**{kind: BudgetLimits(**cast(Data, data[kind])) for kind in ("team", "user") if data.get(kind)})


def build_connector(connector_id: str, doc: Document) -> ConnectorSpec:
    data: Data = doc.value
    default_model = {"scripted": "scripted", LOCAL_TYPE: LOCAL_MODELS[0]}.get(data["type"], "")
    return ConnectorSpec(
        id=connector_id,
        type=data["type"],
        file=doc.file,
        model=data.get("model", default_model),
        api_key=_optional_env(doc, data, "api_key", secret=True),
        base_url=_optional_env(doc, data, "base_url"),
        api_version=data.get("api_version"),
        headers=_env_map(doc, ("headers",), data.get("headers", {}), secret=True),
        timeout_s=float(data.get("timeout_s", 60.0)),
        cooldown_s=float(data.get("cooldown_s", 30.0)),
        engine=data.get("engine", "auto"),
        capabilities=Capabilities(**cast(Data, data.get("capabilities", {}))),
        options=dict(cast(Data, data.get("options", {}))),
        rules=tuple(_rule(doc.line(("rules", i)), r) for i, r in enumerate(data.get("rules", []))),
        chunk_size=data.get("chunk_size", 4),
        delay_ms=float(data.get("delay_ms", 0)),
        access=build_access(cast(Data | None, data.get("access"))),
        pricing=Pricing(**cast(Data, data["pricing"])) if data.get("pricing") else None,
    )


def _rule(line: int, data: Data) -> ScriptRule:
    match: Data = data.get("match", {})
    error: Data = data.get("error", {})
    return ScriptRule(
        line=line,
        user=author_regex(match["user"]) if "user" in match else None,
        role=match.get("role"),
        reply=data.get("reply"),
        reasoning=data.get("reasoning"),
        tool_calls=tuple(ScriptToolCall(c["name"], c.get("arguments", {})) for c in data.get("tool_calls", [])),
        error_status=error.get("status"),
        error_message=error.get("message", ""),
    )


def build_assistant(assistant_id: str, doc: Document, root: Path) -> AssistantSpec:
    data: Data = doc.value
    hook: str | None = data.get("hook")
    return AssistantSpec(
        id=assistant_id,
        name=data["name"],
        file=doc.file,
        description=data.get("description", ""),
        connector=data.get("connector", DEFAULT_CONNECTOR),
        prompts=_prompts(doc, ("prompts",), data.get("prompts", [])),
        prompt_presets={
            k: _prompts(doc, ("prompt_presets", k), v) for k, v in cast(Data, data.get("prompt_presets", {})).items()
        },
        disable_global_prompts=data.get("disable_global_prompts", False),
        options=dict(cast(Data, data.get("options", {}))),
        hook=hook,
        hook_path=(root / hook) if hook else None,
        hook_policy=HookPolicy(**cast(Data, data.get("hook_policy", {}))),
        mcp=_mcp_settings(cast(Data, data.get("mcp", {}))),
        access=build_access(cast(Data | None, data.get("access"))),
        on_busy=data.get("on_busy", "queue"),
        context=_context(cast(Data, data.get("context", {}))),
        output=_output(cast(Data | None, data.get("output"))),
        search=build_search(cast(Data | None, data.get("search"))),
        guardrails=build_guardrails(doc, data.get("guardrails"), root),
    )


def _output(data: Data | None) -> OutputSpec | None:
    if data is None:
        return None
    return OutputSpec(schema=dict(cast(Data, data["schema"])), retries=data.get("retries", 2))


def _context(data: Data) -> ContextSettings:
    defaults = ContextSettings()
    return ContextSettings(
        max_input_tokens=data.get("max_input_tokens"),
        reserve_output_tokens=data.get("reserve_output_tokens", defaults.reserve_output_tokens),
        tool_result_max_tokens=data.get("tool_result_max_tokens", defaults.tool_result_max_tokens),
        compact_at=float(data.get("compact_at", defaults.compact_at)),
        keep_recent_turns=data.get("keep_recent_turns", defaults.keep_recent_turns),
        summarize_with=data.get("summarize_with"),
    )


def _mcp_settings(data: Data) -> McpSettings:
    servers: list[McpUse] = []
    for item in cast(list[Any], data.get("servers", [])):
        if isinstance(item, str):
            servers.append(McpUse(item))
        else:
            entry = cast(Data, item)
            tools, approve = entry.get("tools"), entry.get("approve", [])
            approve = [approve] if isinstance(approve, str) else approve  # `approve: all`
            servers.append(McpUse(entry["server"], tuple(tools) if tools is not None else None, tuple(approve)))
    return McpSettings(
        servers=tuple(servers), tool_loop=data.get("tool_loop", True), max_turns=data.get("max_turns", 5)
    )


def build_access(data: Data | None) -> Access:
    """No `access`: public. Given, it admits whom it lists and nobody else unless `public: true` (a list
    left empty never opens it to everyone; `checks` refuses an `access` that admits nobody)."""
    if data is None:
        return Access()
    teams = frozenset(cast(list[str], data.get("teams", [])))
    users = frozenset(cast(list[str], data.get("users", [])))
    return Access(public=data.get("public", False), teams=teams, users=users)


def build_mcp(server_id: str, doc: Document, root: Path) -> McpServerSpec:
    data: Data = doc.value
    return McpServerSpec(
        id=server_id,
        file=doc.file,
        transport=data.get("transport", "stdio"),
        command=_optional_env(doc, data, "command"),
        args=tuple(_env(doc, ("args", i), a) for i, a in enumerate(data.get("args", []))),
        env=_env_map(doc, ("env",), data.get("env", {}), secret=True),
        cwd=(root / data["cwd"]) if "cwd" in data else None,
        url=_optional_env(doc, data, "url"),
        headers=_env_map(doc, ("headers",), data.get("headers", {}), secret=True),
        timeout_s=float(data.get("timeout_s", 30.0)),
    )
