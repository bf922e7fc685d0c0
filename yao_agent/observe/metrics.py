"""Prometheus metrics (CONTRACT §8.1), read from each root run once it is stored (`pipeline/observe.py`).

Only the server turns them on (`enable`, from `create_app`): the CLI never imports `prometheus_client`,
and until then `refused` and `load` are a check of `None`. Every label value comes from the app's own
ids or from fixed vocabularies (statuses, reasons, error codes) — never a chat, user or run id — so the
number of series stays bounded whatever callers send.

With `PROMETHEUS_MULTIPROC_DIR` set (several `yao-agent serve` processes on one host) each process
writes its values to files there and a scrape from any of them sums them all; the gauges sum the live
processes only, so a process that exits takes its runs out of `yao_active_runs`.
"""

from __future__ import annotations

import atexit
import os
from collections import Counter as Tally
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from yao_agent import settings
from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.pipeline import observe
from yao_agent.store.step_inputs import ModelCall

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from yao_agent.pipeline.state import RunState
    from yao_agent.store.records import StepRecord

MULTIPROC_ENV = settings.METRICS_FOLDER
RUN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
OUTCOMES = {"completed": "ok", "failed": "error", "recovered": "error", "cancelled": "cancelled"}
HOOKS = {"hook_create": "Create", "hook_next": "Next"}
UNKNOWN = "unknown"  # a tool name the model made up: one series for all of them, not one each


@dataclass(frozen=True)
class _Set:
    """The metrics of this process, and the registry a scrape reads."""

    registry: CollectorRegistry
    runs: Counter
    run_seconds: Histogram
    model_calls: Counter
    first_token: Histogram
    tokens: Counter
    cost: Counter
    tool_calls: Counter
    hook_calls: Counter
    fallbacks: Counter
    active: Gauge
    queued: Gauge
    refusals: Counter
    guardrails: Counter


_live: _Set | None = None


def enable() -> None:
    """Count from now on, in this process (again: nothing more happens)."""
    global _live
    if _live is None:
        _live = _build(os.environ.get(MULTIPROC_ENV))
        observe.watch(record)


def enabled() -> bool:
    return _live is not None


