"""Traces as a collector receives them (CONTRACT §8.1): `yao-agent serve` in a process of its own, told
by `OTEL_EXPORTER_OTLP_ENDPOINT` to export to an OTLP/HTTP receiver run here on loopback, which decodes
what arrives with OpenTelemetry's own protobuf classes.

One trace per run whose id is the run's `trace_id`; a `run` span with a span per model call (GenAI
attributes and token counts) and per tool call (`execute_tool`) under it; a caller's `traceparent`
makes the run its child; without OTEL_* nothing is exported and the SDK is not even imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files
from tests.support.servers import Live, serve_process
from tests.support.tools import ASSISTANT, call
from yao_agent.testing import FakeProvider, Reply

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
OTEL_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")


@contextmanager
def receiver() -> Generator[tuple[str, list[Span]]]:
    """An OTLP/HTTP trace receiver on loopback: its endpoint, and every span posted to it so far."""
    spans: list[Span] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = ExportTraceServiceRequest.FromString(body)
            if self.path == "/v1/traces":
                spans.extend(s for r in request.resource_spans for scoped in r.scope_spans for s in scoped.spans)
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None  # the test's output is the assertions'

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def tooled_app(root: Path, base_url: str) -> Path:
    files = app_files(base_url)
    files["mcps/testing.yml"] = f"command: {sys.executable}\nargs: [-m, tests.support.mcp_server]\ncwd: {REPO}\n"
    files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=3)
    return make_app(root, files, base={})


async def bearer(app: Path) -> dict[str, str]:
    code, token = await asyncio.to_thread(cli, app, "tokens", "create", "--user", "alice")
    assert code == 0
    return {"Authorization": f"Bearer {token.strip()}"}


async def run(client: httpx.AsyncClient, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Stream one run of `tooled` to its end; its `stream_start` event (the run's ids)."""
    body = {"messages": [{"role": "user", "content": "what is 2+3?"}]}
    async with client.stream("POST", "/api/assistants/tooled/runs", json=body, headers=headers) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "stream_start" and events[-1]["type"] == "stream_end"
    assert events[-1]["status"] == "completed", json.dumps(events)
    start: dict[str, Any] = events[0]
    return start


def attrs(span: Span) -> dict[str, Any]:
    return {a.key: value(a.value) for a in span.attributes}


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def of_trace(spans: list[Span], trace_id: str) -> list[Span]:
    return sorted((s for s in spans if s.trace_id.hex() == trace_id), key=lambda s: s.start_time_unix_nano)


@pytest.mark.slow
async def test_a_tool_run_is_one_trace_of_model_and_tool_spans(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}
    with receiver() as (endpoint, spans):
        async with FakeProvider() as provider:
            app = tooled_app(tmp_path / "app", provider.base_url)
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
            headers = await bearer(app)
            async with (
                serve_process(app, tmp_path / "stderr.log", env=env, unset=OTEL_ENV) as url,
                httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client,
            ):
                provider.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),), usage=usage),
                                 Reply(text="It is 5.", usage=usage))  # fmt: skip
                plain = await run(client)
                provider.enqueue(Reply(tool_calls=(call("testing__add", {"a": 1, "b": 1}, "c2"),)), Reply(text="2"))
                traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
                joined = await run(client, {"traceparent": traceparent})
                provider.enqueue(Reply(text="fine"))
                body = {"messages": [{"role": "user", "content": "hi"}]}
                bad = await client.post("/api/assistants/tooled/runs?stream=false", json=body,
                                            headers={"traceparent": "00-not-a-trace-01"})  # fmt: skip
                assert bad.status_code == 200  # an invalid traceparent is ignored
    assert len(plain["trace_id"]) == 32 and int(plain["trace_id"], 16) > 0
    tree = of_trace(spans, plain["trace_id"])
    assert [s.name for s in tree] == ["run", "chat text", "execute_tool testing__add", "chat text", "flush"]
    run_span, first, tool, second, flush = tree
    assert run_span.parent_span_id == b""  # a trace of its own
    assert all(s.parent_span_id == run_span.span_id for s in (first, tool, second, flush))
    assert attrs(run_span) | {"yao.run_id": plain["run_id"], "yao.status": "completed"} == attrs(run_span)
    for model_call in (first, second):
        assert attrs(model_call) | {"gen_ai.operation.name": "chat", "gen_ai.request.model": "text",
                                    "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 4,
                                    "gen_ai.provider.name": "openai"} == attrs(model_call)  # fmt: skip
    assert attrs(tool) | {"gen_ai.tool.name": "testing__add", "gen_ai.tool.call.id": "c1"} == attrs(tool)
    assert first.end_time_unix_nano <= tool.start_time_unix_nano <= tool.end_time_unix_nano
    assert tool.end_time_unix_nano <= second.start_time_unix_nano <= run_span.end_time_unix_nano
    assert all(s.status.code != Status.STATUS_CODE_ERROR for s in tree)

    assert joined["trace_id"] == CALLER_TRACE  # the run joined the caller's trace
    [child_run] = [s for s in of_trace(spans, CALLER_TRACE) if s.name == "run"]
    assert child_run.parent_span_id.hex() == CALLER_SPAN
    assert {s.trace_id.hex() for s in spans} == {plain["trace_id"], CALLER_TRACE, *_other(spans)}


