"""Run a turn and look at what it streamed and stored."""

from __future__ import annotations

from typing import Any

from yao_agent.events import Event, StreamEnd
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.service.runs import Runs

ALICE = Identity("alice")
_RUNS: dict[Runtime, Runs] = {}  # the latest few runtimes' (a test uses one or two; older ones are let go)


def runs_of(rt: Runtime) -> Runs:
    """The one `Runs` of a test's runtime, as a process has one: its runs share one admission (queues, cancels)."""
    if rt not in _RUNS:
        _RUNS[rt] = Runs(rt)
        while len(_RUNS) > 8:
            del _RUNS[next(iter(_RUNS))]
    return _RUNS[rt]


async def turn(
    rt: Runtime, text: str | list[dict[str, Any]], chat_id: str = "c1", who: Identity = ALICE, assistant: str = "chat"
) -> list[Event]:
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    return [e async for e in runs_of(rt).stream(RunRequest(assistant, who, messages, chat_id=chat_id))]


def end_of(events: list[Event]) -> StreamEnd:
    last = events[-1]
    assert isinstance(last, StreamEnd), last
    return last


async def stored(rt: Runtime, chat_id: str = "c1", who: Identity = ALICE) -> list[tuple[str, Any, str]]:
    """(role, content, status) of every stored message, in order."""
    return [(m.role, m.content, m.status) for m in await rt.store.history(who, chat_id)]