def _build(multiproc_dir: str | None) -> _Set:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess

    registry = CollectorRegistry(auto_describe=True)
    own: CollectorRegistry | None = registry
    if multiproc_dir:
        # The metrics write to the shared files; a scrape reads those files (every process's), never
        # this process's objects, which would be counted twice.
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
        own = None
        atexit.register(_leave, os.getpid(), multiproc_dir)

    def gauge(name: str, doc: str) -> Gauge:
        return Gauge(name, doc, registry=own, multiprocess_mode="livesum")

    return _Set(
        registry=registry,
        runs=Counter("yao_runs", "Root runs ended", ["assistant", "status", "reason"], registry=own),
        run_seconds=Histogram("yao_run_duration_seconds", "Root run duration", buckets=RUN_BUCKETS, registry=own),
        model_calls=Counter("yao_model_calls", "Model calls", ["connector", "outcome"], registry=own),
        first_token=Histogram(
            "yao_time_to_first_token_seconds",
            "Time to a model call's first token",
            ["connector"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=own,
        ),
        tokens=Counter("yao_tokens", "Model tokens", ["connector", "direction"], registry=own),
        cost=Counter("yao_cost_usd", "Model cost in USD (priced calls only)", ["connector"], registry=own),
        tool_calls=Counter("yao_tool_calls", "Tool calls", ["server", "tool", "outcome"], registry=own),
        hook_calls=Counter("yao_hook_calls", "Hook calls", ["hook", "outcome"], registry=own),
        fallbacks=Counter("yao_fallbacks", "Fallbacks between connectors", ["from", "to"], registry=own),
        active=gauge("yao_active_runs", "Runs running now (one per chat)"),
        queued=gauge("yao_queued_runs", "Runs waiting for their chat's active run"),
        refusals=Counter("yao_refusals", "Runs refused before they started", ["reason"], registry=own),
        guardrails=Counter(
            "yao_guardrail_hits", "Guardrail checks that masked or blocked", ["stage", "check", "action"], registry=own
        ),
    )


@contextmanager
def off() -> Generator[None]:
    """Count nothing inside: the bench's plain run without metrics, beside the same run with them."""
    global _live
    kept, _live = _live, None
    try:
        yield
    finally:
        _live = kept


def _leave(pid: int, multiproc_dir: str) -> None:
    """At this process's exit: its gauges leave the sums (its counters stay, as Prometheus expects)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, multiproc_dir)  # pyright: ignore[reportUnknownMemberType]


def scrape() -> tuple[bytes, str]:
    """The text exposition of every metric (of every process, in multiprocess mode), and its content type."""
    from prometheus_client import generate_latest
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    if _live is None:
        raise RuntimeError("metrics are not enabled in this process")
    # The classic text format's type, which every Prometheus version reads (what is written is that format).
    return generate_latest(_live.registry), CONTENT_TYPE_PLAIN_0_0_4


def refused(reason: str) -> None:
    """A run was refused at stages 1–2; `reason` is the error's type (`budget_exceeded`, `chat_busy`, …)."""
    if _live is not None:
        _live.refusals.labels(reason).inc()


def load(active: int, queued: int) -> None:
    """How many runs of this process run now, and how many wait for their chat."""
    if _live is not None:
        _live.active.set(active)
        _live.queued.set(queued)


def record(state: RunState) -> None:
    """The observer: count one stored root run, its child runs' steps included (they share its buffer)."""
    live = _live
    if live is None:
        return
    run = state.run
    live.runs.labels(run.assistant_id, run.status, run.reason or "").inc()
    if run.duration_ms is not None:
        live.run_seconds.observe(run.duration_ms / 1000)
    for step in state.buffer.steps:
        if step.type == "llm":
            _model_call(live, step)
        elif step.type in HOOKS:
            live.hook_calls.labels(HOOKS[step.type], OUTCOMES.get(step.status, step.status)).inc()
        elif step.type == "guardrail":
            said = as_mapping(step.output)
            live.guardrails.labels(str(said.get("stage")), str(said.get("check")), str(said.get("action"))).inc()
    for (server, tool, outcome), count in _tool_calls(state).items():
        live.tool_calls.labels(server, tool, outcome).inc(count)


def _model_call(live: _Set, step: StepRecord) -> None:
    made = as_mapping(step.output)
    hops = [as_mapping(hop) for hop in as_list(made.get("fallbacks"))]
    for hop in hops:  # each try it gave up on is a (`recovered`) step of its own, counted as one
        live.fallbacks.labels(str(hop.get("from")), str(hop.get("to"))).inc()
    # A failed call's step names no connector in its output (it would be a row of the usage ledger): a
    # try the call went past names it in its error; the one the call failed on is the last it fell back
    # to, else the chain's first.
    tried = step.input.connectors if isinstance(step.input, ModelCall) else ()
    connector = (made.get("connector") or as_mapping(step.error).get("connector")
                 or (hops[-1].get("to") if hops else tried[0] if tried else None))  # fmt: skip
    if not isinstance(connector, str):
        return  # no connector was asked (an empty chain)
    live.model_calls.labels(connector, OUTCOMES.get(step.status, step.status)).inc()
    first = made.get("first_token_ms")
    if isinstance(first, int | float):
        live.first_token.labels(connector).observe(first / 1000)
    used = as_mapping(made.get("usage"))
    for direction in ("input", "output"):
        tokens = used.get(f"{direction}_tokens")
        if isinstance(tokens, int) and tokens > 0:
            live.tokens.labels(connector, direction).inc(tokens)
    cost = used.get("cost_usd")
    if isinstance(cost, int | float) and cost > 0:
        live.cost.labels(connector).inc(cost)


def _tool_calls(state: RunState) -> Tally[tuple[str, str, str]]:
    """(server, tool, outcome) of every call that got a result. A completed tool step keeps no input, so
    the calls are read from the messages: each result paired with its call (made by this run, or by the
    run it continues: an approval's, a resume's), the tool named by the offer (what a model may call),
    and an error told by the text the model was sent for it. A result given without running the call
    (a stand-in, a denial) counts as what it is: `waiting`, `denied`, `cancelled`, `not_run`."""
    offered = {spec.name: (spec.server, spec.tool) for spec in (state.tools.tools if state.tools else ())}
    errors = set(_error_texts(state.buffer.steps))
    named = {call.id: call.name for message in [*state.history, *state.buffer.messages] for call in message.tool_calls}
    unrun = state.buffer.unrun
    tally: Tally[tuple[str, str, str]] = Tally()
    for message in state.buffer.messages:
        call_id = message.tool_call_id
        if message.role != "tool" or call_id is None:
            continue
        server, tool = offered.get(named.get(call_id, ""), (UNKNOWN, UNKNOWN))
        tally[server, tool, unrun.get(call_id) or ("error" if message.content in errors else "ok")] += 1
    return tally


def _error_texts(steps: list[StepRecord]) -> Iterator[str]:
    """The tool messages of failed calls, as `ToolOutcome.text` writes them from the step's `errors`."""
    for step in steps:
        if step.type != "tool":
            continue
        for error in as_mapping(step.output).get("errors") or ():
            if isinstance(error, str):
                yield error if error.lower().startswith("error") else f"Error: {error}"
