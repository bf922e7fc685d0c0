"""Two server processes on one PostgreSQL database: one active run per chat, and cancels that cross over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.apps import make_app
from tests.support.runtimes import app_files, stored
from yao_agent.errors import NoActiveRun, NotFound, UsageError
from yao_agent.events import MessageDelta, StreamEnd
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest
from yao_agent.service.runs import Runs, Runtime
from yao_agent.store.leases import ANSWER_S, PgLease
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[2]
LOCAL = Identity("local")


@pytest.fixture
def pg_url(pg_database: str) -> str:
    from tests.support.postgres import pg_admin_truncate

    pg_admin_truncate(pg_database)
    return pg_database


async def other_process(app: Path, pg_url: str, text: str) -> asyncio.subprocess.Process:
    """`yao-agent chat` in its own process, on chat k1, started once its reply is streaming."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAO_AGENT_LEASE_TTL_S": "2"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", pg_url, "chat", "chat", text, "--chat", "k1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    seen = b""
    while b"zzzz" not in seen:
        chunk = await asyncio.wait_for(process.stdout.read(64), 60)
        assert chunk, (await process.stderr.read()).decode() if process.stderr else "no output"
        seen += chunk
    return process


async def ended(process: asyncio.subprocess.Process) -> None:
    """Kill `process` if a failed test left it running, so it cannot hold the next test's chat."""
    if process.returncode is None:
        process.kill()
        await process.wait()


async def our_runs(app: Path, pg_url: str) -> Runs:
    os.environ["YAO_AGENT_LEASE_TTL_S"] = "2"
    try:
        return await Runs.open(app, db=pg_url, recover=False)
    finally:
        del os.environ["YAO_AGENT_LEASE_TTL_S"]


async def ending(handle_events: AsyncIterator[object]) -> StreamEnd:
    last = None
    async for event in handle_events:
        last = event
    assert isinstance(last, StreamEnd)
    return last


async def test_two_processes_take_turns_on_one_chat(tmp_path: Path, pg_url: str, provider: FakeProvider) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 60, chunk_size=1, delay_s=0.02), Reply(text="second answer"))
    process = await other_process(app, pg_url, "first")
    runs = await our_runs(app, pg_url)
    try:
        handle = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "second"}], chat_id="k1"))
        end = await ending(handle.events())
        assert await process.wait() == 0
        assert end.status == "completed"
        assert [r[1] for r in await stored(runs.rt, "k1", LOCAL)] == ["first", "z" * 60, "second", "second answer"]
        assert [r.messages[-1]["content"] for r in provider.requests] == ["first", "second"]
    finally:
        await runs.aclose()


async def test_a_cancel_in_one_process_reaches_a_run_in_another(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="after"))
    process = await other_process(app, pg_url, "long one")
    runs = await our_runs(app, pg_url)
    try:
        assert await runs.cancel(LOCAL, "k1") == 1  # the run in the other process, which heard it and said so
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 1 and b"cancelled" in out
        handle = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "next"}], chat_id="k1"))
        assert (await ending(handle.events())).status == "completed"  # accepted after the cancel: untouched
        run = await runs.rt.store.latest_run(LOCAL, "k1")
        assert run is not None and run.status == "completed"
        rows = await stored(runs.rt, "k1", LOCAL)
        assert [r[2] for r in rows] == ["completed", "incomplete", "completed", "completed"]
        assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]
    finally:
        await ended(process)
        await runs.aclose()


async def test_a_cancel_counts_what_it_cancelled_here_and_in_the_process_holding_the_chat(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02))
    process = await other_process(app, pg_url, "long one")
    runs = await our_runs(app, pg_url)
    try:
        queued = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "me next"}], chat_id="k1"))
        assert await runs.cancel(LOCAL, "k1") == 2  # the request waiting here, and the run over there
        assert (await ending(queued.events())).status == "cancelled"
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 1 and b"cancelled" in out
        assert len(provider.requests) == 1  # the queued request never reached the model
    finally:
        await ended(process)
        await runs.aclose()


async def test_a_holder_that_does_not_answer_still_counts_for_its_run(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    """A process that holds the chat but cannot answer now (stopped here; busy, or dead before its lease
    expires) counts for the run it holds: the cancel stops it once heard."""
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02))
    process = await other_process(app, pg_url, "long one")
    runs = await our_runs(app, pg_url)
    try:
        process.send_signal(signal.SIGSTOP)
        try:
            started = asyncio.get_running_loop().time()
            assert await runs.cancel(LOCAL, "k1") == 1
            assert asyncio.get_running_loop().time() - started >= ANSWER_S  # it waited for the answer, in vain
        finally:
            process.send_signal(signal.SIGCONT)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 1 and b"cancelled" in out  # heard once it went on
    finally:
        await ended(process)
        await runs.aclose()


async def test_an_interrupt_in_one_process_cancels_the_run_in_another(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="me first"))
    process = await other_process(app, pg_url, "long one")
    runs = await our_runs(app, pg_url)
    try:
        ask = [{"role": "user", "content": "stop that"}]
        handle = await runs.start(RunRequest("chat", LOCAL, ask, chat_id="k1", on_busy="interrupt"))
        assert (await ending(handle.events())).status == "completed"
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 1 and b"cancelled" in out  # interrupted, not waited for
        rows = await stored(runs.rt, "k1", LOCAL)
        assert [(r[0], r[2]) for r in rows] == [
            ("user", "completed"),
            ("assistant", "incomplete"),
            ("user", "completed"),
            ("assistant", "completed"),
        ]
        assert [r[1] for r in rows][2:] == ["stop that", "me first"]
    finally:
        await runs.aclose()


