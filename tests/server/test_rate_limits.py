"""Rate limits over HTTP, counted across processes (CONTRACT §8.2): `yao-agent serve` processes on one
database, each a real OS process, admit no more runs a minute between them than `limits.requests_per_minute`
says; the others are answered 429 `rate_limited` with a `Retry-After`, and leave nothing behind.

The model is the loopback fake provider of this process; a run is one fast call, so the test is bounded by
the servers' start-up."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Table, func, select

from tests.support.apps import make_app
from tests.support.runtimes import app_files
from tests.support.servers import serving
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.schema import chats, rate_events, runs
from yao_agent.testing import FakeProvider

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

REPO = Path(__file__).resolve().parents[2]
LIMITS = "{max_turns: 10, timeout_s: 30, requests_per_minute: {team: 5}}"
MEMBERS = {"bob": Identity("bob", "acme"), "carol": Identity("carol", "acme"), "dave": Identity("dave", "beta")}
ASKED = 30  # runs asked for at once by the members of acme, spread over the servers


async def count(store: SqlStore, table: Table) -> int:
    return int(await store.db.read_tx(lambda tx: tx.scalar(select(func.count()).select_from(table))))


@pytest.mark.slow
@pytest.mark.parametrize("servers", [1, 2], ids=["one-server", "two-servers"])
async def test_concurrent_runs_of_a_team_on_servers_sharing_a_database_admit_no_more_than_its_limit(
    store_raw_url: str, tmp_path: Path, provider: FakeProvider, servers: int
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url, limits=LIMITS), base={})
    store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))  # migrates it before the servers start
    try:
        tokens = {name: await store.create_token(OPERATOR, who) for name, who in MEMBERS.items()}
        async with AsyncExitStack() as stack:
            urls = [await stack.enter_async_context(serving(app, store_raw_url, tmp_path / f"serve{n}.err"))
                    for n in range(servers)]  # fmt: skip
            clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60)) for url in urls]

            async def ask(n: int, who: str) -> httpx.Response:
                body = {"messages": [{"role": "user", "content": f"Hello number {n}."}]}
                headers = {"Authorization": f"Bearer {tokens[who]}"}
                client = clients[n % len(clients)]
                return await client.post("/api/assistants/chat/runs?stream=false", json=body, headers=headers)

            answers = await asyncio.gather(*(ask(n, ("bob", "carol")[n % 2]) for n in range(ASKED)))
            admitted = [a for a in answers if a.status_code == 200]
            refused = [a for a in answers if a.status_code != 200]
            assert len(admitted) == 5, [(a.status_code, a.text) for a in refused]
            assert {a.json()["status"] for a in admitted} == {"completed"}
            for answer in refused:
                assert answer.status_code == 429, answer.text
                error = answer.json()["error"]
                assert (error["type"], error["code"]) == ("rate_limited", "rate_limited")
                wait = answer.headers["Retry-After"]
                assert 1 <= int(wait) <= 60  # within the minute that is counted
                reached = "too many requests: a rate limit was reached (team acme: 5 requests per minute)"
                assert error["message"] == f"{reached}; try again in {wait} s"  # the wait said in words too
            # Every server refused some (half the requests went to each): what they count is the database's.
            assert {n % servers for n, a in enumerate(answers) if a.status_code == 429} == set(range(servers))
            other = await ask(0, "dave")  # another team's minute is its own
            assert (other.status_code, other.json()["status"]) == (200, "completed")

        # Nothing of the refused requests was stored: a chat and a run for each admitted one alone.
        assert (await count(store, runs), await count(store, chats)) == (6, 6)
        assert await count(store, rate_events) == 6
    finally:
        await store.aclose()
