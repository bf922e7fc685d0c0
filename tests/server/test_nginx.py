"""nginx in front of two `yao-agent serve` processes on one PostgreSQL database (CONTRACT §8.3), with the
configuration the docs ship (docs/deploy/nginx.conf), as a client of the proxy sees it: runs spread over
both servers, streams that arrive event by event, cancels, appends and approvals that reach a run on the
other server, a client that hangs up, a server killed mid-stream, and a rolling restart.

The servers are started once for the module (a start takes seconds); each test gets a fresh nginx, whose
access log says which server answered each request. The model is the loopback fake provider, in a thread.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.approvals import APPROVE, counted, events_of, payer_files, waiting_reply
from tests.support.apps import make_app
from tests.support.nginx import Nginx, Server, fronting, require_nginx, started
from tests.support.postgres import pg_admin_truncate
from tests.support.waits import wait_until
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.records import RunRecord
from yao_agent.testing import FakeProvider, Reply

pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("nginx")]  # one cluster for the module, on one worker
ALICE = Identity("alice")
LEASE_TTL_S = 2  # a killed server's chats are free this soon (the default, 30 s, is for production)
ENV = {"YAO_AGENT_LEASE_TTL_S": str(LEASE_TTL_S)}
RUNS = "/api/assistants/chat/runs"
Events = list[dict[str, Any]]
Then = Callable[[str], Awaitable[None]]  # what a test does to a chat while its run streams


@dataclass
class Cluster:
    servers: Sequence[Server]
    provider: FakeProvider
    token: str
    db: str


@pytest.fixture(scope="module")
def shared_provider() -> Iterator[FakeProvider]:
    with FakeProvider().running_in_thread() as provider:  # in a thread: it serves every test of the module
        yield provider


@pytest.fixture(scope="module")
def cluster(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProvider
) -> Iterator[Cluster]:
    """Two servers of the app on one fresh database, and alice's token."""
    require_nginx()
    pg_admin_truncate(pg_database)
    root = tmp_path_factory.mktemp("behind-nginx")
    app = make_app(root / "app", payer_files(shared_provider.base_url), base={})
    token = asyncio.run(prepared(pg_database, root))
    servers = [Server(app, pg_database, root / f"serve{n}.err", ENV) for n in (1, 2)]
    with started(servers):
        yield Cluster(servers, shared_provider, token, pg_database)


async def prepared(db: str, root: Path) -> str:
    """The database migrated (before two servers start on it at once), and a token for alice."""
    store = SqlStore(await open_engine(store_url(db, root)))
    try:
        return await store.create_token(OPERATOR, ALICE)
    finally:
        await store.aclose()


@pytest.fixture
def nginx(cluster: Cluster, tmp_path: Path) -> Iterator[Nginx]:
    """A fresh nginx in front of both servers (serving again, if a test stopped one): its turns start with
    the first server, and no server is marked failed."""
    cluster.provider.reset()
    for server in cluster.servers:
        if not server.running:
            server.start()
    with fronting([s.address for s in cluster.servers], tmp_path / "nginx") as proxy:
        yield proxy


@pytest.fixture
async def store(cluster: Cluster, tmp_path: Path) -> AsyncIterator[SqlStore]:
    """The servers' database, to read what they stored."""
    opened = SqlStore(await open_engine(store_url(cluster.db, tmp_path)))
    try:
        yield opened
    finally:
        await opened.aclose()


def client(nginx: Nginx, cluster: Cluster, **headers: str) -> httpx.AsyncClient:
    """alice's client of the proxy."""
    return httpx.AsyncClient(base_url=nginx.url, headers={"Authorization": f"Bearer {cluster.token}", **headers},
                             timeout=30)  # fmt: skip


def says(text: str, **more: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **more}


async def run_of(store: SqlStore, chat_id: str) -> RunRecord:
    run = await store.latest_run(ALICE, chat_id)
    assert run is not None
    return run


def holder(cluster: Cluster, run: RunRecord) -> Server:
    """The server whose process ran `run` (a run stores its process as `host|pid|boot`)."""
    pid = int(run.owner.split("|")[1])
    return next(s for s in cluster.servers if s.pid == pid)


def other(cluster: Cluster, server: Server) -> Server:
    return next(s for s in cluster.servers if s is not server)