def _other(spans: list[Span]) -> set[str]:
    """The trace of the run whose traceparent was invalid: one more trace of its own."""
    runs = [s for s in spans if s.name == "run"]
    assert len(runs) == 3
    return {runs[-1].trace_id.hex()} - {CALLER_TRACE}


@pytest.mark.slow
async def test_a_failed_model_call_is_an_error_span(tmp_path: Path) -> None:
    with receiver() as (endpoint, spans):
        async with FakeProvider() as provider:
            app = tooled_app(tmp_path / "app", provider.base_url)
            env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{endpoint}/v1/traces"}
            headers = await bearer(app)
            async with (
                serve_process(app, tmp_path / "stderr.log", env=env, unset=OTEL_ENV) as url,
                httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client,
            ):
                provider.enqueue(Reply(status=400, error_message="bad request"))
                body = {"messages": [{"role": "user", "content": "hi"}]}
                failed = await client.post("/api/assistants/tooled/runs?stream=false", json=body)
    assert failed.json()["status"] == "failed"
    [run_span] = [s for s in spans if s.name == "run"]
    model_calls = [s for s in spans if s.name == "chat text"]
    assert model_calls and all(s.trace_id == run_span.trace_id for s in model_calls)
    assert run_span.status.code == model_calls[-1].status.code == Status.STATUS_CODE_ERROR


async def test_a_try_that_failed_and_was_retried_is_a_span_of_its_own(tmp_path: Path) -> None:
    """The provider's 503 is retried (after a back-off): the failed try and the one that answered are two
    model-call spans, the first an error saying how it failed, so the trace shows where the time went."""
    with receiver() as (endpoint, spans):
        async with FakeProvider() as provider:
            app = tooled_app(tmp_path / "app", provider.base_url)
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
            headers = await bearer(app)
            async with (
                serve_process(app, tmp_path / "stderr.log", env=env, unset=OTEL_ENV) as url,
                httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client,
            ):
                provider.enqueue(Reply(status=503, error_message="overloaded"), Reply(text="fine"))
                done = await run(client)  # completed
    tree = of_trace(spans, done["trace_id"])
    assert [s.name for s in tree] == ["run", "chat text", "chat text", "flush"]
    _, failed, answered, _ = tree
    assert failed.status.code == Status.STATUS_CODE_ERROR and "overloaded" in failed.status.message
    assert (attrs(failed)["error.type"], attrs(failed)["yao.step.status"], attrs(failed)["yao.connector"]) == (
        "server", "recovered", "fake.model")  # fmt: skip
    assert answered.status.code != Status.STATUS_CODE_ERROR and "error.type" not in attrs(answered)
    assert failed.end_time_unix_nano <= answered.start_time_unix_nano


