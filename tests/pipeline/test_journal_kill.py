"""The step journal against a real kill: `yao-agent chat` is SIGKILLed in the middle of a round of tool
calls, after some results were committed; the next process resumes the run after its last committed step."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.apps import make_app
from tests.support.runtimes import app_files
from tests.support.tools import ASSISTANT, call
from tests.support.waits import free_port, reached, wait_until
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.step_inputs import ToolRound
from yao_agent.testing import FakeProvider, RecordedRequest, Reply, ToolCall

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

REPO = Path(__file__).resolve().parents[2]
LOCAL = Identity("local")


def tally_call(tally: Path, label: str, call_id: str, hold: Path | None = None) -> ToolCall:
    given = {"path": str(tally), "label": label} | ({"hold": str(hold)} if hold else {})
    return call("testing__tally", given, call_id)


def files_for(base_url: str) -> dict[str, str]:
    files = app_files(base_url)
    files["mcps/testing.yml"] = f"command: python\nargs: [-m, tests.support.mcp_server]\ncwd: {REPO}\n"
    files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=5)
    return files


async def tool_results(url: str, tmp_path: Path, count: int) -> None:
    """Read the store (as another process would) until the chat holds `count` tool results."""
    store = SqlStore(await open_engine(store_url(url, tmp_path)))

    async def committed() -> bool:
        return sum(1 for m in await store.history(LOCAL, "k1") if m.role == "tool") >= count

    try:
        await wait_until(committed, within=60)
    finally:
        await store.aclose()


def each_call_answered_once(messages: list[ChatMessage]) -> bool:
    calls = [c.id for m in messages for c in m.tool_calls]
    answers = Counter(m.tool_call_id for m in messages if m.role == "tool")
    return len(calls) == len(set(calls)) and all(answers[c] == 1 for c in calls) and sum(answers.values()) == len(calls)


@pytest.mark.slow
async def test_sigkill_mid_round_then_resume_runs_each_tool_once(tmp_path: Path, store_raw_url: str) -> None:
    tally, hold = tmp_path / "tally", tmp_path / "hold"
    async with FakeProvider() as provider:
        app = make_app(tmp_path / "app", files_for(provider.base_url), base={})
        provider.enqueue(
            Reply(tool_calls=(tally_call(tally, "a", "c1"),)),
            Reply(tool_calls=(tally_call(tally, "b", "c2"), tally_call(tally, "c", "c3", hold))),
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with (tmp_path / "chat.err").open("w") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", store_raw_url,
                "chat", "tooled", "count them", "--chat", "k1",
                stdout=asyncio.subprocess.DEVNULL, stderr=err, env=env,
            )  # fmt: skip
        try:
            # c3 runs (and waits): the round is not over; then c1's and c2's results are committed
            await wait_until(lambda: reached(hold, "started") or process.returncode is not None, within=60)
            assert process.returncode is None, (tmp_path / "chat.err").read_text()
            await tool_results(store_raw_url, tmp_path, 2)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()

        runs = await Runs.open(app, db=store_raw_url, recover=False)
        rt = runs.rt
        try:
            run = await rt.store.latest_run(LOCAL, "k1")
            assert run is not None and run.status == "running"  # nobody has looked yet
            assert await runs.process.recover() == [run.id]
            point = await rt.store.resume_point(LOCAL, "k1")
            assert point is not None and point.run.status == "interrupted"
            assert [(s.type, s.status) for s in point.steps] == [("tool", "interrupted")]
            given = point.steps[0].input
            assert isinstance(given, ToolRound) and given.ids == ["c3"]  # only the call without a result
            assert each_call_answered_once(await rt.store.history(LOCAL, "k1"))  # c3's stand-in keeps it valid

            hold.write_text("go")
            provider.enqueue(Reply(text="All counted."))
            events = [e async for e in (await runs.resume(LOCAL, "k1")).events()]
            assert events[-1].type == "stream_end" and events[-1].status == "completed"

            assert sorted(tally.read_text().split()) == ["a", "b", "c"]  # every tool ran exactly once
            assert len(provider.requests) == 3  # each completed reply was asked for once
            assert provider.requests[0].messages[-1] == {"role": "user", "content": "count them"}
            assert provider.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "counted a"}
            results = [(m["tool_call_id"], m["content"]) for m in provider.requests[2].messages if m["role"] == "tool"]
            assert results == [("c1", "counted a"), ("c2", "counted b"), ("c3", "counted c")]
            history = await rt.store.history(LOCAL, "k1")
            assert each_call_answered_once(history)
            assert [(m.role, m.content) for m in history] == [
                ("user", "count them"), ("assistant", None), ("tool", "counted a"), ("assistant", None),
                ("tool", "counted b"), ("tool", "counted c"), ("assistant", "All counted.")]  # fmt: skip
            chat = await rt.store.get_chat(LOCAL, "k1")
            assert chat is not None and chat.last_status == "completed" and chat.message_count == len(history)
            assert await rt.store.resume_point(LOCAL, "k1") is None
        finally:
            await runs.aclose()


def by_state(record: RecordedRequest) -> Reply:
    """The model as a function of what it was sent (a resumed run is answered as the first try would have
    been): the count of tool results so far decides. Replies stream slowly, so a kill often lands mid-reply."""
    results = sum(1 for m in record.messages if m.get("role") == "tool")
    ledger = next(str(m["content"]) for m in record.messages if m.get("role") == "user").split("|")[1]
    if results == 0:
        calls = (tally_call(Path(ledger), "a", "c1"),)
    elif results == 1:
        calls = (tally_call(Path(ledger), "b", "c2"), tally_call(Path(ledger), "c", "c3"))
    else:
        return Reply(text="All three are counted, one by one, as asked.", chunk_size=2, delay_s=0.01)
    return Reply(tool_calls=calls, chunk_size=2, delay_s=0.01)


async def serve(app: Path, db: str, port: int, err: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with err.open("a") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", db, "serve", "--port", str(port),
            stdout=asyncio.subprocess.PIPE, stderr=sink, env=env,
        )  # fmt: skip


async def token_for(app: Path, db: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    made = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", db, "tokens", "create", "--user", "local",
        stdout=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    return (await made.communicate())[0].decode().strip()


# Each round of `./dev repeat` kills at other points (its round number picks the seeds).
ROUND = int(os.environ.get("YAO_AGENT_REPEAT_ROUND") or 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3 * ROUND + 1, 3 * ROUND + 2, 3 * ROUND + 3])
async def test_sigkill_of_serve_at_a_random_point_then_resume_runs_each_tool_once(
    tmp_path: Path, store_raw_url: str, seed: int
) -> None:
    tally = tmp_path / "tally"
    after_s = random.Random(seed).uniform(0.0, 1.4)  # where in the run the kill lands: anywhere, by seed
    async with FakeProvider(default=by_state) as provider:
        app = make_app(tmp_path / "app", files_for(provider.base_url), base={})
        token, port = await token_for(app, store_raw_url), free_port()
        server = await serve(app, store_raw_url, port, tmp_path / "serve.err")
        try:
            assert server.stdout is not None
            await asyncio.wait_for(server.stdout.readline(), 60)  # it listens
            body = {"messages": [{"role": "user", "content": f"count|{tally}"}]}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                headers = {"Authorization": f"Bearer {token}"}
                async with client.stream("POST", "/api/assistants/tooled/runs", json=body, headers=headers):
                    await wait_until(lambda: len(provider.requests) > 0, within=60)  # past its start-up
                    await asyncio.sleep(after_s)
                    server.send_signal(signal.SIGKILL)
        except httpx.HTTPError:
            pass  # the server died under the request: what a client sees of a kill
        finally:
            if server.returncode is None:
                server.kill()
            await server.wait()
        committed = await committed_results(store_raw_url, tmp_path)  # what the store had when it died
        await recovered_and_resumed(app, store_raw_url, provider, tally, committed)


async def committed_results(url: str, tmp_path: Path) -> set[str]:
    """The labels whose tool results the store holds (read before anything resumes)."""
    store = SqlStore(await open_engine(store_url(url, tmp_path)))
    try:
        chats = await store.list_chats(LOCAL)
        said = [m.content for c in chats for m in await store.history(LOCAL, c.id) if m.role == "tool"]
    finally:
        await store.aclose()
    return {str(text).removeprefix("counted ") for text in said if str(text).startswith("counted ")}


def labels(tally: Path) -> list[str]:
    """The tally's lines (one per execution of a tool), sorted."""
    return sorted(tally.read_text().split()) if tally.exists() else []


