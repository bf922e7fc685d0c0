"""Serving as an operator deploys it (CONTRACT §8.3, §8.4): `serve --workers N` on PostgreSQL, draining on
SIGTERM, workers that die and come back, and the app's files changed while it serves — each server a real
OS process of `yao-agent serve`, the model the loopback fake provider of this process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.support.apps import make_app
from tests.support.runtimes import app_files
from tests.support.servers import said, stopped
from tests.support.waits import free_port
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.schema import runs as runs_table
from yao_agent.testing import FakeProvider, Reply

REPO = Path(__file__).resolve().parents[2]
ALICE = Identity("alice")
PROMPT = "name: Chat\nprompts:\n  - role: system\n    content: You are version {n}.\n"


@pytest.fixture
async def pg_store(pg_database: str, tmp_path: Path) -> AsyncIterator[tuple[str, SqlStore]]:
    from tests.support.postgres import pg_admin_truncate

    pg_admin_truncate(pg_database)
    store = SqlStore(await open_engine(store_url(pg_database, tmp_path)))
    try:
        yield pg_database, store
    finally:
        await store.aclose()


@asynccontextmanager
async def two_workers(
    tmp_path: Path, provider: FakeProvider, pg_store: tuple[str, SqlStore]
) -> AsyncGenerator[tuple[Path, SqlStore, asyncio.subprocess.Process, httpx.AsyncClient]]:
    """`serve --workers 2` of a chat app on PostgreSQL: the app folder, the store, the supervisor's process and
    alice's client (its log: tmp_path/serve.err)."""
    db, store = pg_store
    app = chat_app(tmp_path / "app", provider)
    token = await store.create_token(OPERATOR, ALICE)
    async with (
        serving(app, db, tmp_path / "serve.err", "--workers", "2") as (url, supervisor),
        fresh(url, token) as client,
    ):
        yield app, store, supervisor, client


def chat_app(root: Path, provider: FakeProvider) -> Path:
    files = app_files(provider.base_url)
    files["assistants/chat/assistant.yml"] = PROMPT.format(n=1)
    return make_app(root, files, base={})


@asynccontextmanager
async def serving(
    app: Path, db: str, err: Path, *options: str
) -> AsyncGenerator[tuple[str, asyncio.subprocess.Process]]:
    """`yao-agent serve` with `options` in a process of its own, once it says it serves: its URL and process."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAO_AGENT_LEASE_TTL_S": "2"}
    with err.open("w") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", db, "serve", "--port", str(port),
            *options, stdout=asyncio.subprocess.PIPE, stderr=errors, env=env, cwd=REPO,
        )  # fmt: skip
    try:
        assert process.stdout is not None
        banner = await asyncio.wait_for(process.stdout.readline(), 60)
        assert f"127.0.0.1:{port}" in banner.decode(), said(err)
        yield f"http://127.0.0.1:{port}", process
    finally:
        await stopped(process)


def fresh(url: str, token: str) -> httpx.AsyncClient:
    """A client that opens a new connection for every request, so that the kernel may hand each to any worker."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30, limits=limits)


