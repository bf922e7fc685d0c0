"""The `openai` engine's HTTP: the request the SDK would send, sent by aiohttp, and its answer read as lines.

A request to an endpoint carries what the SDK's client would send — its URL, its headers (the key, the
SDK's own, the connector's, `OPENAI_ORG_ID`'s) — worked out once per endpoint (openai_headers.py says
them without importing the SDK, where the endpoint is plain). Sending it through the SDK
cost more CPU than the whole rest of a run: each call merged its options and headers again, built an
httpx request and response around aiohttp's, and passed every piece of the body through four
decoders (measured in one `yao-agent serve`: 1.4 ms of a 5.5 ms run start, 40 µs of a 160 µs chunk).
Here one aiohttp session, shared by every endpoint, sends the body, and the answer's bytes are split
into lines (CR, LF or CRLF ends one, as server-sent events have it) as each read brings them.

A failure becomes the ModelError the SDK's error would have become (see `classify.py`).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import ssl
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.openai_headers import merged, sdk_request
from yao_agent.connectors.providers import Endpoint
from yao_agent.connectors.tls import on_thread
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

MAX_CONNECTIONS = 1000  # the SDK's own pool limits
KEEPALIVE_S = 5.0


@dataclass(frozen=True, slots=True)
class Target:
    """Where one endpoint's chat completions (and embeddings) go, with what, and how long each phase may take."""

    url: yarl.URL
    headers: dict[str, str]
    timeout: aiohttp.ClientTimeout
    embeddings: yarl.URL
    tls: bool  # https: over the shared TLS context


class Wire:
    """One aiohttp session for every endpoint, over the shared TLS context; a `Target` per endpoint.

    The TLS context (`tls`, being made on a thread) is started, if not given, by the first endpoint
    that needs it: one over plain http (a server on this machine or the local network) never loads
    the CA bundle."""

    def __init__(self, tls: Future[ssl.SSLContext] | None = None) -> None:
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._targets: dict[tuple[Any, ...], Target] = {}

    async def target(self, connector: ConnectorSpec, endpoint: Endpoint) -> Target:
        key = (endpoint.base_url, endpoint.api_key, tuple(sorted(endpoint.headers.items())), connector.timeout_s)
        found = self._targets.get(key)
        if found is None:
            found = self._targets[key] = await _target(endpoint, connector.timeout_s)
        return found

    async def context(self) -> ssl.SSLContext:
        """The shared TLS context, once made (its failure raised to every call that needs it)."""
        if self._tls is None:
            self._tls = on_thread()
        if not self._tls.done():
            await asyncio.wrap_future(self._tls)
        return self._tls.result()

    async def post(
        self, connector: ConnectorSpec, endpoint: Endpoint, body: bytes, *, embeddings: bool = False
    ) -> aiohttp.ClientResponse:
        """The provider's answer (to a chat completion, or with `embeddings` to an embeddings request),
        its status a success; a ModelError for any other outcome."""
        target = await self.target(connector, endpoint)
        url = target.embeddings if embeddings else target.url
        context = await self.context() if target.tls else True  # (True: aiohttp's default, unused over http)
        if self._session is None:
            pool = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=pool)
        try:
            response = await self._session.post(url, data=body, headers=target.headers, ssl=context,
                                                timeout=target.timeout, allow_redirects=False)  # fmt: skip
        except (aiohttp.ClientError, OSError) as exc:  # (aiohttp's timeouts are both)
            raise _unsent(exc, connector, endpoint) from None
        if not 200 <= response.status < 300:
            raise await _refused(response, connector, endpoint)
        return response

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def _target(endpoint: Endpoint, timeout_s: float) -> Target:
    """What the SDK's client for this endpoint sends with a chat completion (said here where that is
    plain, see openai_headers.py; else made by that client)."""
    said = sdk_request(endpoint)
    if said is not None:
        base, headers = said
        chat, embeddings = f"{base}chat/completions", f"{base}embeddings"
    else:
        chat, embeddings, headers = await _by_sdk(endpoint)
    headers |= {"x-stainless-retry-count": "0", "x-stainless-read-timeout": str(float(timeout_s))}
    connect = min(10.0, timeout_s)  # as the SDK had them: connecting, within 10 s; the pool and each read, timeout_s
    timeout = aiohttp.ClientTimeout(connect=timeout_s, sock_connect=connect, sock_read=timeout_s)
    url = yarl.URL(chat, encoded=True)
    return Target(url, headers, timeout, yarl.URL(embeddings, encoded=True), tls=url.scheme == "https")


