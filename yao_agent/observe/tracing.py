"""OpenTelemetry traces of runs (CONTRACT §8.1), built after the fact from what a run stored.

A run already records each step with its start and end (its steps are what the store and the run view
show), so its trace is made once the run is stored, by an observer (pipeline/observe.py), rather than by
spans opened throughout the pipeline: one trace per run whose id is the run's `trace_id`, a `run` span,
under it a span per model call (GenAI conventions), per tool call (`execute_tool`), per hook call and
per delegation (whose own steps nest under it), and the flush. Stages that keep no timing of their own
(permission, admission, connector, history) have no span.

On only when the standard environment says so (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_TRACES_EXPORTER`
other than `none`); off, nothing of OpenTelemetry is imported and no observer is registered. The SDK is
the optional extra `yao-agent[otel]`: asked for without it, a warning, once.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.ids import parse_traceparent
from yao_agent.store.step_inputs import HookCall, ModelCall, ToolRound

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from yao_agent.pipeline.state import RunState
    from yao_agent.store.records import StepRecord

log = logging.getLogger("yao_agent.observe.tracing")
FLUSH_AT_MOST_S = 60.0  # a gap longer than this between a run's end and its observer is no flush (a test clock)
FAILED = ("failed", "recovered", "cancelled", "interrupted")  # recovered: it failed, and the run went on
_state: dict[str, Any] = {}  # this process's setup: {"provider": ..., "stop": ...} once on; {"warned": True}


def wanted(environ: Mapping[str, str]) -> bool:
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def setup(environ: Mapping[str, str] | None = None) -> bool:
    """Trace this process's runs if the environment asks for it; whether they are traced. Idempotent."""
    environ = os.environ if environ is None else environ
    if "provider" in _state:
        return True
    if not wanted(environ):
        return False
    try:
        provider = _provider(environ)
    except ImportError:
        if not _state.get("warned"):
            _state["warned"] = True
            log.warning("OTEL_* asks for traces, but OpenTelemetry is not installed: pip install 'yao-agent[otel]'")
        return False
    if provider is None:
        return False
    from yao_agent.pipeline import observe

    tracer = provider.get_tracer("yao_agent")
    _state.update(provider=provider, tracer=tracer, stop=observe.watch(lambda state: record(tracer, state)))
    return True


@contextmanager
def off() -> Generator[None]:
    """Runs that end within it are not traced, though tracing is set up (a benchmark's baseline)."""
    from yao_agent.pipeline import observe

    stop = _state.pop("stop", None)
    if stop is not None:
        stop()
    try:
        yield
    finally:
        if stop is not None:
            tracer = _state["tracer"]
            _state["stop"] = observe.watch(lambda state: record(tracer, state))


def shutdown() -> None:
    """Stop tracing and send what is still queued (the SDK also does it at exit)."""
    stop, provider = _state.pop("stop", None), _state.pop("provider", None)
    if stop is not None:
        stop()
    if provider is not None:
        provider.shutdown()


