"""The `openai` engine: OpenAI-compatible providers through the official SDK, one client per endpoint.

The SDK's own retries are off (we own the policy); its read timeout is the connector's `timeout_s`,
which bounds both the wait for the first byte and every gap between chunks.

The SDK's client sends the request (its auth, headers, timeouts, connection pool) and raises its
error classes; the body goes as we built it and the streamed answer is decoded here, as plain JSON.
The SDK's typed layer measured far dearer than everything else in a run: `create` re-walks the
whole conversation against its type hints (about 5 ms of CPU for 20 messages), and its parsed
stream builds a pydantic model per chunk (2.7 times this engine's CPU for a 20-chunk reply).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import Future
from typing import Any

import httpx2
import openai

from yao_agent.connectors.capabilities import adapt
from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.deltas import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.providers import Endpoint, resolve_endpoint
from yao_agent.connectors.request import ModelRequest
from yao_agent.connectors.tls import on_thread
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.jsonvalue import as_list, as_mapping

STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


def call_params(connector: ConnectorSpec, request: ModelRequest) -> dict[str, Any]:
    """Chat-completions parameters: connector defaults, then the call's own options, fit to its capabilities."""
    params: dict[str, Any] = {**connector.options, **request.options}
    params["model"] = connector.model
    params["messages"] = list(request.messages)
    if request.tools:
        params["tools"] = list(request.tools)
    return adapt(connector, params)


class OpenAIEngine:
    name = "openai"

    def __init__(self, tls: Future[ssl.SSLContext] | None = None) -> None:
        """`tls` is the one TLS context every client shares, being made on a thread (`tls.on_thread`):
        by default the SDK's own settings, which its transport would otherwise load for each client."""
        self._clients: dict[tuple[Any, ...], openai.AsyncOpenAI] = {}
        self._tls = tls if tls is not None else on_thread()

    async def client(self, connector: ConnectorSpec, endpoint: Endpoint) -> openai.AsyncOpenAI:
        if not self._tls.done():
            await asyncio.wrap_future(self._tls)
        key = (endpoint.base_url, endpoint.api_key, tuple(sorted(endpoint.headers.items())), connector.timeout_s)
        client = self._clients.get(key)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=endpoint.api_key,
                base_url=endpoint.base_url,
                default_headers=dict(endpoint.headers) or None,
                timeout=openai.Timeout(connector.timeout_s, connect=min(10.0, connector.timeout_s)),
                max_retries=0,
                # aiohttp's transport: a quarter less CPU per chunk
                http_client=openai.DefaultAioHttpClient(verify=self._tls.result()),
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
        client = await self.client(connector, endpoint)
        params = call_params(connector, request)
        body = {**params, **as_mapping(params.pop("extra_body", None)), **STREAMED}
        try:
            response = await client.post("/chat/completions", cast_to=httpx2.Response, body=body, stream=True)
        except openai.APIError as exc:
            raise _classify(exc, connector, endpoint) from None
        started = False
        try:
            async for chunk in _events(response.aiter_lines()):
                for delta in chunk_deltas(chunk):
                    started = started or not isinstance(delta, Usage | Finish)
                    yield delta
        except BrokenStream as exc:  # the provider said so, or sent what is not a chunk
            kind = "incomplete" if started else "server"
            raise model_error(kind, connector.id, str(exc), secrets=endpoint.secrets) from None
        except Exception as exc:  # transport errors while reading the body
            raise _transport(exc, connector, endpoint, started=started) from None
        finally:
            await response.aclose()  # also on cancellation: the provider sees the connection go


class BrokenStream(Exception):
    """The stream carried an error event, or an event that is not JSON."""


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    """The JSON of each server-sent event up to `[DONE]`; the rest of the body is still read, so the
    connection can be reused, and ignored."""
    data: list[str] = []
    done = False
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:  # a blank line ends an event
            text, data = "\n".join(data), []
            done = done or text.startswith("[DONE]")
            if not done:
                yield _decoded(text)
    if data and not done and not data[0].startswith("[DONE]"):
        yield _decoded("\n".join(data))  # a last event without its blank line


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise BrokenStream(f"the provider sent an event that is not JSON: {text[:80]!r}") from None


def chunk_deltas(chunk: Any) -> list[Delta]:
    """A chunk's deltas; a chunk that reports an error (some providers do, mid-stream) raises it."""
    chunk = as_mapping(chunk)
    error = chunk.get("error")
    if error:
        message = as_mapping(error).get("message")
        raise BrokenStream(message if isinstance(message, str) and message else "an error event mid-stream")
    out: list[Delta] = []
    for choice in as_list(chunk.get("choices")):
        choice = as_mapping(choice)
        delta = as_mapping(choice.get("delta"))
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        for call in as_list(delta.get("tool_calls")):
            out.append(_call_delta(as_mapping(call)))
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            out.append(Finish(finish))
    usage = as_mapping(chunk.get("usage"))
    if usage:
        out.append(Usage.of(*(_int(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))))
    return out


def _call_delta(call: Mapping[str, Any]) -> ToolCallDelta:
    function = as_mapping(call.get("function"))
    call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    return ToolCallDelta(
        _int(call.get("index")) or 0,
        call_id if isinstance(call_id, str) and call_id else None,
        name if isinstance(name, str) and name else None,
        arguments if isinstance(arguments, str) else "",
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _classify(exc: openai.APIError, connector: ConnectorSpec, endpoint: Endpoint) -> ModelError:
    """A failed request (before any of the answer arrived: once the body streams, only transport errors come)."""
    if isinstance(exc, openai.APITimeoutError) and not _refused(exc):
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


def _refused(exc: BaseException) -> bool:
    """Whether a "timeout" was a connection that could not be made: the SDK's aiohttp transport
    reports a refused connection as a connect timeout, with the socket's error as its cause."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__
    return False


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return str(cause) if cause is not None and str(cause) else str(exc)


def _provider_message(exc: openai.APIError) -> str:
    body = as_mapping(exc.body)
    message = as_mapping(body.get("error", body)).get("message")
    return message if isinstance(message, str) else exc.message
