"""The Runs service: the one way in. Each check is made once, by the part that owns it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, turn
from tests.support.stores import CountingStore
from yao_agent.errors import NotFound
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

REPO = Path(__file__).resolve().parents[2]


def ask(text: str, chat_id: str | None = None, who: Identity = ALICE, must_exist: bool = False) -> RunRequest:
    return RunRequest("chat", who, [{"role": "user", "content": text}], chat_id=chat_id, chat_must_exist=must_exist)


@pytest.fixture
async def runs(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Runs]:
    CountingStore.checks = 0
    runs = Runs(make_runtime(tmp_path / "app", CountingStore(store.db), app_files(fake.base_url), model=fake))
    try:
        yield runs
    finally:
        await runs.rt.engines.aclose()


async def test_a_run_looks_up_its_chats_owner_once(runs: Runs, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="one"), Reply(text="two"), Reply(status=500), Reply(text="resumed"))
    assert (await runs.run(ask("first", "c1"))).status == "completed"
    CountingStore.checks = 0
    assert (await runs.run(ask("second", "c1", must_exist=True))).status == "completed"
    assert CountingStore.checks == 1  # stage 1 only: nobody before it asks again
    assert end_of(await turn(runs.rt, "third")).reason == "model_error"
    CountingStore.checks = 0
    handle = await runs.resume(ALICE, "c1")
    assert [e async for e in handle.events()][-1].type == "stream_end"
    assert handle.result().status == "completed"
    assert CountingStore.checks == 0  # the resume point, read with the caller's identity, proves the chat theirs


async def test_a_chat_that_must_exist_is_one_of_the_callers(runs: Runs, fake: ScriptedModel) -> None:
    with pytest.raises(NotFound, match="no chat 'made-up'"):  # as over HTTP, where the server names new chats
        await runs.start(ask("hi", "made-up", must_exist=True))
    fake.enqueue(Reply(text="first", chunk_size=1, delay_s=0.01), Reply(text="second"))
    first = await runs.start(ask("hi"))  # a new chat: accepted, not stored yet
    second = await runs.start(ask("and?", first.chat_id, must_exist=True))  # the caller's already
    with pytest.raises(NotFound, match=f"no chat '{first.chat_id}'"):  # nobody else's, even before it is stored
        await runs.start(ask("mine?", first.chat_id, who=Identity("mallory"), must_exist=True))
    for handle in (first, second):
        assert [e async for e in handle.events()][-1].type == "stream_end"
        assert handle.result().status == "completed"
    assert [m.content for m in await runs.messages(ALICE, first.chat_id)] == ["hi", "first", "and?", "second"]


async def test_chat_operations_answer_an_id_no_chat_can_have_as_no_chat(runs: Runs) -> None:
    for operation in (runs.messages, runs.resume_point, runs.resume, runs.cancel, runs.delete):
        with pytest.raises(NotFound, match="no chat 'no such id'"):
            await operation(ALICE, "no such id")
    with pytest.raises(NotFound, match="no chat 'c1'"):
        await runs.append(ALICE, "c1", [{"role": "user", "content": "hi"}])


def test_the_package_exports_the_api_without_loading_the_pipeline_up_front() -> None:
    """`import yao_agent` stays light (every command imports it); `Runs` loads when it is first used."""
    code = (
        "import sys, yao_agent\n"
        "assert 'yao_agent.service.runs' not in sys.modules and 'yao_agent.pipeline' not in sys.modules\n"
        "from yao_agent import Identity, RunRequest, Runs, StreamEnd\n"
        "print(Runs.__module__, RunRequest.__module__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["yao_agent.service.runs", "yao_agent.pipeline.state"]