def answered_by(nginx: Nginx, path: str) -> str:
    """The server that answered the one request for `path` nginx has logged. nginx writes a request's line
    once it has sent the response's last byte, which the client may have read a moment before: waited for."""
    deadline = time.monotonic() + 10
    while not (found := nginx.answers(path)) and time.monotonic() < deadline:
        time.sleep(0.02)  # (nginx is another process: nothing on this loop writes its log)
    (answer,) = found
    return answer.upstreams[-1]


def event_of(line: str) -> dict[str, Any] | None:
    return json.loads(line[6:]) if line.startswith("data: ") and line != "data: [DONE]" else None


# --- spreading, streaming -----------------------------------------------------------------------------------


async def test_runs_through_nginx_are_spread_over_both_servers(cluster: Cluster, nginx: Nginx, store: SqlStore) -> None:
    """Each run stores the process that ran it. The caller's token and trace context pass through."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    async with client(nginx, cluster, traceparent=f"00-{trace_id}-b7ad6b7169203331-01") as alice:
        answers = [await alice.post(f"{RUNS}?stream=false", json=says(f"hello {n}")) for n in range(4)]
    assert [(a.status_code, a.json()["status"]) for a in answers] == [(200, "completed")] * 4
    runs = [await run_of(store, a.json()["chat_id"]) for a in answers]
    assert {holder(cluster, r) for r in runs} == set(cluster.servers)
    assert {r.trace_id for r in runs} == {trace_id}  # each run joined the caller's trace


@pytest.mark.slow
@pytest.mark.parametrize("route", ["native", "openai"])
async def test_a_stream_through_nginx_arrives_event_by_event(cluster: Cluster, nginx: Nginx, route: str) -> None:
    """Each of 20 deltas, one every 0.1 s, carries the moment the model sent it: each reaches the client at
    once, where a buffering proxy would hold the first ones until the stream's end, 2 s later."""
    cluster.provider.enqueue("clock:20:100")
    path, body = (RUNS, says("tick")) if route == "native" else ("/v1/chat/completions", {
        "model": "chat", "stream": True, "messages": says("tick")["messages"]})  # fmt: skip
    late: list[float] = []
    async with client(nginx, cluster) as alice, alice.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            now = time.monotonic()
            late.extend(now - float(stamp) for stamp in delta_text(event_of(line)).split())
    assert len(late) == 20
    assert max(late) < 0.5, late


def delta_text(event: dict[str, Any] | None) -> str:
    """The text a native `message_delta` or an OpenAI chunk carries."""
    if event is None:
        return ""
    if "choices" in event:
        choices = event["choices"]
        return (choices[0]["delta"].get("content") or "") if choices else ""
    return event.get("text", "") if event["type"] == "message_delta" else ""


async def test_a_stream_that_pauses_is_neither_cut_nor_held_back(cluster: Cluster, nginx: Nginx) -> None:
    """The model says a little, thinks for 3 s, says the rest: what came first is read before the pause ends."""
    cluster.provider.enqueue(Reply(text="Before the pause. After it.", chunk_size=4, stall_after=3, stall_s=3))
    arrived: list[tuple[float, dict[str, Any]]] = []
    async with client(nginx, cluster) as alice, alice.stream("POST", RUNS, json=says("think")) as response:
        async for line in response.aiter_lines():
            event = event_of(line)
            if event is not None:
                arrived.append((time.monotonic(), event))
    deltas = [at for at, e in arrived if e["type"] == "message_delta"]
    end_at, end = arrived[-1]
    assert (end["type"], end["status"]) == ("stream_end", "completed")
    assert end_at - deltas[0] > 2.5  # the first words were on screen during the pause
    assert [e["content"] for _, e in arrived if e["type"] == "message_end"] == ["Before the pause. After it."]


# --- cancel, append, approvals: reaching the other server -------------------------------------------------


async def stream_until(
    alice: httpx.AsyncClient, body: dict[str, Any], at: int, then: Then, events: Events, path: str = RUNS
) -> str:
    """Stream a run into `events`; after its `at`-th event, await `then(chat_id)`. Its chat id."""
    async with alice.stream("POST", path, json=body) as response:
        chat_id = response.headers["x-chat-id"]
        async for line in response.aiter_lines():
            event = event_of(line)
            if event is not None:
                events.append(event)
                if len(events) == at:
                    await then(chat_id)
    return chat_id


