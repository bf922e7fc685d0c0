"""In-process model doubles: `FunctionModel` and `ScriptedModel` answer in a provider's place, without HTTP.

They are engines, given to a runtime the way the real ones are (`Engines(overrides=...)`, which
`model.engines()` builds), standing in for the `openai` and `litellm` engines (and, with
`engines(scripted=True)`, for the offline `type: scripted` connectors' too). Everything else of a
model call runs as in production: the app's connectors and `$ENV` values, fallback chains, retries,
cooldowns and capabilities::

    model = ScriptedModel()
    model.enqueue(Reply(text="Hi!"), Reply(tool_calls=(ToolCall("weather__forecast", {"city": "Paris"}),)))
    runtime = Runtime(app=app, store=store, engines=model.engines())
    ...
    assert model.requests[0].messages[-1] == {"role": "user", "content": "hello"}

    model = FunctionModel(lambda request: Reply(text=f"{len(request.messages)} messages"))

A reply is the `Reply` the loopback `FakeProvider` serves, so a test moves between the two by changing
one fixture. It streams as the deltas the `openai` engine decodes from that provider's stream, chunk
for chunk (the role chunk, reasoning, text, each tool call's opening and argument fragments, the
finish reason, the usage), so `drop_after` and `stall_after` count the same chunks; what goes wrong
becomes the `ModelError` that engine gives for it:

    status=4xx/5xx                           the kind `kind_for_status` gives (auth, rate_limit, server...)
    drop_after=N                             incomplete once text or a tool call came, else connection
    a wait (first byte, stall, delay) longer timeout (before any text) or incomplete, after `timeout_s`
    than the connector's `timeout_s`

An embeddings call gets hashed vectors (`connectors/hashed.py`), or fails as its reply's error says.

A request is recorded as the `RecordedRequest` of the body the `openai` engine would send, after a
JSON round trip, so `requests[i].messages`, `.tools`, `.body` and `.model` read as they would over HTTP.
A stream that its caller closes or cancels before the end is recorded in `disconnects`. Waits use the
`sleep` given (real time by default) and end at once when the run is cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, NoReturn

from yao_agent.connectors.call import Engine, Engines
from yao_agent.connectors.capabilities import adapt
from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.deltas import Delta, Embedded, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.hashed import hashed_vector, word_count
from yao_agent.connectors.providers import resolve_endpoint
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError
from yao_agent.testing.fake_scenarios import (
    STAMP,
    JsonObject,
    RecordedRequest,
    Reply,
    builtin_reply,
    reply_for_model,
    scenario_key,
)
from yao_agent.testing.fake_script import is_embedding

Sleep = Callable[[float], Awaitable[None]]
QueuedReply = Reply | str
"""A scripted reply, or the name of a built-in scenario (resolved when the request comes, so `echo` works)."""
ModelFunction = Callable[[RecordedRequest], QueuedReply | Awaitable[QueuedReply]]
"""What a `FunctionModel` asks: the request in, the reply out (sync or async; a `ModelError` it raises
is the call's failure, any other exception the test's own bug, which ends the run as one)."""

# What the openai engine adds to every body (see connectors/openai_engine.py `STREAMED`).
_STREAMED: Final[JsonObject] = {"stream": True, "stream_options": {"include_usage": True}}
_USAGE_KEYS: Final = ("prompt_tokens", "completion_tokens", "total_tokens")
Chunk = tuple[Delta, ...]


class ModelDouble:
    """What both doubles share: the engine interface, the recordings, and the witnesses to wait on."""

    name = "in-process"
    base_url: Final = "http://in-process.invalid/v1"
    """Something for a connector's `base_url`: never called while the double serves its engines."""

    def __init__(self, *, sleep: Sleep = asyncio.sleep) -> None:
        self._sleep = sleep
        self._requests: list[RecordedRequest] = []
        self._disconnects: list[RecordedRequest] = []
        self._call_ids = itertools.count(1)
        self._waiters: list[asyncio.Future[None]] = []

    async def reply_for(self, request: RecordedRequest) -> Reply:
        raise NotImplementedError

    # -- recordings and witnesses ----------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every model call so far, in the order they were made (a snapshot)."""
        return list(self._requests)

    @property
    def disconnects(self) -> list[RecordedRequest]:
        """Calls whose caller went away (closed or cancelled the stream) before the reply was complete."""
        return list(self._disconnects)

    async def wait_for_requests(self, n: int = 1, timeout: float = 10.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least `n` calls were made; return them all. Fails loudly after `timeout` seconds."""
        await self._until(lambda: len(self._requests) >= n, timeout, lambda: f"{len(self._requests)} of {n} calls")
        return self.requests

    async def wait_for_disconnects(self, n: int = 1, timeout: float = 10.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least `n` callers went away mid-reply; return them all."""
        seen = self._disconnects
        await self._until(lambda: len(seen) >= n, timeout, lambda: f"{len(seen)} of {n} disconnects")
        return self.disconnects

    async def _until(self, holds: Callable[[], bool], timeout: float, said: Callable[[], str]) -> None:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while not holds():
                    waiter = loop.create_future()
                    self._waiters.append(waiter)
                    await waiter
        except TimeoutError:
            raise TimeoutError(f"saw {said()} within {timeout} s") from None

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _forget(self) -> None:
        self._requests.clear()
        self._disconnects.clear()
        self._call_ids = itertools.count(1)

    # -- the engine ------------------------------------------------------------------------------------------

    def engines(self, *, scripted: bool = False) -> Engines:
        """A runtime's engines with this double in place of the providers' (`openai`, `litellm`); with
        `scripted`, of the offline `type: scripted` connectors' too: every model of the app is the double."""
        overrides: dict[str, Engine] = {"openai": self, "litellm": self}
        if scripted:
            overrides["scripted"] = self
        return Engines(overrides=overrides)

    async def aclose(self) -> None:
        return None  # nothing held; the recordings stay for the test to read

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        record = _recorded(connector, request, environ)
        self._requests.append(record)
        self._changed()
        reply = await self.reply_for(record)
        try:
            async for delta in self._play(connector, reply, record, environ):
                yield delta
        except (GeneratorExit, asyncio.CancelledError):
            self._gone(record)  # the caller closed the stream or was cancelled mid-reply
            raise

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        """Hashed vectors (as the loopback fake's `/v1/embeddings`), after the reply the request gets:
        an error reply fails the call as that provider error would; any other reply's content is unused."""
        body: JsonObject = {"model": connector.model, "input": list(texts)}
        record = replace(RecordedRequest.parse("/embeddings", {}, body, time.time()), connector=connector.id)
        self._requests.append(record)
        self._changed()
        reply = await self.reply_for(record)
        if reply.first_byte_delay_s:
            await self._wait(connector, record, reply.first_byte_delay_s, started=None)
        if reply.is_error:
            raise _status_error(connector, reply, environ)
        tokens = sum(word_count(text) for text in texts)
        return Embedded([hashed_vector(text) for text in texts], connector.model, tokens, connector.id)

    def _gone(self, record: RecordedRequest) -> None:
        self._disconnects.append(record)
        self._changed()

    async def _play(
        self, connector: ConnectorSpec, reply: Reply, record: RecordedRequest, environ: Mapping[str, str] | None
    ) -> AsyncIterator[Delta]:
        wait = functools.partial(self._wait, connector, record)
        if reply.first_byte_delay_s:
            await wait(reply.first_byte_delay_s, started=None)
        if reply.is_error:
            raise _status_error(connector, reply, environ)
        chunks = self._chunks(reply)
        stall_at, drop_at = _clamp(reply.stall_after, len(chunks)), _clamp(reply.drop_after, len(chunks))
        started = False
        for number in range(len(chunks) + 1):
            if number == stall_at:
                await wait(reply.stall_s, started=started)
            if number == drop_at:
                _dropped(connector, started)
            if number == len(chunks):
                return
            if number and reply.delay_s:
                await wait(reply.delay_s, started=started)
            for delta in chunks[number]:
                started = started or not isinstance(delta, Finish | Usage)
                yield _stamped(delta) if reply.stamp else delta

    async def _wait(
        self, connector: ConnectorSpec, record: RecordedRequest, seconds: float, *, started: bool | None
    ) -> None:
        """Wait as the provider would; longer than the connector's `timeout_s`, and the engine gives up
        (and hangs up). `started` is None before the answer began, else whether text or a call came."""
        limit = connector.timeout_s
        await self._sleep(min(seconds, limit))
        if seconds <= limit:
            return
        self._gone(record)
        if started is None:
            raise model_error("timeout", connector.id, f"no answer within {limit:g} s")
        raise model_error("incomplete" if started else "timeout", connector.id, f"no chunk within {limit:g} s")

    def _chunks(self, reply: Reply) -> list[Chunk]:
        """The reply as a provider streams it, one entry per chunk, with the deltas the engine reads from it."""
        size = reply.chunk_size
        chunks: list[Chunk] = [()]  # the opening chunk names the role and carries nothing to show
        chunks += [(ReasoningDelta(piece),) for piece in _pieces(reply.reasoning, size)]
        chunks += [(TextDelta(piece),) for piece in _pieces(reply.text, size)]
        for index, call in enumerate(reply.tool_calls):
            call_id = call.id or f"call_{next(self._call_ids)}"
            chunks.append((ToolCallDelta(index, call_id, call.name, ""),))  # the opening names the call
            chunks += [(ToolCallDelta(index, None, None, piece),) for piece in _pieces(call.arguments_json(), size)]
        chunks.append((Finish(reply.effective_finish_reason),))
        usage = reply.effective_usage
        chunks.append((Usage.of(*(_int(usage.get(key)) for key in _USAGE_KEYS)),))
        chunks.append(())  # `[DONE]`
        return chunks


class FunctionModel(ModelDouble):
    """A model whose every reply is `function(request)`: pydantic-ai's `FunctionModel`, in our terms.

    The function sees the request as a provider would (`messages`, `tools`, `body` with the options,
    `model`, `connector`) and returns a `Reply` or a built-in scenario's name, or raises a `ModelError`.
    """

    def __init__(self, function: ModelFunction, *, sleep: Sleep = asyncio.sleep) -> None:
        super().__init__(sleep=sleep)
        self._function = function

    async def reply_for(self, request: RecordedRequest) -> Reply:
        answer = self._function(request)
        if not isinstance(answer, Reply | str):
            answer = await answer
        return builtin_reply(answer, request.messages) if isinstance(answer, str) else answer

    def reset(self) -> None:
        """Forget the recordings and the call-id counter."""
        self._forget()


class ScriptedModel(ModelDouble):
    """A model that answers from a queue of replies, like `FakeProvider` and openai-agents' `ScriptedModel`.

    Which reply a call gets: the queue of its model, else the global queue, else `default(request)` if
    given, else the built-in scenario its model names (`text` if none).
    """

    def __init__(self, *, default: ModelFunction | None = None, sleep: Sleep = asyncio.sleep) -> None:
        super().__init__(sleep=sleep)
        self._queue: deque[QueuedReply] = deque()
        self._model_queues: dict[str, deque[QueuedReply]] = {}
        self._default = FunctionModel(default) if default is not None else None

    def enqueue(self, *replies: QueuedReply, model: str | None = None) -> None:
        """Queue replies FIFO, for any model or only for `model`; scenario names are checked now."""
        for item in replies:
            if isinstance(item, str):
                builtin_reply(item)
        if model is None:
            self._queue.extend(replies)
        else:
            self._model_queues.setdefault(scenario_key(model), deque()).extend(replies)

    @property
    def pending(self) -> int:
        """How many queued replies no call has taken yet."""
        return len(self._queue) + sum(map(len, self._model_queues.values()))

    def reset(self) -> None:
        """Forget queued replies, recordings and the call-id counter, as if new."""
        self._queue.clear()
        self._model_queues.clear()
        self._forget()

    async def reply_for(self, request: RecordedRequest) -> Reply:
        queue = self._model_queues.get(scenario_key(request.model))
        shared = self._queue if not is_embedding(request) else None  # (fake_script.is_embedding says why)
        item = queue.popleft() if queue else shared.popleft() if shared else None
        if isinstance(item, str):
            return builtin_reply(item, request.messages)
        if item is not None:
            return item
        if self._default is not None:
            return await self._default.reply_for(request)
        return reply_for_model(request.model, request.messages)


def _recorded(connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None) -> RecordedRequest:
    """The call as the `openai` engine would put it on the wire (its `call_params`, then the stream flags)."""
    params: dict[str, Any] = {**connector.options, **request.options.to_json(), "model": connector.model}
    params["messages"] = list(request.messages)
    if request.tools:
        params["tools"] = list(request.tools)
    params = adapt(connector, params)
    extra = params.pop("extra_body", None)
    body: JsonObject = json.loads(json.dumps({**params, **(extra if isinstance(extra, dict) else {}), **_STREAMED}))
    endpoint = resolve_endpoint(connector, environ)
    headers = {key.lower(): value for key, value in endpoint.headers.items()}
    if endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    record = RecordedRequest.parse("/chat/completions", headers, body, time.time())
    return replace(record, connector=connector.id)


def _status_error(connector: ConnectorSpec, reply: Reply, environ: Mapping[str, str] | None) -> ModelError:
    message = str(reply.error_body()["error"]["message"])
    kind = kind_for_status(reply.status, message, reply.error_code)
    secrets = resolve_endpoint(connector, environ).secrets
    return model_error(kind, connector.id, message, status=reply.status, secrets=secrets)


def _dropped(connector: ConnectorSpec, started: bool) -> NoReturn:
    detail = "the connection closed before the answer was complete"
    raise model_error("incomplete" if started else "connection", connector.id, detail)


def _stamped(delta: Delta) -> Delta:
    if isinstance(delta, TextDelta) and STAMP in delta.text:
        return TextDelta(delta.text.replace(STAMP, f"{time.monotonic():.6f}"))
    return delta


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _clamp(mark: int | None, count: int) -> int | None:
    return None if mark is None else min(mark, count)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
