"""`GET /metrics` as Prometheus scrapes it (CONTRACT §6, §8.1): a real server after runs of each kind —
completed, failed (the provider's 401), a fallback, tools, hooks, a refusal — read with
`prometheus_client`'s own parser; no chat or user id in any label; the metrics token; and two
`yao-agent serve` processes sharing `PROMETHEUS_MULTIPROC_DIR`, either of which shows the sum.

The metrics of a process are its own for its life (other tests' servers count in them too), so each test
compares two scrapes: what its runs added."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.apps import make_app
from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files, serving
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
PRICED = "pricing: {input_per_mtok: 2.0, output_per_mtok: 8.0}\n"  # each fake call: 11 in, 7 out
CALL_USD = (11 * 2.0 + 7 * 8.0) / 1e6
HOOK = """\
    function Create(ctx, messages) { return null }
    function Next(ctx, payload) { return {data: {saw: payload.completion.content}} }
"""


def metrics_files(base_url: str) -> dict[str, str]:
    """An app with a priced model, a tool server, a hook, and a chain whose first connector is down."""
    files = server_files(base_url)
    files["connectors/fake/model.yml"] += PRICED
    files["mcps/testing.yml"] = f"command: python\nargs: [-m, tests.support.mcp_server]\ncwd: {REPO}\n"
    files["assistants/tooled/assistant.yml"] = "name: Tooled\nmcp:\n  servers: [testing]\n"
    files["assistants/approving/assistant.yml"] = "name: A\nmcp:\n  servers: [{server: testing, approve: [add]}]\n"
    files["hooks/h.js"] = textwrap.dedent(HOOK)
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
    # Nothing listens on port 1: every call to this connector fails to connect, and the chain goes on.
    files["connectors/fake/down.yml"] = "type: openai\nmodel: text\nbase_url: http://127.0.0.1:1/v1\napi_key: sk-x\n"
    files["app.yml"] = files["app.yml"].replace("roles:\n", "roles:\n  chain: [fake.down, fake.model]\n")
    files["assistants/chained/assistant.yml"] = "name: Chained\nconnector: use::chain\n"
    return files


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    rt = make_runtime(tmp_path / "app", store, metrics_files(provider.base_url))
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    async with running(rt) as served:
        yield served


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


async def scrape(client: httpx.AsyncClient) -> tuple[str, Samples]:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return response.text, parse(response.text)


def added(after: Samples, before: Samples) -> Samples:
    """What changed between two scrapes (counters and histograms only grow)."""
    return {key: round(value - before.get(key, 0.0), 9) for key, value in after.items()
            if value != before.get(key, 0.0)}  # fmt: skip


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def run(client: httpx.AsyncClient, assistant: str, text: str) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": text}]}
    response = await client.post(f"/api/assistants/{assistant}/runs?stream=false", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def runs_of_each_kind(live: Live, provider: FakeProvider, alice: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Completed, failed (401), fallen back, with tools (one call works, one is refused), with hooks."""
    provider.enqueue(Reply(text="hello"))
    done = [await run(alice, "chat", "hi")]
    provider.enqueue(Reply(status=401, error_message="Incorrect API key provided"))
    done.append(await run(alice, "chat", "hi again"))
    provider.enqueue(Reply(text="from the second"))
    done.append(await run(alice, "chained", "anyone?"))
    calls = (ToolCall("testing__add", json.dumps({"a": 2, "b": 3})), ToolCall("testing__refuse", '{"reason": "no"}'))
    provider.enqueue(Reply(tool_calls=calls), Reply(text="5, and one refusal"))
    done.append(await run(alice, "tooled", "add and refuse"))
    provider.enqueue(Reply(text="hooked answer"))
    done.append(await run(alice, "hooked", "hook me"))
    return done