async def test_a_cancel_through_nginx_reaches_the_run_on_the_other_server(
    cluster: Cluster, nginx: Nginx, store: SqlStore
) -> None:
    cluster.provider.enqueue(Reply(text="c" * 300, chunk_size=1, delay_s=0.02))
    said: list[httpx.Response] = []
    async with client(nginx, cluster) as alice:

        async def cancel(chat_id: str) -> None:
            said.append(await alice.post(f"/api/chats/{chat_id}/cancel"))

        events: Events = []
        chat_id = await stream_until(alice, says("go on and on"), 4, cancel, events)
    assert said[0].json() == {"cancelled": 1}
    assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "cancelled")
    assert (await run_of(store, chat_id)).status == "cancelled"
    assert answered_by(nginx, f"/api/chats/{chat_id}/cancel") != answered_by(nginx, RUNS)


async def test_an_append_through_nginx_reaches_the_run_on_the_other_server(cluster: Cluster, nginx: Nginx) -> None:
    cluster.provider.enqueue(Reply(text="a" * 300, chunk_size=1, delay_s=0.02), Reply(text="About that, too."))
    said: list[httpx.Response] = []
    async with client(nginx, cluster) as alice:

        async def append(chat_id: str) -> None:
            said.append(await alice.post(f"/api/chats/{chat_id}/append", json=says("and one more thing")))

        events: Events = []
        chat_id = await stream_until(alice, says("tell me"), 4, append, events)
    assert answered_by(nginx, f"/api/chats/{chat_id}/append") != answered_by(nginx, RUNS)
    assert said[0].status_code == 200, said[0].text
    assert events[-1]["status"] == "completed"
    assert cluster.provider.requests[-1].messages[-1] == {"role": "user", "content": "and one more thing"}


