"""The `litellm` engine: every provider that does not speak OpenAI's API.

Imported only when such a connector is first called: litellm takes seconds to import. The package
sets LITELLM_LOCAL_MODEL_COST_MAP / LITELLM_OFFLINE_MODE before that, so the import opens no socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import litellm
import openai
from litellm import exceptions as llm_errors

from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.deltas import Delta, Embedded, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.openai_engine import call_params, embeddings_answer
from yao_agent.connectors.providers import Endpoint, resolve_endpoint
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

litellm.suppress_debug_info = True
# We own the retry policy. An embedding call takes `max_retries=0` for "use the default" (two retries),
# so the default itself is none: every call here passes its own count anyway.
litellm.DEFAULT_MAX_RETRIES = 0  # pyright: ignore[reportPrivateImportUsage]


class LiteLLMEngine:
    name = "litellm"

    async def aclose(self) -> None:
        return None

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        endpoint = resolve_endpoint(connector, environ)
        params = self.params(connector, request, endpoint)
        try:
            upstream: Any = await litellm.acompletion(**params)
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint, started=False) from None
        started = False
        try:
            async for chunk in upstream:
                for delta in chunk_deltas(chunk):
                    started = started or not isinstance(delta, Usage | Finish)
                    yield delta
                if _usage_sent(upstream):
                    break
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint, started=started) from None
        finally:
            await upstream.aclose()  # also on cancellation: the provider sees the connection go

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        endpoint = resolve_endpoint(connector, environ)
        params = _endpoint_params(connector, endpoint)
        try:
            answer: Any = await litellm.aembedding(input=list(texts), **params)
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint, started=False) from None
        try:
            return embeddings_answer(connector, answer.model_dump(), len(texts))
        except ValueError as exc:
            raise model_error("server", connector.id, str(exc), secrets=endpoint.secrets) from None

    def params(self, connector: ConnectorSpec, request: ModelRequest, endpoint: Endpoint) -> dict[str, Any]:
        params = call_params(connector, request)
        params.update(_endpoint_params(connector, endpoint))
        params.update(stream=True, stream_options={"include_usage": True}, drop_params=True)
        return params


def _endpoint_params(connector: ConnectorSpec, endpoint: Endpoint) -> dict[str, Any]:
    """What every call to this connector names: the model, where it is, its key, its time; no SDK retries."""
    params: dict[str, Any] = {"model": f"{connector.type}/{connector.model}", "max_retries": 0}
    params.update(api_key=endpoint.api_key, api_base=endpoint.base_url, timeout=connector.timeout_s)
    if connector.api_version:
        params["api_version"] = connector.api_version
    if endpoint.headers:
        params["extra_headers"] = dict(endpoint.headers)
    return params


def _usage_sent(upstream: Any) -> bool:
    """Whether litellm has handed over the reply's usage, which it does only once the provider's stream
    has ended: asking for more would then only assemble the whole reply a second time and run its
    success logging (cost calculation, logging payload, thread hand-offs) — a quarter of a call's CPU,
    for callbacks this process never registers. Closing the stream instead ends the call."""
    return getattr(upstream, "sent_stream_usage", False) is True


def chunk_deltas(chunk: Any) -> list[Delta]:
    out: list[Delta] = []
    for choice in chunk.choices:
        delta = choice.delta
        reasoning = _field(delta, "reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out.append(ReasoningDelta(reasoning))
        content = _field(delta, "content")
        if content:
            out.append(TextDelta(content))
        for call in _field(delta, "tool_calls") or ():
            function = call.function
            out.append(ToolCallDelta(call.index, call.id, function.name, function.arguments or ""))
        if choice.finish_reason:
            out.append(Finish(choice.finish_reason))
    usage = _field(chunk, "usage")
    if usage is not None:
        out.append(Usage.of(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens))
    return out


_ABSENT = object()


def _field(model: Any, name: str) -> Any:
    """A pydantic model's field or extra, None if it has neither.

    litellm's chunks keep most of a delta in pydantic's extras and delete fields that are None; plain
    `getattr` finds neither without pydantic's slow path (an exception inside for every absent one),
    which cost more per streamed call than the rest of our engine.
    """
    value = model.__dict__.get(name, _ABSENT)
    if value is _ABSENT:
        extra = getattr(model, "__pydantic_extra__", None)
        value = extra.get(name) if extra else None
    return value


def _classify(exc: openai.APIError, connector: ConnectorSpec, endpoint: Endpoint, *, started: bool) -> ModelError:
    secrets = endpoint.secrets
    if started:
        return model_error("incomplete", connector.id, _message(exc), secrets=secrets)
    original = getattr(exc, "original_exception", None)  # MidStreamFallbackError wraps what happened
    if isinstance(original, openai.APIError) and not isinstance(exc, llm_errors.Timeout):
        exc = original
    if isinstance(exc, llm_errors.Timeout | openai.APITimeoutError):
        return model_error("timeout", connector.id, f"no answer within {connector.timeout_s:g} s")
    if isinstance(exc, llm_errors.ContextWindowExceededError):
        return model_error("context_overflow", connector.id, _message(exc), status=400, secrets=secrets)
    status = getattr(exc, "status_code", None)
    if isinstance(exc, llm_errors.APIConnectionError | openai.APIConnectionError) and status in (None, 500):
        return model_error("connection", connector.id, _message(exc), secrets=secrets)
    if "connection error" in _message(exc).lower():  # litellm reports a refused connection as a 500
        return model_error("connection", connector.id, _message(exc), secrets=secrets)
    code = getattr(exc, "code", None)
    kind = kind_for_status(
        status if isinstance(status, int) else None, _message(exc), code if isinstance(code, str) else None
    )
    return model_error(kind, connector.id, _message(exc), status=status, secrets=secrets)


def _message(exc: BaseException) -> str:
    """litellm prefixes messages with its class names; keep the provider's own words."""
    text = str(getattr(exc, "message", "") or exc)
    for marker in ("Exception - ", "Error: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.split("\n", 1)[0]