async def test_a_call_that_waits_for_a_person_is_traced_as_waiting(tmp_path: Path) -> None:
    """A call answered by a stand-in (it waits for a person) did not run: its span says so."""
    with receiver() as (endpoint, spans):
        async with FakeProvider() as provider:
            app = tooled_app(tmp_path / "app", provider.base_url)
            approving = "name: Tooled\nmcp:\n  servers: [{server: testing, approve: [add]}]\n"
            (app / "assistants/tooled/assistant.yml").write_text(approving)
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
            headers = await bearer(app)
            async with (
                serve_process(app, tmp_path / "stderr.log", env=env, unset=OTEL_ENV) as url,
                httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client,
            ):
                provider.enqueue(Reply(tool_calls=(call("testing__add", {"a": 2, "b": 3}, "c1"),)))
                body = {"messages": [{"role": "user", "content": "add"}]}
                waited = await client.post("/api/assistants/tooled/runs?stream=false", json=body)
    assert waited.json()["status"] == "waiting"
    [tool] = [s for s in spans if s.name == "execute_tool testing__add"]
    assert attrs(tool)["yao.tool.outcome"] == "waiting"


def test_without_otel_env_nothing_is_set_up_and_the_sdk_is_not_imported() -> None:
    script = (
        "import sys\n"
        "from yao_agent.observe import tracing\n"
        "import yao_agent.cli, yao_agent.server.serve\n"
        "from yao_agent.pipeline import observe\n"
        "print(tracing.setup(), len(observe._observers),\n"
        "      sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in OTEL_ENV}
    done = subprocess.run([sys.executable, "-c", script], env={**clean, "PYTHONPATH": str(REPO)}, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout.split() == ["False", "0", "[]"]


# W3C Trace Context, version 00: lowercase hex, 32 and 16 digits, neither all zero, two hex digits of flags;
# version ff is invalid; a later version may carry more fields after a `-`.
JOINED = [
    f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
    f"00-{CALLER_TRACE}-{CALLER_SPAN}-00",
    f"cc-{CALLER_TRACE}-{CALLER_SPAN}-01-what-a-later-version-adds",
    f"01-{CALLER_TRACE}-{CALLER_SPAN}-09",
]
NOT_JOINED = [
    f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01",  # uppercase
    f"00-{CALLER_TRACE}-{CALLER_SPAN.upper()}-01",
    f"00-{CALLER_TRACE}-{CALLER_SPAN}-0A",
    f"00-{'0' * 32}-{CALLER_SPAN}-01",  # all zero
    f"00-{CALLER_TRACE}-{'0' * 16}-01",
    f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01",  # the version no traceparent may have
    f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-more",  # version 00 has four fields
    f"00-{CALLER_TRACE}-{CALLER_SPAN}-1",
    f"00-{CALLER_TRACE[:-1]}-{CALLER_SPAN}-01",
    f"0-{CALLER_TRACE}-{CALLER_SPAN}-01",
    f"cc-{CALLER_TRACE}-{CALLER_SPAN}-01more",  # a later version's fields follow a `-`
]


async def test_a_valid_traceparent_joins_the_callers_trace_and_an_invalid_one_starts_a_new(
    live: Live, provider: FakeProvider
) -> None:
    async with live.client() as alice:
        for traceparent in [*JOINED, *NOT_JOINED]:
            provider.enqueue(Reply(text="hi"))
            async with alice.stream("POST", "/api/assistants/chat/runs", headers={"traceparent": traceparent},
                                    json={"messages": [{"role": "user", "content": "hi"}]}) as response:  # fmt: skip
                frames = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
            first = json.loads(frames[0])
            joined = first["trace_id"] == CALLER_TRACE
            assert joined == (traceparent in JOINED), traceparent
            assert len(first["trace_id"]) == 32 and first["trace_id"] != "0" * 32
