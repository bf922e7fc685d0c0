"""Ids for chats, runs, messages, steps and traces. Injected, so tests can make them predictable.

Also the ids a run's task carries without any call passing them on, in context variables: the trace a
caller asked a run to join (its W3C `traceparent`), and the run's own ids every log line names."""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import re
import secrets
import time
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from typing import NamedTuple, Protocol

TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
# The traceparent of the request being handled, for the routes whose requests the pipeline builds itself
# (resume, approvals): permission.check takes it from here when the request carries none.
incoming: contextvars.ContextVar[str | None] = contextvars.ContextVar("yao_traceparent", default=None)
# The ids of the run this task belongs to: each run is its own asyncio task, started from a copy of its
# creator's context, so what the run logs (its stages, hooks and tools) carries them, and nothing else does.
_run: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("yao_agent_log_run", default=None)


class IdSource(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """`<prefix>_<time-ordered, random>`: sortable by creation, unguessable, 26 characters after the prefix."""

    def new(self, prefix: str) -> str:
        return f"{prefix}_{time.time_ns() // 1_000_000:011x}{secrets.token_hex(8)}"


class CountingIds:
    """`<prefix>_1`, `<prefix>_2`, ... — for tests that assert on ids."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"


class Parent(NamedTuple):
    trace_id: str
    span_id: str
    sampled: bool


def parse_traceparent(value: str | None) -> Parent | None:
    """A W3C `traceparent` header's trace id, span id and sampled flag; None for anything invalid, which
    starts a trace of its own (W3C Trace Context: lowercase hex only — `4BF9…` is no trace id — ids not
    all zero, version `ff` invalid, version `00` exactly four fields, a later version's extra fields
    after a `-`)."""
    found = TRACEPARENT.fullmatch(value.strip(" \t")) if value else None
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return Parent(trace_id, span_id, bool(int(flags, 16) & 1))


def new_trace_id(ids: IdSource) -> str:
    """A W3C trace id (32 lowercase hex) made from the runtime's ids, so a test's counting ids give
    the same trace ids every time while random ids give random ones."""
    return hashlib.blake2b(ids.new("trace").encode(), digest_size=16).hexdigest()


@contextmanager
def joined(traceparent: str | None) -> Generator[None]:
    """Within it, the runs a request starts join the trace `traceparent` names, when their own request
    carries none (see `run_trace_id`)."""
    token = incoming.set(traceparent)
    try:
        yield
    finally:
        incoming.reset(token)


def run_trace_id(traceparent: str | None, ids: IdSource) -> str:
    """The caller's trace id when it sent a valid traceparent (the run joins its trace), else a new one."""
    parent = parse_traceparent(traceparent)
    return parent.trace_id if parent is not None else new_trace_id(ids)


def bind_run(**fields: str | None) -> None:
    """Give every line logged from here on in this context (a run's task) these ids; None is left out."""
    _run.set({name: value for name, value in fields.items() if value})


def run_ids() -> Mapping[str, str]:
    """The ids bound in the current context (empty outside a run)."""
    return _run.get() or {}