async def ask(client: httpx.AsyncClient, text: str) -> dict[str, Any]:
    answer = await client.post(
        "/api/assistants/chat/runs?stream=false", json={"messages": [{"role": "user", "content": text}]}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


async def stored_runs(store: SqlStore) -> list[tuple[str, str, str | None]]:
    query = select(runs_table.c.status, runs_table.c.owner, runs_table.c.app_version).order_by(runs_table.c.started_at)
    rows = await store.db.read_tx(lambda tx: tx.tuples(query))
    return [(str(status), str(owner), version) for status, owner, version in rows]


def pid_of(owner: str) -> int:
    return int(owner.split("|")[1])


def children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def runs_total(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("yao_runs_total{"))


async def read_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def test_several_workers_on_sqlite_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    import subprocess

    app = make_app(tmp_path / "app", {"app.yml": "roles: {}\n"}, base={})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "yao_agent.cli", "--app", str(app), "serve", "--workers", "2"],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: serve --workers 2 needs a PostgreSQL store: SQLite lets one process write at a time "
        "(use --workers 1, or --db postgresql+psycopg://… / app.yml store)"
    )
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow
@pytest.mark.postgres
async def test_two_workers_share_the_port_the_chats_and_the_metrics(
    tmp_path: Path, provider: FakeProvider, pg_store: tuple[str, SqlStore]
) -> None:
    async with two_workers(tmp_path, provider, pg_store) as (_app, store, supervisor, client):
        answers = await asyncio.gather(*(ask(client, f"hello {n}") for n in range(16)))
        assert {a["status"] for a in answers} == {"completed"}
        owners = {owner for _, owner, _ in await on_both_workers(client, store)}
        assert all(pid_of(o) != supervisor.pid for o in owners)
        # A chat started on one worker goes on on whichever takes the next request.
        chat_id = answers[0]["chat_id"]
        for n in range(4):
            body = {"chat_id": chat_id, "messages": [{"role": "user", "content": f"again {n}"}]}
            assert (await client.post("/api/assistants/chat/runs?stream=false", json=body)).status_code == 200
        history = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        assert [m["content"] for m in history if m["role"] == "user"] == [
            "hello 0",
            "again 0",
            "again 1",
            "again 2",
            "again 3",
        ]
        # Every scrape, whichever worker answers it, counts the runs of both.
        total = len(await stored_runs(store))
        for _ in range(6):
            assert runs_total((await client.get("/metrics")).text) == total
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(supervisor.wait(), 30) == 0, said(tmp_path / "serve.err")


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_worker_killed_mid_run_is_replaced_and_its_run_is_resumable(
    tmp_path: Path, provider: FakeProvider, pg_store: tuple[str, SqlStore]
) -> None:
    async with two_workers(tmp_path, provider, pg_store) as (_app, store, supervisor, client):
        provider.enqueue(Reply(text="z" * 300, chunk_size=1, delay_s=0.02), Reply(text="resumed"))
        body = {"messages": [{"role": "user", "content": "long"}]}
        chat_id = owner = ""
        with pytest.raises(httpx.HTTPError):  # the stream is cut: its worker is gone
            async with client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
                chat_id = response.headers["x-chat-id"]
                async for event in read_events(response):
                    if event["type"] == "message_delta":
                        [(_, owner, _)] = await stored_runs(store)
                        os.kill(pid_of(owner), signal.SIGKILL)
        point = None
        for _ in range(100):  # a new worker marks the killed one's run interrupted when it starts
            point = await client.get(f"/api/chats/{chat_id}/resume")
            if point.status_code == 200 and point.json()["status"] == "interrupted":
                break
            await asyncio.sleep(0.1)
        assert point is not None and point.json()["status"] == "interrupted", point and point.text
        resumed = await client.post(f"/api/chats/{chat_id}/resume?stream=false")
        assert (resumed.status_code, resumed.json()["status"]) == (200, "completed"), resumed.text
        workers = children(supervisor.pid)
        assert len(workers) == 2 and pid_of(owner) not in workers  # one in the killed one's place
        # and it serves, once it has started: on a loaded machine its imports alone can take seconds
        deadline = asyncio.get_running_loop().time() + 90
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.gather(*(ask(client, f"after {k}") for k in range(6)))
            if workers <= {pid_of(o) for _, o, _ in await stored_runs(store)}:
                break
            await asyncio.sleep(0.2)
        assert workers <= {pid_of(o) for _, o, _ in await stored_runs(store)}
        assert re.search(r"worker \d \(pid \d+\) exited with -9; starting another", said(tmp_path / "serve.err"))
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(supervisor.wait(), 30) == 0