def _provider(environ: Mapping[str, str]) -> TracerProvider | None:
    """The SDK's provider with the exporter OTEL_TRACES_EXPORTER names (otlp, the default, or console);
    everything else (endpoint, headers, batching, sampler, service name) the SDK reads from OTEL_*."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    kind = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=_endpoint(environ))
    elif kind == "console":
        exporter = ConsoleSpanExporter()
    else:
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp or console): runs are not traced", kind)
        return None
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "yao-agent"})
    provider = TracerProvider(resource=resource, id_generator=_RunIds())
    provider.add_span_processor(BatchSpanProcessor(exporter))  # exported off the event loop's thread
    return provider


def _endpoint(environ: Mapping[str, str]) -> str | None:
    """Where traces go, as the SDK reads it from the environment (read here from `environ`, which is the
    process's own unless a caller, a benchmark, gives another); None: the SDK's default."""
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return f"{base.rstrip('/')}/v1/traces" if base else None


_next_trace_id: contextvars.ContextVar[int] = contextvars.ContextVar("yao_next_trace_id", default=0)


def _RunIds() -> Any:
    """The SDK's random span ids, and for a root span the run's own trace id (set just before it starts)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class RunIds(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            return _next_trace_id.get() or super().generate_trace_id()

    return RunIds()


def record(tracer: Tracer, state: RunState) -> None:
    """Export the span tree of a stored root run."""
    from opentelemetry import trace

    run = state.run
    parent = parse_traceparent(state.request.traceparent)
    context = None
    if parent is not None and parent.trace_id == run.trace_id:
        caller = trace.SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16), is_remote=True,
                                   trace_flags=trace.TraceFlags(1 if parent.sampled else 0))  # fmt: skip
        context = trace.set_span_in_context(trace.NonRecordingSpan(caller))
    token = _next_trace_id.set(int(run.trace_id, 16) if re.fullmatch(r"[0-9a-f]{32}", run.trace_id) else 0)
    try:
        attributes = {"yao.run_id": run.id, "yao.chat_id": run.chat_id, "yao.assistant_id": run.assistant_id,
                      "gen_ai.agent.name": run.assistant_id, "yao.status": run.status,
                      "yao.reason": run.reason or ""}  # fmt: skip
        root = tracer.start_span("run", context=context, start_time=_ns(run.started_at), attributes=attributes)
    finally:
        _next_trace_id.reset(token)
    _steps(tracer, state, root)
    ended = run.ended_at if run.ended_at is not None else time.time()
    flushed = _flush(tracer, root, ended)
    _status(root, run.status in FAILED, str(run.reason or run.status))
    root.end(end_time=_ns(max(ended, flushed or ended)))


def _steps(tracer: Tracer, state: RunState, root: Span) -> None:
    """A span per step, in order; a delegation's span is the parent of its thread's steps."""
    delegations: list[tuple[StepRecord, Span]] = []  # in order; the last of a thread owns its next steps
    names = _call_names(state)
    for step in state.buffer.steps:
        owner = (
            next((span for d, span in reversed(delegations) if d.thread_id == step.thread_id), root)
            if step.thread_id
            else root
        )
        if step.type == "delegate":
            span = _step_span(tracer, _delegator(delegations, step) or root, step, "delegate",
                              {"yao.thread_id": step.thread_id or ""})  # fmt: skip
            delegations.append((step, span))
        elif step.type == "tool":
            _tools(tracer, state, owner, step, names)
        else:
            name, attributes = _chat(state, step) if step.type == "llm" else (step.type, _hook(step))
            _step_span(tracer, owner, step, name, attributes).end(end_time=_ns(_end(step)))
    for step, span in delegations:  # ended after the steps they own were started under them
        span.end(end_time=_ns(_end(step)))


def _delegator(delegations: Sequence[tuple[StepRecord, Span]], step: StepRecord) -> Span | None:
    """The delegation a delegation was made from: the latest other one still running when it started."""
    for earlier, span in reversed(delegations):
        if earlier.thread_id != step.thread_id and earlier.started_at <= step.started_at <= _end(earlier):
            return span
    return None


def _step_span(tracer: Tracer, under: Span, step: StepRecord, name: str, attributes: Mapping[str, Any],
               failed: bool | None = None) -> Span:  # fmt: skip
    """A step's span, ERROR when it failed (or when `failed` says so: a call of a round)."""
    from opentelemetry import trace

    attributes = {"yao.step": step.type, "yao.step.status": step.status, **attributes}
    span = tracer.start_span(name, context=trace.set_span_in_context(under), start_time=_ns(step.started_at),
                             attributes=attributes)  # fmt: skip
    _status(span, step.status in FAILED if failed is None else failed, _error(step.error) or step.status)
    return span


