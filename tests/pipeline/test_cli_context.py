"""`yao-agent history` shows a summary as a marker and still lists what it covers; `chat` says when
earlier turns were summarised."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from tests.support.apps import make_app
from tests.support.runtimes import app_files
from tests.support.stores import a_run, finished
from yao_agent.cli import main
from yao_agent.cli.chat import Renderer
from yao_agent.events import Compaction
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.store import SqlStore, open_engine, store_url

LOCAL = Identity("local")


async def _write_chat(app: Path) -> None:
    """Two turns, then a third whose run summarised the first two (4 messages) and answered."""
    store = SqlStore(await open_engine(store_url("sqlite:///.yao/agent.db", app)))
    try:
        for n in (1, 2, 3):
            run = a_run(n)
            run.user_id, run.team_id = LOCAL.user_id, None
            await store.start_run(LOCAL, run, [ChatMessage(f"u{n}", "user", f"question {n}", run_id=run.id)])
            produced = [ChatMessage(f"a{n}", "assistant", f"answer {n}", run_id=run.id)]
            if n == 3:
                produced.insert(0, ChatMessage("s1", "summary", "The user asked two questions.", run_id=run.id,
                                               summarises=("u1", "a2")))  # fmt: skip
            await store.finish_run(LOCAL, finished(run), produced, [])
    finally:
        await store.aclose()


def cli(app: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--app", str(app), *args], out=out)
    return code, out.getvalue()


def test_history_marks_a_summary_and_lists_every_message(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", app_files("http://127.0.0.1:9/v1"), base={})
    asyncio.run(_write_chat(app))
    code, shown = cli(app, "history", "c1")
    assert (code, shown.splitlines()) == (0, [
        "user: question 1", "assistant: answer 1", "user: question 2", "assistant: answer 2", "user: question 3",
        "── summary of 4 earlier messages ──", "The user asked two questions.", "assistant: answer 3",
    ])  # fmt: skip
    code, shown = cli(app, "history", "c1", "--json")
    summary = [json.loads(line) for line in shown.splitlines()][5]
    assert (summary["role"], summary["summarises"]) == ("summary", ["u1", "a2"])


def test_chat_says_when_earlier_turns_were_summarised() -> None:
    out = io.StringIO()
    Renderer(out, as_json=False).show(Compaction("r1", "s1", 12, 1710, 783, "openai.mini"))
    assert out.getvalue() == (
        "⇣ 12 earlier messages summarised to fit the model's window (1710 → 783 tokens, by openai.mini)\n"
    )
    out = io.StringIO()
    Renderer(out, as_json=True).show(Compaction("r1", "s1", 1, 1710, 783, "openai.mini"))
    assert json.loads(out.getvalue()) == {"type": "compaction", "run_id": "r1", "summary_message_id": "s1",
                                          "messages_summarised": 1, "tokens_before": 1710, "tokens_after": 783,
                                          "connector": "openai.mini"}  # fmt: skip