async def test_a_process_killed_holding_a_chat_frees_it_when_its_lease_expires(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="taken over"))
    process = await other_process(app, pg_url, "doomed")
    process.send_signal(signal.SIGKILL)
    await process.wait()
    runs = await our_runs(app, pg_url)
    try:
        started = asyncio.get_running_loop().time()
        handle = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "anyone?"}], chat_id="k1"))
        assert (await ending(handle.events())).status == "completed"
        assert asyncio.get_running_loop().time() - started < 10  # the 2 s lease, not forever
        stored_runs = await runs.rt.store.runs_of(LOCAL, "k1")
        assert [r.status for r in stored_runs] == ["completed", "interrupted"]  # the killed run no longer "running"
        rows = await stored(runs.rt, "k1", LOCAL)
        assert [r[1] for r in rows] == ["doomed", "anyone?", "taken over"]
    finally:
        await runs.aclose()


async def skewed_runs(app: Path, pg_url: str, skew_s: float) -> Runs:
    """A second server process whose host's clock is `skew_s` off (both share this test's process)."""
    rt = await Runtime.open(app, db=pg_url)
    host, _, _ = rt.owner.split("|")  # (another live process, as `owner_is_dead` reads it: our parent)
    runs = Runs(replace(rt, clock=lambda: time.time() + skew_s, owner=f"{host}|{os.getppid()}|skewed"))
    await runs.process.share_chats()
    return runs


@pytest.mark.parametrize("skew_s", [30.0, -30.0])
async def test_a_cancel_reaches_a_run_on_a_host_whose_clock_is_off(
    tmp_path: Path, pg_url: str, provider: FakeProvider, skew_s: float
) -> None:
    """Accepted before the cancel by the database's clock: cancelled, however far the hosts' clocks disagree."""
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02))
    runs, skewed = await our_runs(app, pg_url), await skewed_runs(app, pg_url, skew_s)
    try:
        handle = await skewed.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "long"}], chat_id="k1"))
        events = aiter(handle.events())
        while not isinstance(await anext(events), MessageDelta):
            pass
        assert await runs.cancel(LOCAL, "k1") == 1
        assert (await ending(events)).status == "cancelled"
    finally:
        await skewed.aclose()
        await runs.aclose()


@pytest.mark.parametrize("skew_s", [30.0, -30.0])
async def test_a_request_accepted_after_an_interrupt_survives_it_whatever_the_clocks(
    tmp_path: Path, pg_url: str, provider: FakeProvider, skew_s: float
) -> None:
    """An interrupt (cancel what came before me) sent from a host whose clock is off spares what another
    process accepted after it, and still cancels what that process was running."""
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="after"))
    runs, skewed = await our_runs(app, pg_url), await skewed_runs(app, pg_url, skew_s)
    try:
        first = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "long"}], chat_id="k1"))
        events = aiter(first.events())
        while not isinstance(await anext(events), MessageDelta):
            pass
        lease = skewed.process.admission.lease
        assert isinstance(lease, PgLease)
        interrupt_at = lease.now()  # the interrupting request is accepted over there now…
        await asyncio.sleep(0.05)
        later = await runs.start(RunRequest("chat", LOCAL, [{"role": "user", "content": "later"}], chat_id="k1"))
        await lease.cancel_everywhere("k1", interrupt_at)  # …and its interrupt arrives after `later` came here
        assert (await ending(events)).status == "cancelled"
        assert (await ending(later.events())).status == "completed"
    finally:
        await skewed.aclose()
        await runs.aclose()


async def test_a_run_of_a_killed_process_becomes_resumable_without_anyone_taking_its_chat(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    """Its chat is not needed by any new run: the processes still alive notice by themselves that it died."""
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="finished here"))
    runs = await our_runs(app, pg_url)
    try:
        process = await other_process(app, pg_url, "doomed")
        process.send_signal(signal.SIGKILL)
        await process.wait()
        point = None
        for _ in range(100):
            with contextlib.suppress(NotFound):
                point = await runs.resume_point(LOCAL, "k1")
                break
            await asyncio.sleep(0.1)
        assert point is not None and point.run.status == "interrupted"
        end = await ending((await runs.resume(LOCAL, "k1")).events())
        assert end.status == "completed"
    finally:
        await runs.aclose()


@pytest.mark.slow
async def test_an_append_reaches_the_run_in_another_process(
    tmp_path: Path, pg_url: str, provider: FakeProvider
) -> None:
    app = make_app(tmp_path / "app", app_files(provider.base_url), base={})
    provider.enqueue(Reply(text="z" * 300, chunk_size=1, delay_s=0.02), Reply(text="About that, too."))
    process = await other_process(app, pg_url, "tell me")
    runs = await our_runs(app, pg_url)
    try:
        with pytest.raises(NotFound):  # another tenant hears of no such chat
            await runs.append(Identity("mallory"), "k1", [{"role": "user", "content": "me too"}])
        with pytest.raises(UsageError, match="too long to hand to the run of chat 'k1'"):
            await runs.append(LOCAL, "k1", [{"role": "user", "content": "x" * 9000}])
        run_id = await runs.append(LOCAL, "k1", [{"role": "user", "content": "and one more thing"}])
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0 and b"About that, too." in out
        assert provider.requests[-1].messages[-1] == {"role": "user", "content": "and one more thing"}
        latest = await runs.rt.store.latest_run(LOCAL, "k1")
        assert latest is not None and latest.id == run_id
        with pytest.raises(NoActiveRun, match="has no active run to append to"):  # it ended: nobody holds the chat
            await runs.append(LOCAL, "k1", [{"role": "user", "content": "late"}])
    finally:
        await ended(process)
        await runs.aclose()
