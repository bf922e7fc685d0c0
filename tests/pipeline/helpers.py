"""Run a turn and look at what it streamed and stored."""

from __future__ import annotations

from typing import Any

from yao_agent.events import Event, StreamEnd
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest, Runtime, run_stream

ALICE = Identity("alice")


async def turn(
    rt: Runtime, text: str | list[dict[str, Any]], chat_id: str = "c1", who: Identity = ALICE, assistant: str = "chat"
) -> list[Event]:
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    return [e async for e in run_stream(rt, RunRequest(assistant, who, messages, chat_id=chat_id))]


def end_of(events: list[Event]) -> StreamEnd:
    last = events[-1]
    assert isinstance(last, StreamEnd), last
    return last


async def stored(rt: Runtime, chat_id: str = "c1", who: Identity = ALICE) -> list[tuple[str, Any, str]]:
    """(role, content, status) of every stored message, in order."""
    return [(m.role, m.content, m.status) for m in await rt.store.history(who, chat_id)]