def _chat(state: RunState, step: StepRecord) -> tuple[str, dict[str, Any]]:
    """A model call's span name and GenAI attributes (what the step kept of who answered and its usage)."""
    made, failed = as_mapping(step.output), as_mapping(step.error)
    specs = {c.id: c for c in state.chain}
    asked = step.input.connectors if isinstance(step.input, ModelCall) else ()  # kept by a call that failed
    # A try the call went past (pipeline/trail.py) names its connector in its error.
    connector = str(made.get("connector") or failed.get("connector") or (asked[0] if asked else ""))
    model = str(made.get("model") or (specs[connector].model if connector in specs else ""))
    usage = as_mapping(made.get("usage"))
    kinds = {c.id: c.type for c in state.chain}
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                  "yao.connector": connector, "yao.transition": step.transition or ""}  # fmt: skip
    if connector in kinds:
        attributes["gen_ai.provider.name"] = attributes["gen_ai.system"] = kinds[connector]
    for key, name in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens")):
        if isinstance(usage.get(key), int):
            attributes[name] = usage[key]
    if isinstance(usage.get("cost_usd"), int | float):
        attributes["yao.cost_usd"] = usage["cost_usd"]
    if isinstance(made.get("first_token_ms"), int | float):
        attributes["yao.first_token_ms"] = made["first_token_ms"]
    if isinstance(failed.get("kind"), str):
        attributes["error.type"] = failed["kind"]  # how it failed: timeout, rate_limit, connection, ...
    return f"chat {model}".strip(), attributes


def _tools(tracer: Tracer, state: RunState, under: Span, step: StepRecord, names: Mapping[str, str]) -> None:
    """One `execute_tool` span per call of the round: from the round's start (its calls run at once) to
    the call's result. A completed round kept no input: its calls are known by their results."""
    results = {m.tool_call_id: m for m in state.buffer.messages if m.role == "tool" and m.tool_call_id
               and m.thread_id == step.thread_id and step.started_at <= m.created_at <= _end(step)}  # fmt: skip
    ids = (step.input.ids if isinstance(step.input, ToolRound) else []) or list(results)
    errors = set(_tool_errors(step))
    unrun = state.buffer.unrun  # calls answered without running: waiting, denied, cancelled, not_run
    for call_id in ids:
        result = results.get(call_id)
        said = result.content if result is not None and isinstance(result.content, str) else None
        failed = said in errors if result is not None else step.status in FAILED
        name = names.get(call_id, "")
        outcome = unrun.get(call_id) or ("error" if failed else "ok")
        span = _step_span(tracer, under, step, f"execute_tool {name}".strip(), {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
            "yao.tool.outcome": outcome,
        }, failed)  # fmt: skip
        span.end(end_time=_ns(result.created_at if result is not None else _end(step)))


def _tool_errors(step: StepRecord) -> Sequence[str]:
    """What the failed calls of a round answered the model (`Error: …`), to tell which calls failed."""
    made = as_mapping(step.output)
    said = [str(e) for e in as_list(made.get("errors"))]
    return [*said, *(f"Error: {e}" for e in said)]


def _call_names(state: RunState) -> dict[str, str]:
    """Tool call id → the tool's name, from the assistant messages that made the calls."""
    return {c.id: c.name for m in [*state.history, *state.buffer.messages] for c in m.tool_calls}


def _flush(tracer: Tracer, root: Span, ended: float) -> float | None:
    """The flush's span: from the run's end (set just before its flush) to now (its observer is told right
    after the flush); none when the run's clock is not this one (a test's)."""
    from opentelemetry import trace

    now = time.time()
    if not 0 <= now - ended <= FLUSH_AT_MOST_S:
        return None
    span = tracer.start_span("flush", context=trace.set_span_in_context(root), start_time=_ns(ended))
    span.end(end_time=_ns(now))
    return now


def _status(span: Span, failed: bool, why: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    if failed:
        span.set_status(Status(StatusCode.ERROR, why))


def _error(error: Any) -> str:
    said = as_mapping(error).get("message")
    return str(said or "") if said is not None else str(error or "")


def _hook(step: StepRecord) -> dict[str, Any]:
    return {"yao.hook.function": step.input.function if isinstance(step.input, HookCall) else ""}


def _end(step: StepRecord) -> float:
    return step.ended_at if step.ended_at is not None else step.started_at


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
