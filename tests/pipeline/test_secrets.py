"""Secrets never leave the process: `$ENV` is the operator's alone, and resolved values are masked
in errors, events, stored runs, tool output and log lines."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.support.runtimes import ALICE, app_files, close, end_of, make_runtime, runs_of, turn
from tests.support.tools import call, in_process, tooled
from yao_agent.events import Event, ToolResult, to_json
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.store.schema import runs, steps
from yao_agent.testing import FakeProvider, Reply, ScriptedModel


def secret(prefix: str = "") -> str:
    return prefix + secrets.token_hex(12)


async def everything_stored(rt: Runtime) -> str:
    """Every run and step row and every message of chat c1, as one text to search."""
    store = rt.store
    assert isinstance(store, SqlStore)
    rows = await store.db.read_tx(lambda tx: [*tx.all(select(runs)), *tx.all(select(steps))])
    messages = [m.to_api() for m in await store.history(ALICE, "c1")]
    return json.dumps([[str(v) for v in row] for row in rows]) + json.dumps(messages)


def shown(events: list[Event]) -> str:
    return "\n".join(to_json(e) for e in events)


async def test_a_hook_cannot_read_the_environment_through_a_connector(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = secret("sk-")
    monkeypatch.setenv("YAO_TEST_SECRET", value)
    files = app_files(fake.base_url)
    files["hooks/h.js"] = "function Create(ctx) { return {connector: ctx.metadata.model} }\n"
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    try:
        for asked in ("$ENV.YAO_TEST_SECRET", "use::$ENV.YAO_TEST_SECRET", "$ENV.YAO_TEST_UNSET"):
            events = [e async for e in _run(rt, asked)]
            end = end_of(events)
            assert (end.status, end.reason) == ("failed", "hook_error")
            assert "$ENV is only for the app's own YAML files" in end.error["message"]
            assert value not in shown(events)
        assert fake.requests == []
        assert value not in await everything_stored(rt)
    finally:
        await rt.engines.aclose()
        await rt.hooks.aclose()


async def _run(rt: Runtime, model: str) -> AsyncIterator[Event]:
    from yao_agent.pipeline import RunRequest

    request = RunRequest("hooked", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1", metadata={"model": model})
    async for event in runs_of(rt).stream(request):
        yield event


async def test_an_environment_connector_in_the_apps_yaml_works_and_never_shows_its_value(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = app_files(fake.base_url)
    files["assistants/chat/assistant.yml"] = "name: Chat\nconnector: $ENV.YAO_TEST_CONNECTOR\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    try:
        monkeypatch.setenv("YAO_TEST_CONNECTOR", "fake.model")
        fake.enqueue(Reply(text="hello"))
        assert end_of(await turn(rt, "hi")).status == "completed"  # the operator's YAML may use $ENV

        wrong = secret("not-a-connector-")
        monkeypatch.setenv("YAO_TEST_CONNECTOR", wrong)
        events = await turn(rt, "again")
        end = end_of(events)
        assert end.reason == "model_error" and "$ENV.YAO_TEST_CONNECTOR" in end.error["message"]
        assert wrong not in shown(events) and wrong not in await everything_stored(rt)
    finally:
        await rt.engines.aclose()


async def test_secrets_in_a_url_or_quoted_without_their_prefix_never_leave(
    tmp_path: Path, store: SqlStore, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    token, key = secret("tok"), secret("sk-proj-")
    monkeypatch.setenv("YAO_TEST_URL", f"{provider.base_url}/{token}")
    monkeypatch.setenv("YAO_TEST_KEY", key)
    files = app_files(provider.base_url)
    files["connectors/fake/model.yml"] = (
        "type: openai\nmodel: text\nbase_url: $ENV.YAO_TEST_URL\napi_key: $ENV.YAO_TEST_KEY\n"
    )
    rt = make_runtime(tmp_path / "app", store, files)
    caplog.set_level(logging.DEBUG)
    try:
        events = await turn(rt, "hi")  # a 404 whose text quotes the path, and so the token
        assert end_of(events).reason == "model_error" and "Invalid URL" in end_of(events).error["message"]
        monkeypatch.setenv("YAO_TEST_URL", provider.base_url)
        provider.enqueue(Reply(status=401, error_message=f"Incorrect API key provided: {key.removeprefix('sk-')}."))
        events += await turn(rt, "again")
        assert end_of(events).reason == "model_error"
        for text in (shown(events), await everything_stored(rt), caplog.text):
            assert token not in text and key not in text and key.removeprefix("sk-") not in text
            assert key.removeprefix("sk-proj-") not in text
        assert "****" in shown(events)
    finally:
        await rt.engines.aclose()


async def test_tool_output_never_carries_a_secret(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = secret("sk-")
    monkeypatch.setenv("YAO_TEST_KEY", key)  # the in-process tool server reads this process's environment
    model = f"type: openai\nmodel: text\nbase_url: {fake.base_url}\napi_key: $ENV.YAO_TEST_KEY\n"
    rt = in_process(tooled(tmp_path / "app", store, fake, more={"connectors/fake/model.yml": model}))
    fake.enqueue(Reply(tool_calls=(call("testing__getenv", {"name": "YAO_TEST_KEY"}, "c1"),)), Reply(text="ok"))
    try:
        events = await turn(rt, "what is the key?", assistant="tooled")
        [result] = [e for e in events if isinstance(e, ToolResult)]
        assert result.result == "****"
        assert key not in shown(events) and key not in await everything_stored(rt)
        assert key not in json.dumps(fake.requests[1].messages)  # nor does the model see it
    finally:
        await close(rt)