async def recovered_and_resumed(app: Path, db: str, provider: FakeProvider, tally: Path, committed: set[str]) -> None:
    """After the restart: whatever the kill left is completed by a resume. A call whose result was committed
    never runs again; a call in flight at the kill may have finished in its server after the process died
    without its result being stored (its server outlives it for a moment), and then runs again: that is
    the step in flight, the one a kill may lose."""
    runs = await Runs.open(app, db=db)  # a new process: it marks the dead one's run interrupted
    try:
        chats = await runs.chats(LOCAL)
        if not chats:  # killed before the run was written ahead: nothing to resume, nothing ran
            assert labels(tally) == [] and len(provider.requests) == 0
            return
        chat_id = chats[0].id
        run = await runs.rt.store.latest_run(LOCAL, chat_id)
        assert run is not None and run.status in ("interrupted", "completed")
        if run.status == "interrupted":
            events = [e async for e in (await runs.resume(LOCAL, chat_id)).events()]
            assert events[-1].type == "stream_end" and events[-1].status == "completed"
        ran = Counter(labels(tally))
        assert set(ran) == {"a", "b", "c"}  # every call ran
        assert all(ran[label] == 1 for label in committed)  # and none with a committed result ran again
        assert sum(ran.values()) - 3 <= 2  # at most the calls of the round in flight ran twice
        history = await runs.rt.store.history(LOCAL, chat_id)
        assert each_call_answered_once(history)
        assert [m.content for m in history if m.role == "assistant" and m.content] == [
            "All three are counted, one by one, as asked."
        ]
        # A completed reply is never asked for again: only the one in flight at the kill may be asked twice.
        asked = Counter(sum(1 for m in r.messages if m.get("role") == "tool") for r in provider.requests)
        assert sum(asked.values()) <= 4 and all(count <= 2 for count in asked.values())
        assert await runs.rt.store.resume_point(LOCAL, chat_id) is None
    finally:
        await runs.aclose()