async def test_each_metric_counts_what_the_runs_did(live: Live, provider: FakeProvider) -> None:
    async with live.client("alice") as alice, live.client("") as anonymous:
        _, before = await scrape(anonymous)
        done = await runs_of_each_kind(live, provider, alice)
        await live.rt.store.set_ceilings(("user", "alice"), {"per_day": 0})  # the operator's (alice has no team)
        refused = await alice.post("/api/assistants/chat/runs?stream=false", json={"messages": [
            {"role": "user", "content": "over budget"}]})  # fmt: skip
        assert refused.status_code == 429
        text, after = await scrape(anonymous)
    assert [(r["status"], r["reason"]) for r in done] == [("completed", "completed"), ("failed", "model_error")] + [
        ("completed", "completed")] * 3  # fmt: skip
    got = added(after, before)
    want: Samples = {
        key("yao_runs_total", assistant="chat", status="completed", reason="completed"): 1,
        key("yao_runs_total", assistant="chat", status="failed", reason="model_error"): 1,
        key("yao_runs_total", assistant="chained", status="completed", reason="completed"): 1,
        key("yao_runs_total", assistant="tooled", status="completed", reason="completed"): 1,
        key("yao_runs_total", assistant="hooked", status="completed", reason="completed"): 1,
        key("yao_model_calls_total", connector="fake.model", outcome="ok"): 5,
        key("yao_model_calls_total", connector="fake.model", outcome="error"): 1,
        key("yao_model_calls_total", connector="fake.down", outcome="error"): 1,
        key("yao_time_to_first_token_seconds_count", connector="fake.model"): 5,
        key("yao_tokens_total", connector="fake.model", direction="input"): 5 * 11,
        key("yao_tokens_total", connector="fake.model", direction="output"): 5 * 7,
        key("yao_cost_usd_total", connector="fake.model"): round(5 * CALL_USD, 9),
        key("yao_tool_calls_total", server="testing", tool="add", outcome="ok"): 1,
        key("yao_tool_calls_total", server="testing", tool="refuse", outcome="error"): 1,
        key("yao_hook_calls_total", hook="Create", outcome="ok"): 1,
        key("yao_hook_calls_total", hook="Next", outcome="ok"): 1,
        key("yao_fallbacks_total", **{"from": "fake.down", "to": "fake.model"}): 1,
        key("yao_refusals_total", reason="budget_exceeded"): 1,
        key("yao_run_duration_seconds_count"): 5,
    }
    assert {k: v for k, v in got.items() if k in want} == want
    # The histograms' other series moved with them: every run is in the +Inf bucket and the sum.
    assert got[key("yao_run_duration_seconds_bucket", le="+Inf")] == 5
    assert got[key("yao_run_duration_seconds_sum")] > 0
    assert got[key("yao_time_to_first_token_seconds_bucket", connector="fake.model", le="+Inf")] == 5
    assert after[key("yao_active_runs")] == 0 and after[key("yao_queued_runs")] == 0
    # Bounded labels: no chat, run, user or trace id is anywhere in the scrape.
    for ident in {r[field] for r in done for field in ("chat_id", "run_id")} | {"alice"}:
        assert ident not in text


async def test_a_link_skipped_while_cooling_down_is_a_fallback_not_a_failed_call(
    live: Live, provider: FakeProvider
) -> None:
    """The first run tries the dead link (a failed call) and falls back; the second skips it while it cools
    down: a fallback, but no call was made to it, so none failed."""
    provider.enqueue(Reply(text="one"), Reply(text="two"))
    async with live.client("alice") as alice, live.client("") as anonymous:
        _, before = await scrape(anonymous)
        for text in ("first", "second"):
            assert (await run(alice, "chained", text))["status"] == "completed"
        _, after = await scrape(anonymous)
    got = added(after, before)
    assert {k: v for k, v in got.items() if k[0] in ("yao_model_calls_total", "yao_fallbacks_total")} == {
        key("yao_model_calls_total", connector="fake.down", outcome="error"): 1,
        key("yao_model_calls_total", connector="fake.model", outcome="ok"): 2,
        key("yao_fallbacks_total", **{"from": "fake.down", "to": "fake.model"}): 2,
    }


async def test_calls_answered_without_running_count_as_what_they_are(live: Live, provider: FakeProvider) -> None:
    """A call that waits for a person, and the call beside it that waits with it, count `waiting` (they did
    not run); once decided, the denied one counts `denied` and the other runs (`ok`): every call named by
    its tool, also those the continuation runs from the reply of the run it continues."""
    calls = (ToolCall("testing__add", json.dumps({"a": 2, "b": 3}), id="p1"),
             ToolCall("testing__echo", json.dumps({"text": "hi"}), id="e1"))  # fmt: skip
    provider.enqueue(Reply(tool_calls=calls), Reply(text="not added"))
    async with live.client("alice") as alice, live.client("") as anonymous:
        _, before = await scrape(anonymous)
        waited = await run(alice, "approving", "add and echo")
        assert (waited["status"], waited["reason"]) == ("waiting", "approval_required")
        _, between = await scrape(anonymous)
        deny = {"decisions": [{"tool_call_id": "p1", "approve": False, "reason": "no"}]}
        decided = await alice.post(f"/api/chats/{waited['chat_id']}/approvals?stream=false", json=deny)
        assert decided.status_code == 200 and decided.json()["status"] == "completed", decided.text
        _, after = await scrape(anonymous)
    tool = "yao_tool_calls_total"
    assert {k: v for k, v in added(between, before).items() if k[0] == tool} == {
        key(tool, server="testing", tool="add", outcome="waiting"): 1,
        key(tool, server="testing", tool="echo", outcome="waiting"): 1,
    }
    assert {k: v for k, v in added(after, between).items() if k[0] == tool} == {
        key(tool, server="testing", tool="add", outcome="denied"): 1,
        key(tool, server="testing", tool="echo", outcome="ok"): 1,
    }


