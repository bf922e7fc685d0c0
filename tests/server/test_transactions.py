"""What one request costs the store, per kind of request: its transactions, statements and pool checkouts.

Counted, not timed (deterministic): docs/performance.md keeps the figures. A non-streamed request is the
streamed one drained by the server, so the two must cost the store the same.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.servers import Live
from tests.support.transactions import Counts, counting

pytestmark = pytest.mark.both_stores
ASK = [{"role": "user", "content": "Hello"}]
ALL_BUT_ME = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
              " WHERE datname = current_database() AND pid <> pg_backend_pid()")  # fmt: skip


async def _openai(live: Live, *, stream: bool) -> Counts:
    async with live.client() as client:
        await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})  # the token's first use
        with counting(live.rt.store.db) as counts:
            response = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK,
                                                                        "stream": stream})  # fmt: skip
            assert response.status_code == 200, response.text
    return counts


async def _native(live: Live, *, stream: bool) -> Counts:
    async with live.client() as client:
        await client.post("/api/assistants/chat/runs", json={"messages": ASK}, params={"stream": "false"})
        with counting(live.rt.store.db) as counts:
            response = await client.post("/api/assistants/chat/runs", json={"messages": ASK},
                                         params={"stream": "true" if stream else "false"})  # fmt: skip
            assert response.status_code == 200, response.text
    return counts


async def test_a_non_streamed_request_costs_what_a_streamed_one_does(live: Live) -> None:
    streamed, whole = await _openai(live, stream=True), await _openai(live, stream=False)
    native_streamed, native_whole = await _native(live, stream=True), await _native(live, stream=False)
    print(f"\n{live.rt.store.db.dialect}: openai streamed {streamed}, non-streamed {whole}; "
          f"native streamed {native_streamed}, non-streamed {native_whole}")  # fmt: skip
    assert whole.transactions == streamed.transactions
    assert native_whole.transactions == native_streamed.transactions


@pytest.mark.parametrize("store_raw_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
async def test_a_connection_the_server_closed_does_not_fail_the_next_request(live: Live, store_raw_url: str) -> None:
    """Every pooled connection's backend ended between two requests (as a restarted server or an operator's
    `pg_terminate_backend` does): the next request is answered, not a 500 (its transactions run again)."""
    async with live.client() as client:
        first = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})
        assert first.status_code == 200, first.text
        dsn = store_raw_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as admin:
            ended = admin.execute(ALL_BUT_ME).fetchall()
        assert ended and all(row[0] for row in ended)
        whole = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})
        assert whole.status_code == 200 and whole.json()["choices"][0]["message"]["content"], whole.text
        streamed = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "stream": True})
        assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]"), streamed.text