def endless(record: RecordedRequest) -> Reply:
    """A model that calls the tool once more after every result, each time with a new label: only
    `limits.max_turns` stops it."""
    results = sum(1 for m in record.messages if m.get("role") == "tool")
    ledger = next(str(m["content"]) for m in record.messages if m.get("role") == "user").split("|")[1]
    return Reply(tool_calls=(tally_call(Path(ledger), f"x{results}", f"c{results}"),), chunk_size=4, delay_s=0.01)


@pytest.mark.slow
async def test_sigkill_mid_tool_loop_then_resume_keeps_the_turn_budget(tmp_path: Path, store_raw_url: str) -> None:
    """max_turns 5: whole, the run makes 5 model calls and 5 executions, then ends `max_turns`. Killed
    after its third execution and resumed, it makes no more than that (and the one step in flight)."""
    tally = tmp_path / "tally"
    async with FakeProvider(default=endless) as provider:
        files = files_for(provider.base_url)
        files["app.yml"] = files["app.yml"].replace("max_turns: 10", "max_turns: 5")
        files["assistants/tooled/assistant.yml"] = ASSISTANT.format(max_turns=20)
        app = make_app(tmp_path / "app", files, base={})
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yao_agent.cli", "--app", str(app), "--db", store_raw_url,
            "chat", "tooled", f"count|{tally}", "--chat", "k1",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            await wait_until(lambda: len(labels(tally)) >= 3 or process.returncode is not None, within=60)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        assert len(labels(tally)) < 5  # killed mid-loop, not after the run ended
        runs = await Runs.open(app, db=store_raw_url)  # the next process marks the run interrupted
        try:
            events = [e async for e in (await runs.resume(LOCAL, "k1")).events()]
            end = events[-1]
            assert end.type == "stream_end" and (end.status, end.reason) == ("failed", "max_turns")
        finally:
            await runs.aclose()
        assert 5 <= len(labels(tally)) <= 6  # a fresh budget would have made it 8
        assert 5 <= len(provider.requests) <= 6
