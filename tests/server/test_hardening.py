"""What one client may take of the server, over real sockets against a real uvicorn on loopback.

Slow clients (a head or a body never finished, a connection left idle) are cut by the server's
deadlines, a flood past the request limit is a 503 while health checks and running streams go on,
and a response that streams for longer than every deadline is never cut. Bodies are checked at the
edge: no NaN or Infinity, no more messages than the limit. A client leaving a non-streamed request
cancels its run, as leaving a stream does.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.support.apps import make_app
from tests.support.docs import block
from tests.support.runtimes import app_files, make_runtime
from tests.support.servers import Live, running, server_files
from tests.support.waits import wait_until
from yao_agent.cli import main
from yao_agent.dsl.specs import DEFAULT_STORE, ServerSettings
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply

ALICE = Identity("alice")
RUN = "/api/assistants/chat/runs"
ONE = [{"role": "user", "content": "hi"}]
WAIT = 30.0  # the most any test waits for a deadline of about a second to fire


def settings_files(base_url: str, **server: object) -> dict[str, str]:
    files = server_files(base_url)
    files["app.yml"] += f"server: {json.dumps(server)}\n"
    files["hooks/h.js"] = "function Create(ctx) { return {max_tokens: ctx.metadata.max_tokens} }\n"
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
    return files


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SqlStore]:
    """One kind of store is enough where what is checked stands in front of it."""
    store = SqlStore(await open_engine(store_url(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path)))
    try:
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def served(tmp_path: Path, store: SqlStore, provider: FakeProvider, **server: object) -> AsyncGenerator[Live]:
    """The test app served with these `server:` settings in its app.yml."""
    async with running(make_runtime(tmp_path / "app", store, settings_files(provider.base_url, **server))) as live:
        yield live


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@asynccontextmanager
async def raw(live: Live) -> AsyncGenerator[Connection]:
    """A bare TCP connection to the server, closed afterwards whatever happened."""
    where = urlsplit(live.url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()


async def until_closed(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """Everything the server still sends, until it closes the connection; and how long that took."""
    start = time.monotonic()
    try:
        data = await asyncio.wait_for(reader.read(), WAIT)
    except ConnectionResetError:
        data = b""
    return data, time.monotonic() - start


async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, every_s: float) -> None:
    """Send `data` a byte at a time, until it is all sent or the server hangs up."""
    for i in range(len(data)):
        if reader.at_eof() or writer.is_closing():
            return
        try:
            writer.write(data[i : i + 1])
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(every_s)


def head(method: str, path: str, token: str | None = None, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    lines += [f"Authorization: Bearer {token}"] if token else []
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- slow clients -------------------------------------------------------------------------------------


async def test_a_connection_that_never_finishes_its_head_is_closed_after_the_header_timeout(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider, header_timeout_s=1) as live:
        async with raw(live) as (reader, _):  # says nothing at all
            silent = await until_closed(reader)
        async with raw(live) as (reader, writer):  # half a head, then nothing
            writer.write(f"POST {RUN} HTTP/1.1\r\nHost: test\r\nAuthorization: Bea".encode())
            half = await until_closed(reader)
        async with raw(live) as (reader, writer):  # a byte every 0.2 s: more bytes never buy more time
            sending = asyncio.create_task(drip(reader, writer, b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * 200, 0.2))
            dripped = await until_closed(reader)
            await sending
    for answer, took in (silent, half, dripped):
        assert answer == b""  # closed, without a word
        assert 0.5 <= took < WAIT  # by the deadline, not at once


async def test_a_half_sent_body_is_answered_408_after_the_body_timeout(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider, body_timeout_s=1) as live, raw(live) as (reader, writer):
        writer.write(head("POST", RUN, live.tokens["alice"], Content_Type="application/json", Content_Length="200"))
        writer.write(b'{"messages": [{"role": "user", "content": "half')
        answer, took = await until_closed(reader)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"type":"request_timeout"' in answer and b"server.body_timeout_s" in answer
    assert b"connection: close" in answer.lower()
    assert 0.5 <= took < WAIT
    assert not provider.requests  # nothing ran


async def test_idle_connections_are_closed_after_the_keep_alive_timeout(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider, keep_alive_s=1, header_timeout_s=1) as live:
        async with raw(live) as (reader, writer):  # answered, then left idle
            writer.write(head("GET", "/healthz"))
            await reader.readuntil(b'{"status":"ok"}')
            idle = await until_closed(reader)
        async with raw(live) as (reader, writer):  # answered, then half of a next head
            writer.write(head("GET", "/healthz"))
            await reader.readuntil(b'{"status":"ok"}')
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            half_next = await until_closed(reader)
    for answer, took in (idle, half_next):
        assert answer == b""
        assert 0.5 <= took < WAIT


async def test_the_rest_of_a_body_already_answered_cannot_hold_the_connection(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    """A request refused before its body is read (here a 401) is answered at once; a client that goes on
    trickling the body nobody reads is hung up on after the body timeout."""
    async with (
        served(tmp_path, sqlite, provider, body_timeout_s=1, keep_alive_s=1) as live,
        raw(live) as (reader, writer),
    ):
        sent_at = time.monotonic()
        writer.write(head("POST", RUN, None, Content_Type="application/json", Content_Length="100000"))
        refused = await reader.readuntil(b'"unauthorized"')
        sending = asyncio.create_task(drip(reader, writer, b"x" * 1000, 0.1))
        _, rest = await until_closed(reader)
        await sending
    assert refused.startswith(b"HTTP/1.1 401 ")
    # From the request's head, not from the moment this test read the answer: on a busy machine the
    # answer may wait in the socket while the body's deadline runs, and it is the server's clock that counts.
    took = time.monotonic() - sent_at
    assert took >= 0.5 and rest < WAIT


async def sse_events(client: httpx.AsyncClient, path: str, body: dict[str, Any], started: asyncio.Event) -> list[Any]:
    events: list[Any] = []
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                started.set()
    return events


async def test_past_the_request_limit_a_request_is_a_503_while_health_checks_and_streams_go_on(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider, max_requests=2) as live, live.client() as client:
        for _ in range(2):
            provider.enqueue(Reply(text="s" * 20, chunk_size=1, delay_s=0.1))
        begun = [asyncio.Event(), asyncio.Event()]
        streams = [asyncio.create_task(sse_events(client, RUN, {"messages": ONE}, b)) for b in begun]
        await asyncio.wait_for(asyncio.gather(*(b.wait() for b in begun)), WAIT)
        busy = await client.get("/api/chats")
        busy_run = await client.post(RUN, json={"messages": ONE})
        health = await client.get("/healthz")
        head_health = await client.head("/healthz")
        finished = await asyncio.wait_for(asyncio.gather(*streams), WAIT)
        after = await client.get("/api/chats")
    for refused in (busy, busy_run):
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["type"] == "overloaded"
        assert "server.max_requests" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
    assert (health.status_code, head_health.status_code) == (200, 200)
    for events in finished:
        assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "completed")
    assert after.status_code == 200  # the streams done, their places are free again
    assert len(provider.requests) == 2  # the refused run never started


async def test_connections_past_the_limit_are_closed_as_they_come(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with (
        served(tmp_path, sqlite, provider, max_connections=3, header_timeout_s=60) as live,
        raw(live) as first,
        raw(live),
        raw(live),
    ):
        # Connected before it, the three are taken before the fourth: a listening socket hands over its
        # connections in the order they came, and the server counts each as it takes it.
        async with raw(live) as (reader, writer):
            writer.write(head("GET", "/healthz"))
            over = await until_closed(reader)
        first[1].close()  # one leaves: a place is free again
        health = None
        for _ in range(50):
            with suppress(httpx.TransportError):
                async with httpx.AsyncClient(timeout=5) as client:
                    health = await client.get(live.url + "/healthz")
                break
            await asyncio.sleep(0.1)
    assert over[0] == b"" and over[1] < 30  # closed at once, long before the 60 s header timeout
    assert health is not None and health.status_code == 200


async def test_a_stream_outlasting_every_timeout_is_never_cut(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    quick = {"header_timeout_s": 0.5, "body_timeout_s": 0.5, "keep_alive_s": 0.5}
    async with served(tmp_path, sqlite, provider, **quick) as live, live.client() as client:
        provider.enqueue(Reply(text="w" * 25, chunk_size=1, delay_s=0.1))  # 2.5 s: five times each deadline
        start = time.monotonic()
        events = await sse_events(client, RUN, {"messages": ONE}, asyncio.Event())
        streamed_for = time.monotonic() - start
        provider.enqueue(Reply(text="v" * 25, chunk_size=1, delay_s=0.1))
        whole = await client.post(RUN + "?stream=false", json={"messages": ONE})
    assert streamed_for > 2
    assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "completed")
    text = "".join(e.get("text") or "" for e in events if e["type"] == "message_delta" and e["kind"] == "text")
    assert text == "w" * 25
    assert whole.status_code == 200 and whole.json()["status"] == "completed"


# --- bodies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "raw_body", "where"),
    [
        ("POST", RUN + "?stream=false", b'{"messages": [{"role": "user", "content": "x"}], "metadata": {"n": NaN}}',
         "metadata.n"),
        ("POST", RUN, b'{"messages": [{"role": "user", "content": "x", "weight": -Infinity}]}', "messages.0.weight"),
        ("POST", "/v1/chat/completions",
         b'{"model": "chat", "messages": [{"role": "user", "content": "x"}], "metadata": {"a": [1, Infinity]}}',
         "metadata.a.1"),
        ("POST", "/api/chats/c1/append", b'{"messages": [{"role": "user", "content": "x", "n": NaN}]}',
         "messages.0.n"),
        ("PUT", "/api/roles/light", b'{"connector": "demo.echo", "x": 1e400}', "x"),
        ("PATCH", "/api/chats/c1", b'{"title": NaN}', "title"),
    ],
)  # fmt: skip
async def test_nan_and_infinity_in_any_json_body_are_a_400(
    live: Live, method: str, path: str, raw_body: bytes, where: str
) -> None:
    async with live.client() as client:
        response = await client.request(method, path, content=raw_body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["param"] == where.split(".")[0]
    assert error["message"].startswith(f"{where}: ") and "not a JSON number" in error["message"]


async def test_nan_and_infinity_as_text_are_just_text(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="ok"))
    said = [{"role": "user", "content": "NaN, Infinity and 1e400 are words here"}]
    async with live.client() as client:
        response = await client.post(RUN + "?stream=false", json={"messages": said, "metadata": {"big": 1e300}})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"


async def test_a_request_with_more_messages_than_the_limit_is_a_413_naming_the_setting(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    six = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    async with served(tmp_path, sqlite, provider, max_messages=5) as live, live.client() as client:
        native = await client.post(RUN + "?stream=false", json={"messages": six})
        openai = await client.post("/v1/chat/completions", json={"model": "chat", "messages": six})
        provider.enqueue(Reply(text="x" * 30, chunk_size=1, delay_s=0.05))
        begun = asyncio.Event()
        stream = asyncio.create_task(sse_events(client, RUN, {"messages": ONE}, begun))
        await asyncio.wait_for(begun.wait(), WAIT)
        chat_id = next(iter(live.runs.process.active.values())).chat_id
        appended = await client.post(f"/api/chats/{chat_id}/append", json={"messages": six})
        appended_five = await client.post(f"/api/chats/{chat_id}/append", json={"messages": six[:5]})
        await asyncio.wait_for(stream, WAIT)
        provider.enqueue(Reply(text="five are fine"))
        five = await client.post(RUN + "?stream=false", json={"messages": six[:5]})
    for refused in (native, openai, appended):
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"]["type"] == "request_too_large"
        assert refused.json()["error"]["message"] == (
            "the request carries 6 messages, more than the 5 one request may carry (server.max_messages)"
        )
    assert appended_five.status_code == 200, appended_five.text
    assert five.status_code == 200 and five.json()["status"] == "completed"
    stored = await live.rt.store.history(ALICE, chat_id)
    assert "m5" not in [m.content for m in stored]  # nothing of a refused request was kept


async def test_the_default_limits_refuse_thousands_of_messages_and_name_the_body_limit(live: Live) -> None:
    many = [{"role": "user", "content": "x"}] * 501
    async with live.client() as client:
        counted = await client.post(RUN, json={"messages": many})
        large = await client.post(RUN, json={"messages": [{"role": "user", "content": "x" * 70_000}]})
    assert counted.status_code == 413 and "the 500 one request may carry" in counted.json()["error"]["message"]
    assert large.status_code == 413
    assert large.json()["error"]["message"] == (
        f"the request body is larger than {64 * 1024} bytes (server.max_body_bytes)"
    )


# --- small ones ----------------------------------------------------------------------------------------


async def test_head_on_healthz_answers_like_get_without_a_body(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        got = await client.get("/healthz")
        headed = await client.head("/healthz")
    assert (headed.status_code, headed.content) == (200, b"")
    assert headed.headers["content-type"] == got.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "body"),
    [(RUN + "?stream=false", {"messages": ONE}),
     ("/v1/chat/completions", {"model": "chat", "messages": ONE, "stream": False})],
)  # fmt: skip
async def test_a_client_leaving_a_non_streamed_request_cancels_its_run_which_resumes(
    live: Live, provider: FakeProvider, path: str, body: dict[str, Any]
) -> None:
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02))  # 8 s, unless cancelled
    data = json.dumps(body).encode()
    async with raw(live) as (_, writer):
        writer.write(head("POST", path, live.tokens["alice"], Content_Type="application/json",
                          Content_Length=str(len(data))) + data)  # fmt: skip
        await wait_until(lambda: live.runs.process.active and provider.requests)  # the run is asking the model
        [handle] = live.runs.process.active.values()
        await asyncio.sleep(0.3)  # some of the answer is in
    # the connection is closed: the client left without its answer
    chat_id = handle.state.chat_id
    await asyncio.wait_for(handle.wait(), WAIT)
    run = await live.rt.store.latest_run(ALICE, chat_id)
    assert run is not None and (run.status, run.reason) == ("cancelled", "cancelled")
    provider.enqueue(Reply(text="back"))
    async with live.client() as client:
        point = await client.get(f"/api/chats/{chat_id}/resume")
        resumed = await client.post(f"/api/chats/{chat_id}/resume?stream=false")
    assert (point.status_code, point.json()["status"]) == (200, "cancelled")
    assert resumed.json()["status"] == "completed"


async def test_a_negative_max_tokens_is_refused_where_it_enters(live: Live, provider: FakeProvider) -> None:
    async with live.client() as client:
        bad = [await client.post("/v1/chat/completions", json={"model": "chat", "messages": ONE, field: -1})
               for field in ("max_tokens", "max_completion_tokens")]  # fmt: skip
    for response, field in zip(bad, ("max_tokens", "max_completion_tokens"), strict=True):
        assert response.status_code == 400 and response.json()["error"]["param"] == field
    assert not provider.requests


async def test_a_create_hook_returning_a_negative_max_tokens_fails_naming_it_before_the_model_call(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider) as live, live.client() as client:
        run = await client.post("/api/assistants/hooked/runs?stream=false",
                                json={"messages": ONE, "metadata": {"max_tokens": -5}})  # fmt: skip
    assert run.status_code == 200
    result = run.json()
    assert (result["status"], result["reason"]) == ("failed", "hook_error")
    assert "max_tokens" in result["error"]["message"] and "-5" in result["error"]["message"]
    assert not provider.requests  # refused before any model call


# --- the operator's terminal -------------------------------------------------------------------------


def cli(app: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["--app", str(app), *args], out=out), out.getvalue()


async def test_tokens_list_escapes_what_could_rewrite_the_terminal(tmp_path: Path) -> None:
    app = make_app(tmp_path, {**app_files("http://127.0.0.1:9")}, base={})
    store = SqlStore(await open_engine(store_url(DEFAULT_STORE, app)))
    try:
        await store.create_token(OPERATOR, Identity("eve", "acme"), "\x1b[31mred\r\n\x00\u202eevil")
    finally:
        await store.aclose()
    code, listing = await asyncio.to_thread(cli, app, "tokens", "list")
    assert code == 0
    assert "\x1b" not in listing and "\r" not in listing and "\x00" not in listing and "\u202e" not in listing
    assert "  \\x1b[31mred\\r\\n\\x00\\u202eevil  " in listing, listing


def test_tokens_create_refuses_a_label_with_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(tmp_path, {**app_files("http://127.0.0.1:9")}, base={})
    assert cli(app, "tokens", "create", "--user", "alice", "--label", "a\x1b[2Jb") == (2, "")
    assert "--label" in capsys.readouterr().err
    code, token = cli(app, "tokens", "create", "--user", "alice", "--label", "laptop – été")
    assert code == 0 and token.startswith("ya_")


# --- what the docs say ------------------------------------------------------------------------------


async def test_more_than_16_kb_of_a_head_still_coming_is_a_400(
    tmp_path: Path, sqlite: SqlStore, provider: FakeProvider
) -> None:
    async with served(tmp_path, sqlite, provider, header_timeout_s=60) as live, raw(live) as (reader, writer):
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * 20_000)  # and no end to the head
        answer, took = await until_closed(reader)
    assert answer.startswith(b"HTTP/1.1 400 ") and took < 30  # at once, not at the header timeout


def test_the_deploying_guide_says_the_server_defaults_as_they_are() -> None:
    defaults: dict[str, Any] = asdict(ServerSettings())
    defaults["cors_origins"] = list(defaults["cors_origins"])  # (a list in YAML)
    assert defaults.pop("oidc") is None  # sign-in is off unless configured: its block is the sign-in guide's
    assert yaml.safe_load(block("server-defaults")) == {"server": defaults}