async def _by_sdk(endpoint: Endpoint) -> tuple[str, str, dict[str, str]]:
    """The chat completions and embeddings URLs and the headers, as the SDK's own client has them. It
    only says them, it sends nothing: it needs no CA bundle."""
    import openai  # most of a second to import: only for what openai_headers.py leaves to it

    client = openai.AsyncOpenAI(api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0,
                                default_headers=dict(endpoint.headers) or None,
                                http_client=openai.DefaultAioHttpClient(verify=False))  # fmt: skip
    try:
        given = {**client.auth_headers, **client.default_headers}
        base = client.base_url  # (with the trailing slash the SDK gives it)
    finally:
        await client.close()
    chat, embeddings = (str(base.copy_with(raw_path=base.raw_path + p)) for p in (b"chat/completions", b"embeddings"))
    return chat, embeddings, merged(given)


def _unsent(exc: BaseException, connector: ConnectorSpec, endpoint: Endpoint) -> ModelError:
    """A request that got no answer: no connection, or no response head in time."""
    if isinstance(exc, TimeoutError):
        return model_error("timeout", connector.id, f"no answer within {connector.timeout_s:g} s")
    return model_error("connection", connector.id, str(exc) or type(exc).__name__, secrets=endpoint.secrets)


async def _refused(response: aiohttp.ClientResponse, connector: ConnectorSpec, endpoint: Endpoint) -> ModelError:
    """An answer whose status is not a success, said as the SDK says it: the provider's message and code."""
    status = response.status
    try:
        text = (await response.read()).decode("utf-8", "replace").strip()
    except (aiohttp.ClientError, OSError):
        text = ""
    finally:
        response.release()
    try:
        body: Any = json.loads(text)
        said = f"Error code: {status} - {body}"
    except ValueError:
        body, said = text, text or f"Error code: {status}"
    error = as_mapping(body).get("error", body)
    code, message = as_mapping(error).get("code"), as_mapping(error).get("message")
    kind = kind_for_status(status, said, code if isinstance(code, str) else None)
    detail = message if isinstance(message, str) else said
    return model_error(kind, connector.id, detail, status=status, secrets=endpoint.secrets)


class Gaps:
    """How long an answer's body may go silent: `timeout_s` between two reads, as aiohttp's own read
    timeout has it. That one re-arms a timer for every piece that arrives (~6 µs of a streamed chunk);
    this one notes the time of each read, and its timer, re-armed only when it fires, compares."""

    def __init__(self, response: aiohttp.ClientResponse, timeout_s: float) -> None:
        self.content, self.timeout_s = response.content, timeout_s
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        connection = response.connection
        if connection is not None and connection.protocol is not None:  # (None: the whole body is in)
            connection.protocol.read_timeout = None  # aiohttp's watched the head; this one, the body
            self.timer = self.loop.call_at(self.last + timeout_s, self._check)

    def read(self) -> None:
        self.last = self.loop.time()

    def _check(self) -> None:
        due = self.last + self.timeout_s
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._check)
            return
        self.timer = None  # the read waiting fails as aiohttp's own timeout makes it fail
        self.content.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


async def lines(content: aiohttp.StreamReader, gaps: Gaps | None = None) -> AsyncIterator[list[str]]:
    """The body's lines, as many as each read completes (one list per read: a generator step per line
    would cost more than the line)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest = ""
    while chunk := await content.readany():
        if gaps is not None:
            gaps.read()
        done, rest = _split(rest + decoder.decode(chunk))
        if done:
            yield done
    rest += decoder.decode(b"", True)
    if rest:
        yield [rest.removesuffix("\r")]  # a last line without its line break


def _split(text: str) -> tuple[list[str], str]:
    """The complete lines of `text`, and the line still arriving (a CR at the end may be half a CRLF)."""
    if "\r" not in text:
        done = text.split("\n")
        return done, done.pop()
    held = "\r" if text.endswith("\r") else ""
    done = text.removesuffix("\r").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return done, done.pop() + held
