"""A randomized fault run on one chat: whatever fails, however often it is cancelled and resumed, the chat
stays valid to send to any provider.

Each example plays a random sequence of turns and resumes on one chat. The model (the loopback fake
provider) answers with text, with tool calls that succeed, fail in a way the model may correct, fail
for good, carry arguments that are no JSON object, or take long enough to be cancelled; or it fails
with a provider error or drops the connection mid-stream; and a run may be cancelled after any number
of its events. The properties, after every run:

* every request the provider received pairs each tool call with exactly one result, right after it,
  and carries only JSON-object arguments;
* the stored chat does the same, with exactly one result per call id;
* every run ends with one `stream_end`, and a chat whose last run did not complete has a resume point.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.pairing import request_problems, stored_problems
from tests.support.runtimes import app_files, close, make_runtime, runs_of
from tests.support.tools import ASSISTANT, in_process
from yao_agent.events import Event, StreamEnd
from yao_agent.identity import Identity
from yao_agent.pipeline import RunHandle, RunRequest, Runtime
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import Reply, ScriptedModel, ToolCall

WHO = Identity("prop")
CHAT = "chat-1"

# One tool call of each kind: (tool, arguments as the model writes them).
CALLS: dict[str, tuple[str, str]] = {
    "ok": ("testing__add", '{"a": 1, "b": 2}'),
    "bad_schema": ("testing__add", '{"a": "one", "b": 2}'),
    "bad_json": ("testing__add", '{"a": 1, "b'),
    "not_object": ("testing__echo", '["hello"]'),
    "refused": ("testing__refuse", '{"reason": "policy"}'),
    "protocol": ("testing__protocol_fail", "{}"),
    "nap": ("testing__nap", '{"seconds": 0.05}'),
}

replies = st.one_of(
    st.just("text"),
    st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=3),
    st.sampled_from(["e500", "drop"]),
)
actions = st.tuples(
    st.sampled_from(["turn", "turn", "resume"]),
    st.lists(replies, min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(min_value=1, max_value=30)),  # cancel after this many events
)


@dataclass
class Play:
    rt: Runtime
    fake: ScriptedModel
    ids: itertools.count[int]

    def script(self, reply: object) -> Reply:
        if reply == "text":
            return Reply(text="All right.")
        if reply == "e500":
            return Reply(status=500)
        if reply == "drop":
            return Reply(text="This answer breaks off", drop_after=3)
        assert isinstance(reply, list)
        kinds: list[str] = reply  # pyright: ignore[reportUnknownVariableType]
        return Reply(tool_calls=tuple(ToolCall(CALLS[k][0], CALLS[k][1], id=f"k{next(self.ids)}") for k in kinds))

    async def act(self, kind: str, scripted: list[object], cancel_after: int | None) -> None:
        self.fake.enqueue(*(self.script(r) for r in scripted))
        handle = await self.begin(kind)
        if handle is not None:
            ends = await follow(handle, cancel_after)
            assert ends == 1, f"{ends} stream_end events"
        for number, request in enumerate(self.fake.requests):
            assert request_problems(request.messages) == [], (number, request.messages)
        self.fake.reset()  # what was not asked for is not left for the next run
        await self.check()

    async def begin(self, kind: str) -> RunHandle | None:
        if kind == "resume":
            if await self.rt.store.resume_point(WHO, CHAT) is None:
                return None
            return await runs_of(self.rt).resume(WHO, CHAT)
        request = RunRequest("tooled", WHO, [{"role": "user", "content": "go on"}], chat_id=CHAT)
        return await runs_of(self.rt).start(request)

    async def check(self) -> None:
        history = await self.rt.store.history(WHO, CHAT)
        assert stored_problems(history) == [], [m.to_api() for m in history]
        latest = await self.rt.store.latest_run(WHO, CHAT)
        if latest is not None and latest.status != "completed":
            assert await self.rt.store.resume_point(WHO, CHAT) is not None


async def follow(handle: RunHandle, cancel_after: int | None) -> int:
    ends = 0
    async for count, event in aiter_numbered(handle):
        ends += isinstance(event, StreamEnd)
        if cancel_after is not None and count == cancel_after:
            handle.cancel()
    return ends


async def aiter_numbered(handle: RunHandle) -> AsyncIterator[tuple[int, Event]]:
    count = 0
    async for event in handle.events():
        count += 1
        yield count, event


async def play(root: Path, steps: list[tuple[str, list[object], int | None]]) -> None:
    store = SqlStore(await open_engine(store_url(f"sqlite:///{root / 'agent.db'}", root)))
    fake = ScriptedModel()
    files = {**app_files(fake.base_url, limits="{max_turns: 8, max_tool_retries: 2}"),
             "mcps/testing.yml": "command: python\n",
             "assistants/tooled/assistant.yml": ASSISTANT.format(max_turns=2)}  # fmt: skip
    rt = in_process(make_runtime(root / "app", store, files, model=fake))
    try:
        player = Play(rt, fake, itertools.count(1))
        for kind, scripted, cancel_after in steps:
            await player.act(kind, scripted, cancel_after)
    finally:
        await close(rt)
        await store.aclose()


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(actions, min_size=1, max_size=6))
def test_no_fault_ever_leaves_an_invalid_chat(steps: list[tuple[str, list[object], int | None]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(play(Path(folder), steps))
