"""A budget's 429 over HTTP (CONTRACT §8.2), on a real uvicorn, SQLite and PostgreSQL: at the door and when a
budget stops a run mid-way, it carries `Retry-After` (the seconds until the window resets) and
`x-should-retry: false`, so the official `openai` client — which resends any other 429 twice more — sends
it once. The app is test_usage_api's: alice (no team) may spend $0.50 a day; `fake.priced` costs $2 in and
$8 out per million tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai
import pytest

from tests.support.clock import Clock
from tests.support.servers import Live, assert_error, says
from tests.support.usage import APRIL_2, run_as, used
from yao_agent.identity import Identity
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

UNTIL_MIDNIGHT = 9 * 3600  # at 15:00 UTC, when alice's daily budget resets


def counting(sent: list[str]) -> openai.DefaultAsyncHttpxClient:
    """The HTTP client the openai client sends through, noting each request it sends the server."""

    async def note(request: Any) -> None:  # (the openai package's own copy of httpx: its Request)
        sent.append(str(request.url.path))

    return openai.DefaultAsyncHttpxClient(event_hooks={"request": [note]}, timeout=30)


async def ask_openai(usage_live: Live, sent: list[str]) -> openai.RateLimitError:
    """One completion asked with the official client and its default retries (2), as alice."""
    async with openai.AsyncOpenAI(base_url=usage_live.url + "/v1", api_key=usage_live.tokens["alice"],
                                  http_client=counting(sent)) as client:  # fmt: skip
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(model="priced", messages=[{"role": "user", "content": "more"}])
    return refused.value


def check_refusal(status: int, headers: Mapping[str, str], body: Any) -> dict[str, Any]:
    """A budget's 429: when to try again, not at once, and the error as the contract shapes it."""
    assert status == 429 and headers["x-should-retry"] == "false"
    assert int(headers["Retry-After"]) == UNTIL_MIDNIGHT
    assert body["error"]["type"] == body["error"]["code"] == "budget_exceeded"
    return body["error"]


def refusal_of(answer: openai.RateLimitError) -> dict[str, Any]:
    response = answer.response
    return check_refusal(response.status_code, response.headers, response.json())


async def test_a_spent_budget_is_a_429_the_openai_client_does_not_resend(
    usage_live: Live, provider: FakeProvider, clock: Clock
) -> None:
    clock.at(APRIL_2, hour=15)
    await run_as(usage_live, provider, "alice", "priced", (50_000, 50_000))  # $0.50 of her $0.50 a day
    async with usage_live.client("alice") as alice:
        refused = await alice.post("/api/assistants/chat/runs?stream=false", json={"messages": says("more")})
    error = check_refusal(refused.status_code, refused.headers, assert_error(refused, 429) and refused.json())
    assert error["message"] == "user alice spent $0.50 of its $0.50 daily budget; it resets 2026-04-03T00:00:00Z"
    sent: list[str] = []
    answer = await ask_openai(usage_live, sent)
    assert sent == ["/v1/chat/completions"]  # once: no automatic resend of a budget spent
    refusal_of(answer)
    assert len(provider.requests) == 1  # alice's first run alone reached the model


async def test_a_budget_that_stops_a_completion_mid_run_is_a_429_too(
    usage_live: Live, provider: FakeProvider, clock: Clock
) -> None:
    """The run's first call spends alice's day, and its reply, cut at the output limit, is not continued: the
    completion answers 429 `budget_exceeded` (the run is stored failed, resumable), and is not resent."""
    clock.at(APRIL_2, hour=15)
    provider.enqueue(Reply(text="The first half", usage=used(50_000, 50_000), finish_reason="length"))
    sent: list[str] = []
    answer = await ask_openai(usage_live, sent)
    assert sent == ["/v1/chat/completions"] and len(provider.requests) == 1
    error = refusal_of(answer)
    assert error["message"].startswith("user alice spent $0.50 of its $0.50 daily budget; the model was not called")
    run = await usage_live.rt.store.latest_run(Identity("alice"), answer.response.headers["X-Chat-Id"])
    assert run is not None and (run.status, run.reason) == ("failed", "budget_exceeded")