@pytest.mark.slow
@pytest.mark.postgres
async def test_sigterm_drains_every_worker_the_runs_in_flight_finish(
    tmp_path: Path, provider: FakeProvider, pg_store: tuple[str, SqlStore]
) -> None:
    async with two_workers(tmp_path, provider, pg_store) as (_app, store, supervisor, client):
        text = "d" * 100
        provider.enqueue(Reply(text=text, chunk_size=1, delay_s=0.02))
        events: list[dict[str, Any]] = []
        refused: list[httpx.Response] = []
        async with client.stream(
            "POST", "/api/assistants/chat/runs", json={"messages": [{"role": "user", "content": "long"}]}
        ) as response:
            async for event in read_events(response):
                events.append(event)
                if len(events) == 5:
                    supervisor.send_signal(signal.SIGTERM)
                    await asyncio.sleep(0.3)
                    refused += [
                        await client.get("/readyz"),
                        await client.post(
                            "/api/assistants/chat/runs", json={"messages": [{"role": "user", "content": "new"}]}
                        ),
                        await client.post(
                            "/v1/chat/completions",
                            json={"model": "chat", "messages": [{"role": "user", "content": "new"}]},
                        ),
                    ]
        assert await asyncio.wait_for(supervisor.wait(), 30) == 0
    assert (events[-1]["type"], events[-1]["status"]) == ("stream_end", "completed")
    assert "".join(e.get("text", "") for e in events if e["type"] == "message_delta") == text
    for answer in refused:
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["type"] == "unavailable"
    assert [s for s, _, _ in await stored_runs(store)] == ["completed"]  # the refused run left nothing


@pytest.mark.slow
@pytest.mark.postgres
async def test_workers_converge_on_an_edited_app_and_keep_the_last_good_one(
    tmp_path: Path, provider: FakeProvider, pg_store: tuple[str, SqlStore]
) -> None:
    async with two_workers(tmp_path, provider, pg_store) as (app, store, supervisor, client):
        first = (await client.get("/api/app")).json()["app_version"]
        (app / "assistants/chat/assistant.yml").write_text(PROMPT.format(n=2))
        second = await converged(client, lambda state: state["app_version"] != first)
        stored = await on_both_workers(client, store)
        assert {v for _, _, v in stored} == {second["app_version"]}
        assert {r.messages[0]["content"] for r in provider.requests} == {"You are version 2."}
        # A broken edit changes nothing: the last good version serves, every worker says why.
        (app / "assistants/chat/assistant.yml").write_text("name: [unclosed\n")
        broken = await converged(client, lambda state: bool(state["errors"]))
        assert broken["app_version"] == second["app_version"]
        assert [e["text"] for e in broken["errors"]] == [
            "assistants/chat/assistant.yml:1: malformed YAML: did not find expected ',' or ']'"
        ]
        assert (await ask(client, "still there?"))["status"] == "completed"
        # SIGHUP (the files fixed meanwhile): every worker loads them at once.
        (app / "assistants/chat/assistant.yml").write_text(PROMPT.format(n=3))
        supervisor.send_signal(signal.SIGHUP)
        third = await converged(
            client, lambda state: not state["errors"] and state["app_version"] != second["app_version"]
        )
        assert (await ask(client, "and now?"))["status"] == "completed"
        assert provider.requests[-1].messages[0]["content"] == "You are version 3."
        assert "app not reloaded (files changed): assistants/chat/assistant.yml:1" in said(tmp_path / "serve.err")
        assert third["app_version"] != first


async def on_both_workers(client: httpx.AsyncClient, store: SqlStore) -> list[tuple[str, str, str | None]]:
    """Runs, a few at a time, until both workers have served some (the kernel's choice): the stored runs."""
    for n in range(20):
        answers = await asyncio.gather(*(ask(client, f"hi {n}.{k}") for k in range(6)))
        assert {a["status"] for a in answers} == {"completed"}
        stored = await stored_runs(store)
        if len({o for _, o, _ in stored}) == 2:
            return stored
    raise AssertionError("one worker served every run")


async def converged(
    client: httpx.AsyncClient, done: Callable[[dict[str, Any]], bool], agreeing: int = 12
) -> dict[str, Any]:
    """`GET /api/app` until `agreeing` answers in a row (each on a new connection, so from either worker)
    satisfy `done`."""
    in_a_row, state = 0, {}
    for _ in range(300):
        state = (await client.get("/api/app")).json()
        in_a_row = in_a_row + 1 if done(state) else 0
        if in_a_row == agreeing:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"the workers did not converge: {state}")
