"""A loopback fake of OpenAI's ``/v1/chat/completions``, for testing assistants over real HTTP.

It speaks the wire format closely enough for the official ``openai`` SDK and for litellm (``openai/<model>``
with ``api_base=fp.base_url``), streaming and not. Replies are scripted with `Reply` objects queued FIFO, or
chosen by the model name from the built-in scenarios listed in `yao_agent.testing.fake_scenarios`::

    async with FakeProvider() as fp:                      # in the current event loop
        fp.enqueue(Reply(text="Hi!"))                     # next request, any model
        fp.enqueue("e429", model="gpt-4o")                # next request for gpt-4o: a built-in scenario
        ...call fp.base_url ("http://127.0.0.1:PORT/v1") with any api key...
        assert fp.requests[0].messages == [...]

    with FakeProvider().running_in_thread() as fp:        # from sync code, or for subprocesses
        ...

    python -m yao_agent.testing.fake_provider [--port P]  # prints "READY <base_url>", stops on SIGTERM/SIGINT

Which reply a request gets: the ``X-Fake-Scenario`` header if present, else the queue of its model, else the
global queue, else ``default(request)`` if given, else the scenario its model names (``text`` if none).

HTTP routes (control routes let tests in another process script and inspect the fake)::

    POST /v1/chat/completions   the fake model
    GET  /v1/models             the built-in scenario names
    POST /_fake/enqueue         {"model"?: str, "replies": [{<Reply fields>} | "<scenario name>", ...]}
    GET  /_fake/requests        {"requests": [<recorded request>, ...]}
    GET  /_fake/disconnects     {"disconnects": [<recorded request>, ...]}
    POST /_fake/reset           forget queues and recordings

Anything else is a 404 in OpenAI's error shape.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any, Final, cast

from aiohttp import web

from yao_agent.testing.fake_scenarios import (
    SCENARIO_NAMES,
    STAMP,
    JsonObject,
    RecordedRequest,
    Reply,
    UnknownScenario,
    builtin_reply,
    reply_for_model,
    reply_from_json,
    scenario_key,
)
from yao_agent.testing.fake_wire import completion_body, error_json, stream_events

QueuedReply = Reply | str
"""A scripted reply, or the name of a built-in scenario resolved when the request arrives (so `echo` works)."""

_POLL_S: Final = 0.01
# Long conversations and inline images exceed aiohttp's 1 MiB default; a fake must accept what a provider would.
_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
# Room for a thousand clients connecting at once (aiohttp's default is 128): connections that overflow the
# accept queue are left to the kernel's SYN retries, which take a second or more.
_BACKLOG: Final = 4096
_SHUTDOWN_TIMEOUT_S: Final = 1.0
_STARTUP_TIMEOUT_S: Final = 30.0


class _Stamped(bytes):
    """An event whose STAMPs become the moment it is written."""

    def now(self) -> bytes:
        return self.replace(STAMP.encode(), f"{time.monotonic():.6f}".encode())


def _sent(event: bytes) -> bytes:
    return event.now() if isinstance(event, _Stamped) else event


def _json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json", headers=headers)


def _error_response(status: int, message: str, code: str | None = None) -> web.Response:
    return web.Response(body=error_json(message, code), status=status, content_type="application/json")


def _drop(request: web.Request) -> None:
    """Close the TCP connection without ending the HTTP body, so the client sees a broken response."""
    transport = request.transport
    if transport is not None:
        transport.close()


def _clamp(mark: int | None, count: int) -> int | None:
    return None if mark is None else min(mark, count)


class FakeProvider:
    """A scriptable, recording fake of an OpenAI-compatible provider on 127.0.0.1.

    All scripting and inspection methods are thread-safe: in thread mode the server runs in its own event
    loop while the test's thread enqueues replies and reads recordings.
    """

    def __init__(
        self,
        *,
        default: Callable[[RecordedRequest], Reply] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._default = default
        self._host = host
        self._wanted_port = port
        self._lock = threading.Lock()
        self._queue: deque[QueuedReply] = deque()
        self._model_queues: dict[str, deque[QueuedReply]] = {}
        self._requests: list[RecordedRequest] = []
        self._disconnects: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing = False
        self._inflight: set[asyncio.Task[Any]] = set()

    # -- scripting and inspection --------------------------------------------------------------------------

    def enqueue(self, *replies: QueuedReply, model: str | None = None) -> None:
        """Queue replies FIFO, for any model or only for `model` (its `provider/` prefix is ignored).

        Scenario names are checked now, so a typo fails where the test is written.
        """
        for item in replies:
            if isinstance(item, str):
                builtin_reply(item)
        with self._lock:
            if model is None:
                self._queue.extend(replies)
            else:
                self._model_queues.setdefault(scenario_key(model), deque()).extend(replies)

    def reset(self) -> None:
        """Forget queued replies, recordings and id counters, as if freshly started."""
        with self._lock:
            self._queue.clear()
            self._model_queues.clear()
            self._requests.clear()
            self._disconnects.clear()
            self._ids = itertools.count(1)
            self._call_ids = itertools.count(1)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat-completions request so far, in arrival order (a snapshot)."""
        with self._lock:
            return list(self._requests)

    @property
    def disconnects(self) -> list[RecordedRequest]:
        """Requests whose client went away before their response was complete, in the order noticed."""
        with self._lock:
            return list(self._disconnects)

    async def wait_for_disconnects(self, n: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least `n` disconnects were recorded; return them all.

        It polls rather than awaiting an event so that it works from any event loop, including a
        throwaway ``asyncio.run(...)`` in sync code while the server runs in its own thread.
        """
        deadline = time.monotonic() + timeout
        while True:
            seen = self.disconnects
            if len(seen) >= n:
                return seen
            if time.monotonic() >= deadline:
                raise TimeoutError(f"saw {len(seen)} of {n} client disconnects within {timeout} s")
            await asyncio.sleep(_POLL_S)

    # -- running -------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the fake provider is not running; use `async with` or running_in_thread()")
        return self._port

    @property
    def base_url(self) -> str:
        """What clients take as their base URL (`.../v1`), as for OpenAI."""
        return f"http://{self._host}:{self.port}/v1"

    async def start(self) -> None:
        """Listen in the current event loop."""
        if self._runner is not None:
            raise RuntimeError("the fake provider is already running")
        # handler_cancellation: a client that goes away cancels its handler at once, even mid-sleep, which is
        # how disconnects get recorded promptly during stalls and slow starts.
        runner = web.AppRunner(
            self._app(), handler_cancellation=True, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT_S
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._wanted_port, backlog=_BACKLOG)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = cast(tuple[str, int], runner.addresses[0])[1]

    async def close(self) -> None:
        """Stop listening and end unfinished responses (not counted as client disconnects)."""
        runner = self._runner
        if runner is None:
            return
        self._closing = True
        try:
            for task in list(self._inflight):
                task.cancel()
            await runner.cleanup()
        finally:
            self._runner = None
            self._port = None
            self._closing = False

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @contextlib.contextmanager
    def running_in_thread(self) -> Generator[FakeProvider]:
        """Serve from a daemon thread with its own event loop, for sync code and subprocess-based tests."""
        ready: Future[Callable[[], object]] = Future()
        thread = threading.Thread(
            target=asyncio.run, args=(self._run_in_thread(ready),), name="fake-provider", daemon=True
        )
        thread.start()
        stop = ready.result(timeout=_STARTUP_TIMEOUT_S)
        try:
            yield self
        finally:
            stop()
            thread.join(timeout=_STARTUP_TIMEOUT_S)

    async def _run_in_thread(self, ready: Future[Callable[[], object]]) -> None:
        """Start, hand `ready` a thread-safe stop function, and serve until it is called."""
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        try:
            await self.start()
        except Exception as exc:
            ready.set_exception(exc)
            return
        try:
            ready.set_result(lambda: loop.call_soon_threadsafe(stopped.set))
            await stopped.wait()
        finally:
            await self.close()

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/_fake/enqueue", self._control_enqueue)
        app.router.add_get("/_fake/requests", self._control_requests)
        app.router.add_get("/_fake/disconnects", self._control_disconnects)
        app.router.add_post("/_fake/reset", self._control_reset)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    # -- the model -----------------------------------------------------------------------------------------

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: object = json.loads(raw)
        except ValueError:
            body = None
        headers = {key.lower(): value for key, value in request.headers.items()}
        record = RecordedRequest.parse(request.path, headers, body, time.time())
        with self._lock:
            self._requests.append(record)
        if not isinstance(body, dict):
            return _error_response(400, "We could not parse the JSON body of your request.")
        try:
            reply = self._choose(record, request.headers.get("X-Fake-Scenario"))
        except UnknownScenario as exc:
            return _error_response(400, str(exc), "unknown_scenario")
        return await self._serve_watched(request, record, reply)

    def _choose(self, record: RecordedRequest, header_scenario: str | None) -> Reply:
        if header_scenario:
            return builtin_reply(header_scenario, record.messages)
        item = self._pop(record.model)
        if isinstance(item, str):
            return builtin_reply(item, record.messages)
        if item is not None:
            return item
        if self._default is None:
            return reply_for_model(record.model, record.messages)
        try:
            return self._default(record)
        except Exception as exc:  # the user's function; report it to their client instead of a bare 500
            return Reply(status=500, error_message=f"the fake provider's default() raised {exc!r}")

    def _pop(self, model: str) -> QueuedReply | None:
        with self._lock:
            queue = self._model_queues.get(scenario_key(model))
            if queue:
                return queue.popleft()
            return self._queue.popleft() if self._queue else None

    def _new_ids(self, reply: Reply) -> tuple[str, list[str]]:
        with self._lock:
            completion_id = f"chatcmpl-fake{next(self._ids)}"
            call_ids = [call.id or f"call_{next(self._call_ids)}" for call in reply.tool_calls]
        return completion_id, call_ids

    async def _serve_watched(self, request: web.Request, record: RecordedRequest, reply: Reply) -> web.StreamResponse:
        """Serve `reply`, recording the client if it goes away before the response is complete."""
        task = asyncio.current_task()
        assert task is not None  # aiohttp runs every handler in a task
        self._inflight.add(task)
        try:
            return await self._respond(request, record, reply)
        except asyncio.CancelledError:
            self._note_disconnect(record)
            raise
        except ConnectionResetError:
            self._note_disconnect(record)
            return web.Response()  # never reaches anyone: aiohttp finds the connection gone
        finally:
            self._inflight.discard(task)

    def _note_disconnect(self, record: RecordedRequest) -> None:
        if not self._closing:
            with self._lock:
                self._disconnects.append(record)

    async def _respond(self, request: web.Request, record: RecordedRequest, reply: Reply) -> web.StreamResponse:
        if reply.first_byte_delay_s:
            await asyncio.sleep(reply.first_byte_delay_s)
        if reply.is_error:
            headers = {} if reply.retry_after is None else {"retry-after": f"{reply.retry_after:g}"}
            return _json_response(reply.error_body(), reply.status, headers)
        completion_id, call_ids = self._new_ids(reply)
        meta: JsonObject = {"completion_id": completion_id, "model": record.model, "created": int(time.time())}
        if not record.stream:
            return await self._respond_whole(request, reply, completion_body(reply, call_ids=call_ids, **meta))
        events = stream_events(reply, call_ids=call_ids, include_usage=record.include_usage, **meta)
        return await self._respond_stream(request, reply, events, completion_id)

    async def _respond_whole(self, request: web.Request, reply: Reply, body: JsonObject) -> web.StreamResponse:
        if reply.drop_after is not None:
            _drop(request)
            return web.Response()  # aiohttp finds the connection closed and sends nothing
        if reply.stall_after is not None:
            await asyncio.sleep(reply.stall_s)
        return _json_response(body, headers={"x-request-id": f"req_{body['id']}"})

    async def _respond_stream(
        self, request: web.Request, reply: Reply, events: list[bytes], completion_id: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "x-request-id": f"req_{completion_id}",
            }
        )
        await response.prepare(request)
        if reply.stamp:
            events = [_Stamped(event) for event in events]
        if not (reply.delay_s or reply.stall_after is not None or reply.drop_after is not None):
            await response.write_eof(b"".join(map(_sent, events)))  # the common case: the whole body in one write
            return response
        stall_at, drop_at = _clamp(reply.stall_after, len(events)), _clamp(reply.drop_after, len(events))
        sent = 0
        for mark in sorted({mark for mark in (stall_at, drop_at, len(events)) if mark is not None}):
            await self._write_events(response, events, sent, mark, reply.delay_s)
            sent = mark
            if mark == stall_at:
                await asyncio.sleep(reply.stall_s)
            if mark == drop_at:
                _drop(request)
                return response
        await response.write_eof()
        return response

    @staticmethod
    async def _write_events(
        response: web.StreamResponse, events: list[bytes], start: int, stop: int, delay: float
    ) -> None:
        """Write events[start:stop]: in one write when there is no pacing, else one per `delay` seconds."""
        if not delay:
            if stop > start:
                await response.write(b"".join(map(_sent, events[start:stop])))
            return
        for index in range(start, stop):
            if index:
                await asyncio.sleep(delay)
            await response.write(_sent(events[index]))

    # -- other routes --------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        names = [name.replace(":N", ":20").replace(":MS", ":100") for name in SCENARIO_NAMES]
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "yao-agent-fake"} for name in names]
        return _json_response({"object": "list", "data": data})

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error_response(404, f"Invalid URL ({request.method} {request.path})", "unknown_url")

    async def _control_enqueue(self, request: web.Request) -> web.Response:
        try:
            model, replies = _parse_enqueue(json.loads(await request.read()))
            self.enqueue(*replies, model=model)
        except ValueError as exc:  # includes bad JSON and unknown scenario names
            return _error_response(400, str(exc), "invalid_enqueue")
        return _json_response({"queued": len(replies)})

    async def _control_requests(self, request: web.Request) -> web.Response:
        return _json_response({"requests": [record.to_json() for record in self.requests]})

    async def _control_disconnects(self, request: web.Request) -> web.Response:
        return _json_response({"disconnects": [record.to_json() for record in self.disconnects]})

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json_response({"reset": True})


def _parse_enqueue(data: object) -> tuple[str | None, list[QueuedReply]]:
    """Read `{"model"?: str, "replies": [...]}`, each reply a JSON `Reply` or a scenario name."""
    if not isinstance(data, dict):
        raise ValueError('expected a JSON object {"model"?: str, "replies": [...]}')
    obj = cast(JsonObject, data)
    model, items = obj.get("model"), obj.get("replies")
    if not isinstance(model, str | None) or not isinstance(items, list):
        raise ValueError('"replies" must be a list and "model", if given, a string')
    replies = [item if isinstance(item, str) else reply_from_json(item) for item in cast(list[Any], items)]
    return model, replies


async def _serve_until_signalled(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeProvider(host=host, port=port) as provider:
        print(f"READY {provider.base_url}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Process mode: serve until SIGTERM or SIGINT, announcing the base URL on one `READY` line."""
    parser = argparse.ArgumentParser(prog="python -m yao_agent.testing.fake_provider", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    args = parser.parse_args(argv)
    asyncio.run(_serve_until_signalled(cast(str, args.host), cast(int, args.port)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
