"""Usage and budgets over a live server: a second team (beta), priced connectors, runs spread over the days
across a month's end."""

from __future__ import annotations

from typing import Any

from tests.support.servers import Live, says, server_files
from yao_agent.identity import Identity
from yao_agent.testing import FakeProvider, Reply

BETA = {"dave": Identity("dave", "beta"), "erin": Identity("erin", "beta", admin=True)}
BUDGETS = "budgets:\n  team: {per_month: 1.0}\n  user: {per_day: 0.5}\n"
MARCH_31, APRIL_1, APRIL_2 = "2026-03-31", "2026-04-01", "2026-04-02"


def files(base_url: str) -> dict[str, str]:
    out = server_files(base_url)
    out["app.yml"] += BUDGETS
    endpoint = f"base_url: {base_url}\napi_key: sk-x\ntimeout_s: 5\n"
    out["connectors/fake/priced.yml"] = (
        f"type: openai\nmodel: text\n{endpoint}pricing: {{input_per_mtok: 2.0, output_per_mtok: 8.0}}\n"
    )
    out["connectors/fake/mini.yml"] = f"type: openai\nmodel: gpt-4o-mini\n{endpoint}"
    out["assistants/priced/assistant.yml"] = "name: Priced\nconnector: fake.priced\n"
    out["assistants/mini/assistant.yml"] = "name: Mini\nconnector: fake.mini\n"
    return out


def used(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def run_as(
    live: Live, provider: FakeProvider, who: str, assistant: str, tokens: tuple[int, int]
) -> dict[str, Any]:
    """One run of `assistant` as `who`, its model call reporting `tokens` (in, out)."""
    provider.enqueue(Reply(text=f"{who} asked {assistant}", usage=used(*tokens)))
    async with live.client(who) as client:
        response = await client.post(f"/api/assistants/{assistant}/runs?stream=false",
                                     json={"messages": says(f"{who} here")})  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed", response.json()
    return response.json()
