"""`GET /api/chats/{chat_id}/runs/{run_id}`: one run as its owner sees it, with every step and why each
model call was made (CONTRACT §4 "Transitions", §6), over a real uvicorn on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import Live, running
from tests.support.tools import call, in_process, tooled
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Live]:
    backup = f"type: openai\nmodel: spare\nbase_url: {fake.base_url}\napi_key: sk-x\ntimeout_s: 5\n"
    more = {"connectors/fake/backup.yml": backup, "app.yml": "roles:\n  default: [fake.model, fake.backup]\n"}
    async with running(in_process(tooled(tmp_path / "app", store, fake, more=more))) as served:
        yield served


async def run(live: Live, text: str, who: str = "alice") -> dict[str, Any]:
    async with live.client(who) as client:
        answer = await client.post("/api/assistants/tooled/runs?stream=false",
                                   json={"messages": [{"role": "user", "content": text}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def view(live: Live, chat_id: str, run_id: str, who: str = "alice") -> tuple[int, dict[str, Any]]:
    async with live.client(who) as client:
        answer = await client.get(f"/api/chats/{chat_id}/runs/{run_id}")
    body: dict[str, Any] = answer.json()
    return answer.status_code, body


async def test_a_run_shows_its_steps_transitions_connectors_and_tokens(live: Live, fake: ScriptedModel) -> None:
    fake.enqueue(
        Reply(tool_calls=(call("testing__add", {"a": "x", "b": 1}, "c1"),)),  # wrong arguments: corrected
        Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c2"),)),
        Reply(text="It is 5.", usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}),
    )
    done = await run(live, "what is 2+3?")
    status, shown = await view(live, done["chat_id"], done["run_id"])
    assert status == 200
    assert (shown["run_id"], shown["chat_id"], shown["assistant_id"]) == (done["run_id"], done["chat_id"], "tooled")
    assert (shown["status"], shown["reason"], shown["usage"]) == ("completed", "completed", done["usage"])
    steps: list[dict[str, Any]] = shown["steps"]
    assert [(s["type"], s["status"], s.get("transition")) for s in steps] == [
        ("llm", "completed", "first"),
        ("tool", "recovered", None),  # the model was asked to correct it, and did
        ("llm", "completed", "tool_retry"),
        ("tool", "completed", None),
        ("llm", "completed", "tool_results"),
    ]
    assert [s["seq"] for s in steps] == sorted(s["seq"] for s in steps)
    llm = [s for s in steps if s["type"] == "llm"]
    assert {(s["connector"], s["model"]) for s in llm} == {("fake.model", "text")}
    assert llm[-1]["usage"] == {"input_tokens": 30, "output_tokens": 4, "cost_usd": None}  # no price for `text`
    assert all(isinstance(s["duration_ms"], int) and s["duration_ms"] >= 0 for s in steps)
    assert "input" not in steps[0] and "output" not in steps[0]  # what a step was given stays in the store


async def test_the_connector_that_answered_after_a_fallback_is_shown(live: Live, fake: ScriptedModel) -> None:
    """The link that failed is a step of its own (`recovered`: the run went past it), with how it failed
    and how long it took; the link that answered follows it."""
    fake.enqueue(Reply(status=500, error_message="down"), Reply(text="From the spare."))
    done = await run(live, "hello")
    _, shown = await view(live, done["chat_id"], done["run_id"])
    [tried, step] = shown["steps"]
    assert (tried["type"], tried["status"], tried["transition"]) == ("llm", "recovered", "first")
    assert (tried["connector"], tried["model"], tried["error"]["kind"]) == ("fake.model", "text", "server")
    assert tried["error"]["message"] == "model call to fake.model failed: provider error (HTTP 500): down"
    assert "usage" not in tried  # nothing answered: nothing billed
    assert (step["transition"], step["connector"], step["model"]) == ("first", "fake.backup", "spare")
    assert (step["status"], step["usage"]["output_tokens"]) == ("completed", 7)
    assert tried["seq"] < step["seq"] and tried["started_at"] <= step["started_at"]
    assert all(isinstance(s["duration_ms"], int) for s in (tried, step))
    assert shown["usage"]["calls"] == 1  # the try that failed was no call of the run's usage


async def test_a_failed_run_shows_its_reason_and_the_failed_step(live: Live, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(status=401, error_message="bad key"), Reply(status=401, error_message="bad key"))
    done = await run(live, "hello")
    assert done["status"] == "failed"
    _, shown = await view(live, done["chat_id"], done["run_id"])
    assert (shown["status"], shown["reason"]) == ("failed", "model_error")
    [step] = shown["steps"]
    assert (step["type"], step["status"], step["transition"]) == ("llm", "failed", "first")
    assert "message" in step["error"] and "connector" not in step


async def test_another_tenants_run_and_unknown_runs_are_404(live: Live, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Hi."), Reply(text="Hi again."))
    mine = await run(live, "hello")
    other = await run(live, "hello", who="bob")
    status, body = await view(live, mine["chat_id"], mine["run_id"], who="bob")
    assert (status, body["error"]["type"]) == (404, "not_found")
    assert (await view(live, mine["chat_id"], "no-such-run"))[0] == 404
    assert (await view(live, other["chat_id"], other["run_id"]))[0] == 404  # bob's run, asked for by alice
    assert (await view(live, mine["chat_id"], other["run_id"]))[0] == 404  # a run of another chat
    assert (await view(live, other["chat_id"], other["run_id"], who="bob"))[0] == 200
