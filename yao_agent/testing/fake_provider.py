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
global queue (not for embeddings: they take only their model's queue), else ``default(request)`` if given,
else the scenario its model names (``text`` if none).

HTTP routes (control routes let tests in another process script and inspect the fake)::

    POST /v1/chat/completions   the fake model
    POST /v1/embeddings         hashed vectors (`yao_agent.testing.fake_embeddings`); the request is
                                recorded and takes its reply as a chat request does: an error reply
                                (`e401`, `e429`, `e500`... by model name, header or queue) is served
                                as such, any other reply gets the vectors
    GET  /v1/models             the built-in scenario names
    POST /_fake/enqueue         {"model"?: str, "replies": [{<Reply fields>} | "<scenario name>", ...]}
    GET  /_fake/requests        {"requests": [<recorded request>, ...]}
    GET  /_fake/disconnects     {"disconnects": [<recorded request>, ...]}
    POST /_fake/reset           forget queues and recordings

Anything else is a 404 in OpenAI's error shape.

The server is this module; what it answers and records is its `FakeScript` (`yao_agent.testing.fake_script`),
and how a reply is written on the wire, `yao_agent.testing.fake_responses`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any, Final, cast

from aiohttp import web

from yao_agent.testing.fake_embeddings import BadEmbeddingsRequest, embeddings_body, embeddings_request
from yao_agent.testing.fake_responses import error_response, json_response, respond
from yao_agent.testing.fake_scenarios import (
    SCENARIO_NAMES,
    JsonObject,
    RecordedRequest,
    Reply,
    UnknownScenario,
    reply_from_json,
)
from yao_agent.testing.fake_script import FakeScript, QueuedReply

__all__ = ["FakeProvider", "QueuedReply", "main"]

# Long conversations and inline images exceed aiohttp's 1 MiB default; a fake must accept what a provider would.
_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
# Room for a thousand clients connecting at once (aiohttp's default is 128): connections that overflow the
# accept queue are left to the kernel's SYN retries, which take a second or more.
_BACKLOG: Final = 4096
_SHUTDOWN_TIMEOUT_S: Final = 1.0
_STARTUP_TIMEOUT_S: Final = 30.0


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
        self.script = FakeScript(default)
        self._host = host
        self._wanted_port = port
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing = False
        self._inflight: set[asyncio.Task[Any]] = set()

    # -- scripting and inspection: the script's ------------------------------------------------------------

    def enqueue(self, *replies: QueuedReply, model: str | None = None) -> None:
        """Queue replies FIFO, for any model or only for `model` (its `provider/` prefix is ignored).

        Scenario names are checked now, so a typo fails where the test is written.
        """
        self.script.enqueue(*replies, model=model)

    def reset(self) -> None:
        """Forget queued replies, recordings and id counters, as if freshly started."""
        self.script.reset()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request to the model (chats and embeddings: see `path`) so far, in arrival order."""
        return self.script.requests

    @property
    def disconnects(self) -> list[RecordedRequest]:
        """Requests whose client went away before their response was complete, in the order noticed."""
        return self.script.disconnects

    async def wait_for_disconnects(self, n: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least `n` disconnects were recorded (from any event loop); return them all."""
        return await self.script.wait_for_disconnects(n, timeout)

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
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", _models)
        app.router.add_post("/_fake/enqueue", self._control_enqueue)
        app.router.add_get("/_fake/requests", self._control_requests)
        app.router.add_get("/_fake/disconnects", self._control_disconnects)
        app.router.add_post("/_fake/reset", self._control_reset)
        app.router.add_route("*", "/{tail:.*}", _not_found)
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
        self.script.record(record)
        if not isinstance(body, dict):
            return error_response(400, "We could not parse the JSON body of your request.")
        try:
            reply = self.script.choose(record, request.headers.get("X-Fake-Scenario"))
        except UnknownScenario as exc:
            return error_response(400, str(exc), "unknown_scenario")
        return await self._serve_watched(request, record, reply)

    async def _embeddings(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body: object = json.loads(raw)
        except ValueError:
            body = None
        headers = {key.lower(): value for key, value in request.headers.items()}
        record = RecordedRequest.parse(request.path, headers, body, time.time())
        self.script.record(record)
        try:
            texts, dims, encoding = embeddings_request(body)
            reply = self.script.choose(record, request.headers.get("X-Fake-Scenario"))
        except (BadEmbeddingsRequest, UnknownScenario) as exc:
            return error_response(400, str(exc))
        if reply.first_byte_delay_s:
            await asyncio.sleep(reply.first_byte_delay_s)
        if reply.is_error:
            retry = {} if reply.retry_after is None else {"retry-after": f"{reply.retry_after:g}"}
            return json_response(reply.error_body(), reply.status, retry)
        return json_response(embeddings_body(record.model, texts, dims, encoding))

    async def _serve_watched(self, request: web.Request, record: RecordedRequest, reply: Reply) -> web.StreamResponse:
        """Serve `reply`, recording the client if it goes away before the response is complete."""
        task = asyncio.current_task()
        assert task is not None  # aiohttp runs every handler in a task
        self._inflight.add(task)
        try:
            return await respond(request, record, reply, self.script.new_ids(reply))
        except asyncio.CancelledError:
            self._note_disconnect(record)
            raise
        except ConnectionResetError:
            self._note_disconnect(record)
            return web.Response()  # never reaches anyone: aiohttp finds the connection gone
        finally:
            self._inflight.discard(task)

    def _note_disconnect(self, record: RecordedRequest) -> None:
        if not self._closing:  # a response the fake itself ended on closing is no client's disconnect
            self.script.record_disconnect(record)

    # -- control routes ------------------------------------------------------------------------------------

    async def _control_enqueue(self, request: web.Request) -> web.Response:
        try:
            model, replies = _parse_enqueue(json.loads(await request.read()))
            self.enqueue(*replies, model=model)
        except ValueError as exc:  # includes bad JSON and unknown scenario names
            return error_response(400, str(exc), "invalid_enqueue")
        return json_response({"queued": len(replies)})

    async def _control_requests(self, request: web.Request) -> web.Response:
        return json_response({"requests": [record.to_json() for record in self.requests]})

    async def _control_disconnects(self, request: web.Request) -> web.Response:
        return json_response({"disconnects": [record.to_json() for record in self.disconnects]})

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return json_response({"reset": True})


async def _models(request: web.Request) -> web.Response:
    names = [name.replace(":N", ":20").replace(":MS", ":100") for name in SCENARIO_NAMES]
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "yao-agent-fake"} for name in names]
    return json_response({"object": "list", "data": data})


async def _not_found(request: web.Request) -> web.Response:
    return error_response(404, f"Invalid URL ({request.method} {request.path})", "unknown_url")


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
