"""Which engine serves a connector, and the endpoint details it needs, resolved from `$ENV` at call time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from yao_agent.connectors.classify import model_error
from yao_agent.dsl.envvars import resolve_env
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import EnvVarMissing

# Providers that speak OpenAI's chat-completions API at a known address. A connector of one of
# these types goes through the `openai` SDK directly; any `type: openai` with a `base_url` does too.
OPENAI_COMPATIBLE: Mapping[str, str] = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "groq": "https://api.groq.com/openai/v1",
    "together_ai": "https://api.together.xyz/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "mistral": "https://api.mistral.ai/v1",
    "xai": "https://api.x.ai/v1",
}
# The environment variable each provider's SDK would read when a connector names no api_key.
DEFAULT_KEY_VARIABLE: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "groq": "GROQ_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "xai": "XAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "cohere": "COHERE_API_KEY",
}


def engine_for(connector: ConnectorSpec) -> str:
    """`scripted` for the offline scripts, `local` for the embedder inside this process, `openai` for
    OpenAI-compatible providers (the SDK directly), `litellm` for the rest."""
    if connector.scripted:
        return "scripted"  # no provider behind it: its own engine, which imports no model SDK
    if connector.local:
        return "local"  # no provider either: weights shipped in a package, run here
    if connector.engine != "auto":
        return connector.engine
    return "openai" if connector.type in OPENAI_COMPATIBLE else "litellm"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A connector's resolved address and credentials. Never logged: `secrets` are scrubbed from errors."""

    api_key: str | None
    base_url: str | None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(v for v in (self.api_key, *self.headers.values()) if v)


def resolve_endpoint(connector: ConnectorSpec, environ: Mapping[str, str] | None = None) -> Endpoint:
    """Resolve `$ENV` values now, when the connector is about to be called.

    A missing variable becomes a `config` ModelError naming it, so a fallback chain can move on.
    """
    try:
        base_url = connector.base_url.resolve(environ) if connector.base_url else None
        api_key = connector.api_key.resolve(environ) if connector.api_key else _default_key(connector, environ)
        headers = {k: v.resolve(environ) for k, v in connector.headers.items()}
    except EnvVarMissing as exc:
        raise model_error("config", connector.id, str(exc)) from None
    if base_url is None and connector.type in OPENAI_COMPATIBLE and engine_for(connector) == "openai":
        base_url = OPENAI_COMPATIBLE[connector.type]
    if api_key is None and base_url is not None:
        api_key = "not-needed"  # local OpenAI-compatible servers ignore it; the SDK insists on one
    return Endpoint(api_key=api_key, base_url=base_url, headers=headers)


def _default_key(connector: ConnectorSpec, environ: Mapping[str, str] | None) -> str | None:
    if connector.base_url is not None or connector.scripted:
        return None
    variable = DEFAULT_KEY_VARIABLE.get(connector.type)
    if variable is None:
        return None
    return resolve_env(f"$ENV.{variable}", f"{connector.file} (default key for type: {connector.type})", environ)