async def test_a_call_cancelled_while_it_runs_counts_as_cancelled(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(tool_calls=(ToolCall("testing__nap", json.dumps({"seconds": 30}), id="n1"),)))
    body = {"messages": [{"role": "user", "content": "nap"}]}
    async with live.client("alice") as alice, live.client("") as anonymous:
        _, before = await scrape(anonymous)
        async with alice.stream("POST", "/api/assistants/tooled/runs", json=body) as response:
            chat_id = response.headers["x-chat-id"]
            events: list[dict[str, Any]] = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["type"] == "message_end" and events[-1]["kind"] == "tool_call":
                        assert (await alice.post(f"/api/chats/{chat_id}/cancel")).json() == {"cancelled": 1}
        _, after = await scrape(anonymous)
    assert (events[-1]["status"], events[-1]["reason"]) == ("cancelled", "cancelled")
    got = {k: v for k, v in added(after, before).items() if k[0] == "yao_tool_calls_total"}
    assert got == {key("yao_tool_calls_total", server="testing", tool="nap", outcome="cancelled"): 1}


async def test_the_gauges_show_runs_running_and_waiting(live: Live, provider: FakeProvider) -> None:
    """One run holds its chat (its reply stalls); a second request on that chat waits behind it."""
    provider.enqueue(Reply(text="slow reply", stall_after=2, stall_s=1.5), Reply(text="next"))
    async with live.client("alice") as alice, live.client("") as anonymous:
        first = asyncio.create_task(run(alice, "chat", "one"))
        alone: Samples = {}
        for _ in range(500):  # until its model call is under way (the run and its chat are stored by then)
            _, alone = await scrape(anonymous)
            if provider.requests:
                break
            await asyncio.sleep(0.01)
        chat_id = (await alice.get("/api/chats")).json()["chats"][0]["chat_id"]
        body = {"messages": [{"role": "user", "content": "two"}], "chat_id": chat_id}
        second = asyncio.create_task(alice.post("/api/assistants/chat/runs?stream=false", json=body))
        seen: list[tuple[float, float]] = [(alone[key("yao_active_runs")], alone[key("yao_queued_runs")])]
        while not first.done():
            _, now = await scrape(anonymous)
            seen.append((now[key("yao_active_runs")], now[key("yao_queued_runs")]))
            await asyncio.sleep(0.05)
        await first
        assert (await second).status_code == 200
        _, after = await scrape(anonymous)
    assert seen[0] == (1, 0) and (1, 1) in seen, seen
    assert (after[key("yao_active_runs")], after[key("yao_queued_runs")]) == (0, 0)


async def test_the_metrics_token_when_it_is_set(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    async with live.client("") as anonymous, live.client("alice") as alice:
        assert (await anonymous.get("/metrics")).status_code == 200  # unset: open to the scraper
        monkeypatch.setenv("YAO_AGENT_METRICS_TOKEN", "scrape-secret-1")
        for response in (
            await anonymous.get("/metrics"),
            await alice.get("/metrics"),  # a user's token is not the metrics token
            await anonymous.get("/metrics", headers={"Authorization": "Bearer scrape-secret-12"}),
            await anonymous.get("/metrics", headers={"Authorization": "Basic scrape-secret-1"}),
        ):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["type"] == "unauthorized"
            assert "scrape-secret-1" not in response.text
        good = await anonymous.get("/metrics", headers={"Authorization": "Bearer scrape-secret-1"})
        assert good.status_code == 200 and "yao_runs_total" in good.text


@pytest.mark.slow
async def test_two_server_processes_sharing_a_multiprocess_dir_scrape_as_one(
    store_raw_url: str, tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs on either `yao-agent serve` (one database): each scrape shows all of them, counted once."""
    shared = tmp_path / "prom"
    shared.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(shared))
    app = make_app(tmp_path / "app", server_files(provider.base_url), base={})
    store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))  # migrated before the servers start
    try:
        token = await store.create_token(OPERATOR, Identity("alice"))
    finally:
        await store.aclose()
    headers = {"Authorization": f"Bearer {token}"}
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serving(app, store_raw_url, tmp_path / f"serve{n}.err"))
                for n in range(2)]  # fmt: skip
        clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=u, headers=headers, timeout=60))
                   for u in urls]  # fmt: skip
        for n in range(5):  # 3 on the first server, 2 on the second
            assert (await run(clients[n % 2], "chat", f"hello {n}"))["status"] == "completed"
        scrapes = [(await scrape(client))[1] for client in clients]
    for samples in scrapes:
        assert samples[key("yao_runs_total", assistant="chat", status="completed", reason="completed")] == 5
        assert samples[key("yao_model_calls_total", connector="fake.model", outcome="ok")] == 5
        assert samples[key("yao_run_duration_seconds_count")] == 5
        assert samples[key("yao_tokens_total", connector="fake.model", direction="input")] == 5 * 11
        assert samples[key("yao_active_runs")] == 0
    assert scrapes[0] == scrapes[1]
