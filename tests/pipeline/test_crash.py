"""A process killed mid-stream loses nothing: the input is stored, the run becomes interrupted, resume ends it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support.apps import make_app
from tests.support.runtimes import app_files, stored
from yao_agent.identity import Identity
from yao_agent.service.runs import Runs
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

REPO = Path(__file__).resolve().parents[2]
LOCAL = Identity("local")


@pytest.mark.slow
async def test_sigkill_mid_stream_then_recover_and_resume(tmp_path: Path, store_raw_url: str) -> None:
    async with FakeProvider() as provider:
        app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
        provider.enqueue(Reply(text="x" * 500, chunk_size=1, delay_s=0.02))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", store_raw_url,
            "chat", "chat", "tell me everything", "--chat", "k1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert process.stdout is not None
        seen = b""
        while b"xxxxx" not in seen:  # the reply is streaming: kill it now
            seen += await asyncio.wait_for(process.stdout.read(64), 30)
        process.send_signal(signal.SIGKILL)
        await process.wait()

        runs = await Runs.open(app, db=store_raw_url, recover=False)
        rt = runs.rt
        try:
            assert await stored(rt, "k1", LOCAL) == [("user", "tell me everything", "completed")]
            run = await rt.store.latest_run(LOCAL, "k1")
            assert run is not None and run.status == "running"  # nobody has looked yet

            assert await runs.process.recover() == [run.id]  # what any command that opens the store does
            point = await rt.store.resume_point(LOCAL, "k1")
            assert point is not None and point.run.status == "interrupted"
            assert [(s.type, s.status) for s in point.steps] == [("llm", "interrupted")]

            provider.enqueue(Reply(text="Here is everything."))
            handle = await runs.resume(LOCAL, "k1")
            events = [e async for e in handle.events()]
            assert events[-1].type == "stream_end" and events[-1].status == "completed"
            assert await stored(rt, "k1", LOCAL) == [
                ("user", "tell me everything", "completed"),
                ("assistant", "Here is everything.", "completed"),
            ]
            assert provider.requests[-1].messages[-1] == {"role": "user", "content": "tell me everything"}
            chat = await rt.store.get_chat(LOCAL, "k1")
            assert chat is not None and chat.last_status == "completed"
        finally:
            await runs.aclose()


def test_a_killed_process_its_parent_has_not_collected_yet_counts_as_dead() -> None:
    """Killed, a server is dead for the others at once, even while it lingers as a zombie (its parent, a
    process manager or a test, has not waited for it yet): its runs become resumable."""
    import socket
    import subprocess
    import time

    from yao_agent.pipeline.runtime import owner_is_dead

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = f"{socket.gethostname()}|{child.pid}|boot"
        assert not owner_is_dead(owner, 0)
        child.send_signal(signal.SIGKILL)
        for _ in range(100):
            if owner_is_dead(owner, 0):
                break
            time.sleep(0.02)
        assert owner_is_dead(owner, 0) and child.returncode is None  # not collected, yet dead
    finally:
        child.kill()
        child.wait()
