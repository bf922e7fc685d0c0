"""The step journal against a real kill: `yao-agent chat` is SIGKILLed in the middle of a round of tool
calls, after some results were committed; the next process resumes the run after its last committed step."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from tests.apps import make_app
from tests.pipeline.conftest import app_files
from tests.pipeline.test_tools import ASSISTANT, call
from tests.tools.helpers import reached, wait_until
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply, ToolCall

REPO = Path(__file__).resolve().parents[2]
LOCAL = Identity("local")


def tally_call(tally: Path, label: str, call_id: str, hold: Path | None = None) -> ToolCall:
    given = {"path": str(tally), "label": label} | ({"hold": str(hold)} if hold else {})
    return call("testing__tally", given, call_id)


def files_for(base_url: str) -> dict[str, str]:
    files = app_files(base_url)
    files["mcps/testing.yml"] = f"command: python\nargs: [-m, tests.tools.servers]\ncwd: {REPO}\n"
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


async def test_sigkill_mid_round_then_resume_runs_each_tool_once(tmp_path: Path, store_raw_url: str) -> None:
    tally, hold = tmp_path / "tally", tmp_path / "hold"
    async with FakeProvider() as fake:
        app = make_app(tmp_path / "app", files_for(fake.base_url), base={})
        fake.enqueue(
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
            assert await runs.recover() == [run.id]
            point = await rt.store.resume_point(LOCAL, "k1")
            assert point is not None and point.run.status == "interrupted"
            assert [(s.type, s.status) for s in point.steps] == [("tool", "interrupted")]
            assert [c["id"] for c in point.steps[0].input["calls"]] == ["c3"]  # only the call without a result
            assert each_call_answered_once(await rt.store.history(LOCAL, "k1"))  # c3's stand-in keeps it valid

            hold.write_text("go")
            fake.enqueue(Reply(text="All counted."))
            events = [e async for e in (await runs.resume(LOCAL, "k1")).events()]
            assert events[-1].type == "stream_end" and events[-1].status == "completed"

            assert sorted(tally.read_text().split()) == ["a", "b", "c"]  # every tool ran exactly once
            assert len(fake.requests) == 3  # each completed reply was asked for once
            assert fake.requests[0].messages[-1] == {"role": "user", "content": "count them"}
            assert fake.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "counted a"}
            assert [(m["tool_call_id"], m["content"]) for m in fake.requests[2].messages if m["role"] == "tool"] == [
                ("c1", "counted a"), ("c2", "counted b"), ("c3", "counted c")]  # fmt: skip
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
