"""The server's log as an operator reads it: `yao-agent serve --log-format json` in a process of its own.

Every line of its stderr is one JSON object with `ts`, `level`, `msg` and `logger`; a run's lines carry
the run's ids, set once when the run starts; each request has one access line naming its route's
template; a hook's `ctx.log` is there with `source: hook`; and the connector's API key, which the
provider quotes back in its 401, is on no line at all.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.servers import said, serve_process, stopped
from tests.support.waits import free_port
from yao_agent.ids import bind_run
from yao_agent.observe import logs
from yao_agent.testing import FakeProvider, Reply

SECRET = "sk-live-SECRET-123"
QUERY_SECRET = "query-secret-value-42"
HOOK = """
async function Create(ctx) {
  await ctx.log("info", "hook says hello to " + ctx.user_id);
  return null;
}
"""


def files(base_url: str) -> dict[str, str]:
    return {
        "app.yml": "roles:\n  default: fake.model\nhistory_size: 20\nlimits: {max_turns: 10, timeout_s: 30}\n",
        "connectors/fake/model.yml": f"type: openai\nmodel: text\nbase_url: {base_url}\napi_key: $ENV.FAKE_KEY\n"
        "timeout_s: 5\n",
        "assistants/chat/assistant.yml": "name: Chat\n",
        "assistants/hooked/assistant.yml": "name: Hooked\nhook: hooks/h.js\n",
        "hooks/h.js": HOOK,
    }


async def run(client: httpx.AsyncClient, assistant: str) -> dict[str, Any]:
    """Stream one run to its end; its `stream_start` event (the run's ids)."""
    body = {"messages": [{"role": "user", "content": "hi"}]}
    events: list[dict[str, Any]] = []
    async with client.stream("POST", f"/api/assistants/{assistant}/runs", json=body) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "stream_start" and events[-1]["type"] == "stream_end"
    return events[0]


def of_run(lines: list[dict[str, Any]], start: dict[str, Any]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("run_id") == start["run_id"]]


@pytest.mark.slow
async def test_json_log_lines_carry_ids_access_hooks_and_no_secret(tmp_path: Path) -> None:
    async with FakeProvider() as provider:
        app = make_app(tmp_path / "app", files(provider.base_url), base={})
        code, token = await asyncio.to_thread(cli, app, "tokens", "create", "--user", "alice", "--team", "acme")
        assert code == 0
        token = token.strip()
        err = tmp_path / "stderr.log"
        async with serve_process(app, err, "--log-format", "json", env={"FAKE_KEY": SECRET}) as url:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                assert (await client.get("/healthz")).status_code == 200
                provider.enqueue(Reply(text="Hello there."))
                plain = await run(client, "chat")
                provider.enqueue(Reply(text="Hooked hello."))
                hooked = await run(client, "hooked")
                provider.enqueue(Reply(status=401, error_message=f"Incorrect API key provided: {SECRET}"))
                failed = await run(client, "chat")
                chat = await client.get(f"/api/chats/{plain['chat_id']}/messages", params={"key": QUERY_SECRET})
                assert chat.status_code in (200, 404)  # whichever: its line names the template, not the path
                refused = await client.get("/api/chats", headers={"Authorization": "Bearer ya_not-a-real-token"})
                assert refused.status_code == 401
    text = said(err)
    lines = [json.loads(line) for line in text.splitlines()]  # every line is JSON, or this fails
    assert lines and all({"ts", "level", "msg", "logger"} <= line.keys() for line in lines)
    assert all(line["ts"].endswith("Z") and "T" in line["ts"] for line in lines)
    for secret in (SECRET, "SECRET-123", QUERY_SECRET, token, "ya_not-a-real-token"):
        assert secret not in text

    ids = {"trace_id": failed["trace_id"], "chat_id": failed["chat_id"], "assistant_id": "chat",
           "user_id": "alice", "team_id": "acme"}  # fmt: skip
    failure = of_run(lines, failed)
    assert failure and all(line.items() >= ids.items() for line in failure)
    assert any(line["level"] == "warning" and "failed" in line["msg"] for line in failure)

    from_hook = [line for line in lines if line["logger"] == "yao_agent.hook"]
    assert [line["msg"] for line in from_hook] == ["hooks/h.js (hooked): hook says hello to alice"]
    assert from_hook[0]["source"] == "hook" and from_hook[0]["hook"] == "hooks/h.js" and from_hook[0]["level"] == "info"
    assert from_hook[0].items() >= {"run_id": hooked["run_id"], "trace_id": hooked["trace_id"],
                               "chat_id": hooked["chat_id"], "assistant_id": "hooked", "user_id": "alice",
                               "team_id": "acme"}.items()  # fmt: skip

    access = [line for line in lines if line["logger"] == "yao_agent.access"]
    assert [(line["method"], line["route"], line["status"]) for line in access] == [
        ("GET", "/healthz", 200),
        ("POST", "/api/assistants/{assistant_id}/runs", 200),
        ("POST", "/api/assistants/{assistant_id}/runs", 200),
        ("POST", "/api/assistants/{assistant_id}/runs", 200),
        ("GET", "/api/chats/{chat_id}/messages", chat.status_code),
        ("GET", "/api/chats", 401),
    ]
    assert all(line["bytes"] > 0 and line["duration_ms"] >= 0 for line in access)
    assert all(plain["chat_id"] not in line["msg"] for line in access)  # the template, never the path
    assert "run_id" not in access[1]  # a request's line is not one of its run's


@pytest.mark.slow
async def test_text_log_is_plain_lines_with_one_access_line_a_request(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", files("http://127.0.0.1:9/v1"), base={})
    err = tmp_path / "stderr.log"
    async with (
        serve_process(app, err, env={"FAKE_KEY": SECRET}) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/api/chats?token=" + QUERY_SECRET)).status_code == 401
    lines = said(err).splitlines()
    access = [line for line in lines if not line.startswith(("draining:", "drained:"))]  # (its stop, on SIGTERM)
    assert [line.rsplit(" ", 2)[0] for line in access] == ["GET /healthz 200", "GET /api/chats 401"]
    assert all(not line.startswith("{") for line in lines)


def test_a_log_format_other_than_json_or_text_is_a_usage_error(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv(logs.ENV, "xml")
    assert cli(make_app(tmp_path / "app", {}), "serve", "--port", "0")[0] == 2
    assert logs.chosen("JSON") == "json"  # the flag wins over the environment
    monkeypatch.delenv(logs.ENV)
    assert logs.chosen(None) == "text"


def test_json_formatter_keeps_safe_extras_and_redacts_messages_extras_and_tracebacks() -> None:
    stream = io.StringIO()
    log = logging.getLogger("yao_agent.test_logs")
    with logs.configured("json", stream):
        bind_run(run_id="r1", chat_id="c1", team_id=None)
        try:
            raise ValueError(f"bad key {SECRET}")
        except ValueError:
            log.exception("calling with %s", SECRET, extra={"url": f"https://x.test/?k={SECRET}", "count": 3,
                          "nested": {"keys": [SECRET, 1.5]}, "obj": object(), "nan": float("nan")})  # fmt: skip
        log.debug("below INFO: not written")
    bind_run()
    text = stream.getvalue()
    assert SECRET not in text and "SECRET-123" not in text
    (line,) = [json.loads(one) for one in text.splitlines()]
    assert line["run_id"] == "r1" and line["chat_id"] == "c1" and "team_id" not in line
    assert line["level"] == "error" and line["logger"] == "yao_agent.test_logs" and line["count"] == 3
    assert line["msg"] == "calling with ****" and line["url"] == "https://x.test/?k=****"
    assert line["nested"] == {"keys": ["****", 1.5]} and "obj" not in line and "nan" not in line
    assert "ValueError: bad key ****" in line["exc"] and "Traceback" in line["exc"]
    assert logs.current_format() == "text"  # undone: logging is left as it was found


@pytest.mark.slow
async def test_every_line_is_json_also_the_banner_and_a_drain_past_a_client_that_never_reads(tmp_path: Path) -> None:
    """The banner on stdout was a plain line; a drain that cancelled the stream of a client that stopped
    reading logged a traceback. Every line of both streams is a JSON object, and no traceback is written."""
    async with FakeProvider() as provider:
        app = make_app(tmp_path / "app", files(provider.base_url), base={})
        code, token = await asyncio.to_thread(cli, app, "tokens", "create", "--user", "alice")
        assert code == 0
        port = free_port()
        out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
        env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_KEY": SECRET}
        with out.open("w") as stdout, err.open("w") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "yao_agent.cli", "--app", str(app), "serve", "--port", str(port),
                "--log-format", "json", "--drain-s", "0.5", stdout=stdout, stderr=stderr, env=env, cwd=REPO,
            )  # fmt: skip
        try:
            while not out.read_text():  # noqa: ASYNC110 (another process writes it)
                await asyncio.sleep(0.05)
            # A client that asks for a long answer and never reads it: the server's writes back up.
            provider.enqueue(Reply(text="w" * 4_000_000, chunk_size=20_000))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps({"messages": [{"role": "user", "content": "long"}]}).encode()
            writer.write(b"POST /api/assistants/chat/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Authorization: Bearer {token.strip()}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                         + body)  # fmt: skip
            await writer.drain()
            await asyncio.wait_for(reader.readline(), 30)  # its head is sent: the run is streaming
            await asyncio.sleep(1)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 30) == 0, said(err)
            writer.close()
        finally:
            await stopped(process)
    banner, *rest = [json.loads(line) for line in out.read_text().splitlines()]  # JSON, or this fails
    assert rest == [] and banner["level"] == "info" and banner["url"] == f"http://127.0.0.1:{port}/"
    assert banner["msg"] == f"yao-agent serving {app.resolve()} on http://127.0.0.1:{port}/"
    text = said(err)
    lines = [json.loads(line) for line in text.splitlines()]
    assert "Traceback" not in text and all("exc" not in line for line in lines), text
    assert any(line["msg"] == "closing 1 connections whose clients stopped reading their answers" for line in lines)


def test_why_serving_could_not_start_is_json_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = make_app(tmp_path / "app", {"assistants/chat/assistant.yml": "name: [unclosed\n"})
    code, out = cli(app, "serve", "--port", str(free_port()), "--log-format", "json")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]  # JSON, or this fails
    assert (code, out) == (2, "")
    assert [(line["level"], line["file"], line["line"]) for line in lines] == [
        ("error", "assistants/chat/assistant.yml", 1)]  # fmt: skip
    assert lines[0]["msg"].startswith("assistants/chat/assistant.yml:1: malformed YAML")
