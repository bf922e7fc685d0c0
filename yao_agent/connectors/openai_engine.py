"""The `openai` engine: OpenAI-compatible providers, the request as the official SDK would send it.

The SDK's own retries are off (we own the policy); the read timeout is the connector's `timeout_s`,
which bounds both the wait for the first byte and every gap between chunks.

The body goes as we built it and the streamed answer is decoded here, as plain JSON; how the request
goes out (the SDK's headers, aiohttp's connection pool) and how its answer's lines come in is
openai_wire.py's. The SDK's typed layer measured far dearer than everything else in a run: `create`
re-walks the whole conversation against its type hints (about 5 ms of CPU for 20 messages), and its
parsed stream builds a pydantic model per chunk (2.7 times this engine's CPU for a 20-chunk reply).
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
from array import array
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import aiohttp

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors.capabilities import adapt
from yao_agent.connectors.classify import model_error
from yao_agent.connectors.deltas import Delta, Embedded, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.openai_wire import Gaps, Wire, lines
from yao_agent.connectors.providers import Endpoint, resolve_endpoint
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


def call_params(connector: ConnectorSpec, request: ModelRequest) -> dict[str, Any]:
    """Chat-completions parameters: connector defaults, then the call's own options, fit to its capabilities."""
    params: dict[str, Any] = {**connector.options, **request.options.to_json()}
    params["model"] = connector.model
    params["messages"] = list(request.messages)
    if request.tools:
        params["tools"] = list(request.tools)
    return adapt(connector, params)


def encoded(body: Mapping[str, Any]) -> bytes:
    """The body as the SDK encodes it (httpx's settings: compact, UTF-8, no NaN)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class OpenAIEngine:
    name = "openai"

    def __init__(self, tls: Future[ssl.SSLContext] | None = None) -> None:
        """`tls` is the one TLS context every https endpoint shares, being made on a thread
        (`tls.on_thread`); if not given, made so by the first that needs it, with the SDK's settings."""
        self.wire = Wire(tls)

    async def aclose(self) -> None:
        await self.wire.aclose()

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        endpoint = resolve_endpoint(connector, environ)
        params = call_params(connector, request)
        body = encoded({**params, **as_mapping(params.pop("extra_body", None)), **STREAMED})
        response = await self.wire.post(connector, endpoint, body)
        gaps = Gaps(response, connector.timeout_s)
        started = False
        try:
            async for chunk in _events(response.content, gaps):
                for delta in chunk_deltas(chunk):
                    started = started or not isinstance(delta, Usage | Finish)
                    yield delta
        except BrokenStream as exc:  # the provider said so, or sent what is not a chunk
            kind = "incomplete" if started else "server"
            raise model_error(kind, connector.id, str(exc), secrets=endpoint.secrets) from None
        except Exception as exc:  # transport errors while reading the body
            raise _transport(exc, connector, endpoint, started=started) from None
        finally:
            gaps.stop()
            response.release()  # the connection back to the pool, or closed if the body was not read to its end
            # (also on cancellation: the provider sees the connection go)

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        """`POST {base_url}/embeddings` through the same session, headers and timeouts as a chat."""
        endpoint = resolve_endpoint(connector, environ)
        body = encoded({"model": connector.model, "input": list(texts)})
        response = await self.wire.post(connector, endpoint, body, embeddings=True)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, OSError) as exc:  # (a silent body past timeout_s is both)
            raise _transport(exc, connector, endpoint, started=False) from None
        finally:
            response.release()
        try:
            return embeddings_answer(connector, json.loads(raw), len(texts))
        except ValueError as exc:  # not JSON, or not the answer asked for
            raise model_error("server", connector.id, str(exc), secrets=endpoint.secrets) from None


def embeddings_answer(connector: ConnectorSpec, answer: Any, count: int) -> Embedded:
    """OpenAI's embeddings answer read: its vectors in input order (floats, or base64 float32 as some
    servers send), its model and prompt tokens. ValueError when it is not that answer for `count` texts."""
    answer = as_mapping(answer)
    items = sorted((as_mapping(item) for item in as_list(answer.get("data"))), key=lambda i: _int(i.get("index")) or 0)
    if len(items) != count:
        raise ValueError(f"the provider sent {len(items)} embeddings for {count} texts")
    vectors = [_vector(item.get("embedding")) for item in items]
    usage = as_mapping(answer.get("usage"))
    tokens = _int(usage.get("prompt_tokens")) or _int(usage.get("total_tokens")) or 0
    model = answer.get("model")
    return Embedded(vectors, model if isinstance(model, str) and model else connector.model, tokens, connector.id)


def _vector(value: Any) -> list[float]:
    if isinstance(value, str):
        packed = array("f", base64.b64decode(value))
        if sys.byteorder == "big":
            packed.byteswap()  # the wire's float32 are little-endian
        return packed.tolist()
    numbers = as_list(value)
    if not numbers or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        raise ValueError("the provider sent an embedding that is not a list of numbers")
    return [float(n) for n in numbers]


class BrokenStream(Exception):
    """The stream carried an error event, or an event that is not JSON."""


async def _events(content: aiohttp.StreamReader, gaps: Gaps) -> AsyncIterator[Any]:
    """The JSON of each server-sent event up to `[DONE]`; the rest of the body is still read, so the
    connection can be reused, and ignored."""
    data: list[str] = []
    done = False
    async for read in lines(content, gaps):
        for line in read:
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
        _choice_deltas(as_mapping(choice), out)
    usage = chunk.get("usage")
    if usage and (usage := as_mapping(usage)):
        out.append(Usage.of(*(_int(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))))
    return out


def _choice_deltas(choice: Mapping[str, Any], out: list[Delta]) -> None:
    delta = as_mapping(choice.get("delta"))
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning and isinstance(reasoning, str):
        out.append(ReasoningDelta(reasoning))
    content = delta.get("content")
    if content and isinstance(content, str):
        out.append(TextDelta(content))
    calls = delta.get("tool_calls")
    if calls:  # (most chunks carry none: asked for only then)
        out.extend(_call_delta(as_mapping(call)) for call in as_list(calls))
    finish = choice.get("finish_reason")
    if finish and isinstance(finish, str):
        out.append(Finish(finish))


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


def _transport(exc: Exception, connector: ConnectorSpec, endpoint: Endpoint, *, started: bool) -> ModelError:
    timeout = "timeout" in type(exc).__name__.lower()
    kind = "incomplete" if started else ("timeout" if timeout else "connection")
    detail = f"no chunk within {connector.timeout_s:g} s" if timeout else (str(exc) or type(exc).__name__)
    return model_error(kind, connector.id, detail, secrets=endpoint.secrets)
