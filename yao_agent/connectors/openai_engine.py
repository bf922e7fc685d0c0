"""The `openai` engine: OpenAI-compatible providers through the official SDK, one client per endpoint.

The SDK's own retries are off (we own the policy); its read timeout is the connector's `timeout_s`,
which bounds both the wait for the first byte and every gap between chunks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk

from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.deltas import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.providers import Endpoint, resolve_endpoint
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.jsonvalue import as_mapping


def call_params(connector: ConnectorSpec, request: ModelRequest) -> dict[str, Any]:
    """Chat-completions parameters: connector defaults, then the call's own options; tools only if supported."""
    params: dict[str, Any] = {**connector.options, **request.options}
    params["model"] = connector.model
    params["messages"] = list(request.messages)
    if request.tools and connector.capabilities.tool_calls:
        params["tools"] = list(request.tools)
    else:
        params.pop("tool_choice", None)
        params.pop("parallel_tool_calls", None)
    return params


class OpenAIEngine:
    name = "openai"

    def __init__(self) -> None:
        self._clients: dict[tuple[Any, ...], openai.AsyncOpenAI] = {}

    def client(self, connector: ConnectorSpec, endpoint: Endpoint) -> openai.AsyncOpenAI:
        key = (endpoint.base_url, endpoint.api_key, tuple(sorted(endpoint.headers.items())), connector.timeout_s)
        client = self._clients.get(key)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=endpoint.api_key,
                base_url=endpoint.base_url,
                default_headers=dict(endpoint.headers) or None,
                timeout=openai.Timeout(connector.timeout_s, connect=min(10.0, connector.timeout_s)),
                max_retries=0,
            )
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        endpoint = resolve_endpoint(connector, environ)
        client = self.client(connector, endpoint)
        params = call_params(connector, request)
        extra_body = params.pop("extra_body", None)
        try:
            upstream = await client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}, extra_body=extra_body
            )
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint, started=False) from None
        started = False
        try:
            async for chunk in upstream:
                for delta in chunk_deltas(chunk):
                    started = started or not isinstance(delta, Usage | Finish)
                    yield delta
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint, started=started) from None
        except Exception as exc:  # transport errors the SDK lets through while iterating
            raise _transport(exc, connector, endpoint, started=started) from None
        finally:
            await upstream.close()  # also on cancellation: the provider sees the connection go


def chunk_deltas(chunk: ChatCompletionChunk) -> list[Delta]:
    out: list[Delta] = []
    for choice in chunk.choices:
        delta = choice.delta
        extra = delta.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ReasoningDelta(reasoning))
        if delta.content:
            out.append(TextDelta(delta.content))
        for call in delta.tool_calls or ():
            function = call.function
            name = function.name if function else None
            arguments = (function.arguments if function else None) or ""
            out.append(ToolCallDelta(call.index, call.id, name, arguments))
        if choice.finish_reason:
            out.append(Finish(choice.finish_reason))
    if chunk.usage is not None:
        usage = chunk.usage
        out.append(Usage.of(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens))
    return out


def _classify(exc: openai.APIError, connector: ConnectorSpec, endpoint: Endpoint, *, started: bool) -> ModelError:
    if started:
        return model_error("incomplete", connector.id, exc.message, secrets=endpoint.secrets)
    if isinstance(exc, openai.APITimeoutError):
        return model_error("timeout", connector.id, f"no answer within {connector.timeout_s:g} s")
    if isinstance(exc, openai.APIConnectionError):
        return model_error("connection", connector.id, _cause(exc), secrets=endpoint.secrets)
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    code = exc.code if isinstance(exc.code, str) else None
    kind = kind_for_status(status, exc.message, code)
    return model_error(kind, connector.id, _provider_message(exc), status=status, secrets=endpoint.secrets)


def _transport(exc: Exception, connector: ConnectorSpec, endpoint: Endpoint, *, started: bool) -> ModelError:
    timeout = "timeout" in type(exc).__name__.lower()
    kind = "incomplete" if started else ("timeout" if timeout else "connection")
    detail = f"no chunk within {connector.timeout_s:g} s" if timeout else (str(exc) or type(exc).__name__)
    return model_error(kind, connector.id, detail, secrets=endpoint.secrets)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return str(cause) if cause is not None and str(cause) else str(exc)


def _provider_message(exc: openai.APIError) -> str:
    body = as_mapping(exc.body)
    message = as_mapping(body.get("error", body)).get("message")
    return message if isinstance(message, str) else exc.message
