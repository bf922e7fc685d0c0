"""What one request costs the store, per kind of request: its transactions, statements and pool checkouts.

Counted, not timed (deterministic): docs/performance.md keeps the figures. A non-streamed request is the
streamed one drained by the server, so the two must cost the store the same.
"""

from __future__ import annotations

import pytest

from tests.support.servers import Live
from tests.support.transactions import Counts, counting

pytestmark = pytest.mark.both_stores
ASK = [{"role": "user", "content": "Hello"}]


async def _openai(live: Live, *, stream: bool) -> Counts:
    async with live.client() as client:
        await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK})  # the token's first use
        with counting(live.rt.store.db) as counts:
            response = await client.post("/v1/chat/completions", json={"model": "chat", "messages": ASK, "stream": stream})
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