async def test_an_approval_through_nginx_continues_the_run_on_the_other_server(
    cluster: Cluster, nginx: Nginx, store: SqlStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    cluster.provider.enqueue(waiting_reply(ledger), Reply(text="Paid."))
    async with client(nginx, cluster) as alice:
        waited = await events_of(alice, "/api/assistants/payer/runs", says("pay and add"))
        chat_id = waited[0]["chat_id"]
        continued = await events_of(alice, f"/api/chats/{chat_id}/approvals", APPROVE)
    assert (waited[-1]["status"], continued[-1]["status"]) == ("waiting", "completed")
    assert counted(ledger) == ["paid"]  # the tool ran once, on the server that continued the run
    run = await run_of(store, chat_id)
    assert run.resumed_from == waited[-1]["run_id"]
    assert answered_by(nginx, f"/api/chats/{chat_id}/approvals") != answered_by(nginx, "/api/assistants/payer/runs")


# --- a client that leaves, a server that dies ----------------------------------------------------------------


async def test_a_client_hanging_up_on_nginx_cancels_its_run_and_frees_the_chat(
    cluster: Cluster, nginx: Nginx, store: SqlStore
) -> None:
    cluster.provider.enqueue(Reply(text="x" * 500, chunk_size=1, delay_s=0.02), Reply(text="Back again."))
    async with client(nginx, cluster) as alice:
        async with alice.stream("POST", RUNS, json=says("bye")) as response:
            chat_id = response.headers["x-chat-id"]
            async for line in response.aiter_lines():
                if '"message_delta"' in line:
                    break  # and hang up

        async def stored_cancelled() -> bool:
            return (await run_of(store, chat_id)).status == "cancelled"

        await wait_until(stored_cancelled, within=10)
        await cluster.provider.wait_for_disconnects(1)  # the model call was given up too
        # With on_busy: reject, a chat still held would be a 409: it is free for the next run at once.
        again = await alice.post(f"{RUNS}?stream=false", json=says("again", chat_id=chat_id, on_busy="reject"))
    assert (again.status_code, again.json()["status"]) == (200, "completed"), again.text


async def test_a_server_killed_mid_stream_cuts_its_stream_and_the_chat_carries_on_on_the_other(
    cluster: Cluster, nginx: Nginx, store: SqlStore
) -> None:
    """The client sees its stream cut (nobody is left to end it). Its next message on the chat waits for the
    killed server's lease to expire, then runs on the other server; the killed run is stored interrupted."""
    cluster.provider.enqueue(Reply(text="k" * 300, chunk_size=1, delay_s=0.02), Reply(text="Carrying on."))
    async with client(nginx, cluster) as alice:
        chat_id, events, killed = await killed_mid_stream(alice, cluster, store)
        assert "stream_end" not in [e["type"] for e in events]
        next_one = await alice.post(f"{RUNS}?stream=false", json=says("still there?", chat_id=chat_id))
    assert (next_one.status_code, next_one.json()["status"]) == (200, "completed"), next_one.text
    latest, cut = await store.runs_of(ALICE, chat_id, limit=2)
    assert (cut.status, holder(cluster, latest)) == ("interrupted", other(cluster, killed))


async def test_a_run_of_a_killed_server_resumes_on_the_other_once_its_lease_expired(
    cluster: Cluster, nginx: Nginx, store: SqlStore
) -> None:
    cluster.provider.enqueue(Reply(text="k" * 300, chunk_size=1, delay_s=0.02), Reply(text="Finished elsewhere."))
    async with client(nginx, cluster) as alice:
        chat_id, _, killed = await killed_mid_stream(alice, cluster, store)

        async def interrupted() -> bool:
            point = await alice.get(f"/api/chats/{chat_id}/resume")
            return point.status_code == 200 and point.json()["status"] == "interrupted"

        await wait_until(interrupted, within=3 * LEASE_TTL_S)
        resumed = await events_of(alice, f"/api/chats/{chat_id}/resume", None)
    assert resumed[-1]["status"] == "completed"
    assert holder(cluster, await run_of(store, chat_id)) is other(cluster, killed)


async def killed_mid_stream(alice: httpx.AsyncClient, cluster: Cluster, store: SqlStore) -> tuple[str, Events, Server]:
    """A run streamed through nginx whose server is killed (SIGKILL) after its 4th event: its chat, the
    events that came before, and the server killed."""
    killed: list[Server] = []
    seen: list[str] = []

    async def kill(chat_id: str) -> None:
        seen.append(chat_id)
        killed.append(holder(cluster, await run_of(store, chat_id)))
        killed[0].signal(signal.SIGKILL)

    events: Events = []
    # nginx ends the response without its last chunk: the client can tell the stream was cut, not ended
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        await stream_until(alice, says("a long one"), 4, kill, events)
    return seen[0], events, killed[0]


# --- a rolling restart ----------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_rolling_restart_behind_nginx_loses_no_stream_and_refuses_no_request(
    cluster: Cluster, nginx: Nginx, store: SqlStore
) -> None:
    """SIGTERM one server while a stream runs through it: the stream ends normally, every request sent
    meanwhile is served by the other server (one nginx sent to the draining server first, which refused
    it: sent again), the drained server exits 0; started again, it serves again."""
    cluster.provider.enqueue(Reply(text="d" * 150, chunk_size=1, delay_s=0.02))
    meanwhile: list[httpx.Response] = []
    drained: list[Server] = []
    async with client(nginx, cluster) as alice:

        async def drain(chat_id: str) -> None:
            drained.append(holder(cluster, await run_of(store, chat_id)))
            drained[0].signal(signal.SIGTERM)
            await wait_until(lambda: draining(alice, drained[0]), within=10)
            meanwhile.extend([await alice.post(f"{RUNS}?stream=false", json=says(f"meanwhile {n}")) for n in range(4)])

        events: Events = []
        await stream_until(alice, says("a long one"), 4, drain, events)
        assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "completed")
        assert [(a.status_code, a.json().get("status")) for a in meanwhile] == [(200, "completed")] * 4
        served = {holder(cluster, await run_of(store, a.json()["chat_id"])) for a in meanwhile}
        assert served == {other(cluster, drained[0])}
        tried = [(a.upstreams, a.upstream_statuses) for a in nginx.answers(f"{RUNS}?stream=false")]
        assert ((drained[0].address, other(cluster, drained[0]).address), ("503", "200")) in tried, tried
        assert await asyncio.to_thread(drained[0].exited, 30) == 0
        await asyncio.to_thread(drained[0].start)
        # nginx never set it aside for having refused (max_fails=0): the next two runs are one each.
        again = [await alice.post(f"{RUNS}?stream=false", json=says(f"again {n}")) for n in range(2)]
    assert {holder(cluster, await run_of(store, a.json()["chat_id"])) for a in again} == set(cluster.servers)


async def draining(alice: httpx.AsyncClient, server: Server) -> bool:
    """Whether the server, asked directly, says it is draining (`/readyz` 503)."""
    return (await alice.get(f"http://{server.address}/readyz")).status_code == 503
