"""`yao-agent chat`, `history` and `resume` as a user types them."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import Terminal, cli
from tests.support.runtimes import app_files
from yao_agent.cli.chat import Renderer, terminal_logging
from yao_agent.events import StreamEnd
from yao_agent.shapes import UsageOut
from yao_agent.testing import FakeProvider, Reply


@pytest.fixture
def app(tmp_path: Path, threaded_provider: FakeProvider) -> Path:
    return make_app(tmp_path / "app", app_files(threaded_provider.base_url), base={})


def test_chat_streams_the_reply_and_history_shows_it(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="Hello from the model"))
    code, shown = cli(app, "chat", "chat", "hi there", "--chat", "c1")
    lines = shown.splitlines()
    assert code == 0
    assert lines[0] == "chat c1 · chat"
    assert lines[1] == "Hello from the model"
    assert lines[2].startswith("── completed · 18 tokens · ")
    code, shown = cli(app, "history", "c1")
    assert (code, shown.splitlines()) == (0, ["user: hi there", "assistant: Hello from the model"])


def test_json_prints_the_events_and_history_the_stored_messages(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="json please"))
    code, shown = cli(app, "chat", "chat", "hi", "--chat", "c2", "--json")
    events = [json.loads(line) for line in shown.splitlines()]
    assert code == 0
    assert [events[0]["type"], events[-1]["type"]] == ["stream_start", "stream_end"]
    assert {e["run_id"] for e in events} == {events[0]["run_id"]}
    code, shown = cli(app, "history", "c2", "--json")
    messages = [json.loads(line) for line in shown.splitlines()]
    assert [(m["role"], m["content"], m["status"]) for m in messages] == [
        ("user", "hi", "completed"),
        ("assistant", "json please", "completed"),
    ]
    assert set(messages[0]) == {"message_id", "run_id", "role", "content", "status", "created_at"}


def test_identity_options_scope_the_chat(
    app: Path, threaded_provider: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    threaded_provider.enqueue(Reply(text="team answer"))
    assert cli(app, "chat", "chat", "hi", "--chat", "t1", "--user", "bob", "--team", "acme")[0] == 0
    assert cli(app, "history", "t1", "--user", "bob", "--team", "acme")[0] == 0
    assert cli(app, "history", "t1")[0] == 2  # as `local`, the chat does not exist
    assert capsys.readouterr().err.endswith("error: no chat 't1'\n")


def test_a_failed_run_exits_1_and_resume_completes_it(
    app: Path, threaded_provider: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    threaded_provider.enqueue(*[Reply(status=500, error_message="overloaded")] * 3, Reply(text="better now"))
    code, shown = cli(app, "chat", "chat", "hi", "--chat", "c3")
    assert code == 1
    assert len(threaded_provider.requests) == 3  # our retry policy: three attempts with back-off
    assert "failed" in shown and "model_error" in shown and "overloaded" in shown
    code, shown = cli(app, "resume", "c3")
    assert code == 0 and "better now" in shown
    assert cli(app, "history", "c3")[1].splitlines() == ["user: hi", "assistant: better now"]
    assert cli(app, "resume", "c3")[0] == 2
    assert "has no resume point" in capsys.readouterr().err


def test_unknown_assistant_is_a_usage_error(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(app, "chat", "nobody", "hi")[0] == 2
    assert "unknown assistant 'nobody' (known: chat)" in capsys.readouterr().err


def _spawn(app: Path, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "yao_agent.cli", "--app", str(app), *args],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_repl_continues_one_chat(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="first answer"), Reply(text="second answer"))
    process = _spawn(app, "chat", "chat", "--chat", "r1", stdin=subprocess.PIPE)
    out, err = process.communicate("hello\nand again\n", timeout=60)
    assert process.returncode == 0, err
    assert "first answer" in out and "second answer" in out
    shown = cli(app, "history", "r1")[1]
    assert shown.splitlines() == [
        "user: hello",
        "assistant: first answer",
        "user: and again",
        "assistant: second answer",
    ]


def test_ctrl_c_cancels_the_run_cleanly_and_it_can_be_resumed(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="z" * 400, chunk_size=1, delay_s=0.02), Reply(text="resumed answer"))
    process = _spawn(app, "chat", "chat", "long please", "--chat", "k2")
    assert process.stdout is not None
    seen = ""
    while "zzzz" not in seen and (piece := process.stdout.read(8)):  # blocks until output (or its end) comes
        seen += piece
    assert "zzzz" in seen, seen  # the reply is streaming: the interrupt comes mid-run
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1, err
    assert "Traceback" not in err
    last = out.splitlines()[-1]
    assert re.fullmatch(r"── cancelled · \d+ tokens · [\d.]+ s \(run [\d.]+ s\)", last)  # no empty reason after it
    history = cli(app, "history", "k2")[1].splitlines()
    assert history[0] == "user: long please" and history[1].startswith("assistant (incomplete): zzzz")
    code, shown = cli(app, "resume", "k2")
    assert code == 0 and "…resumed answer" in shown  # it goes on from the cut reply (pipeline/cut.py)
    cut = history[1].removeprefix("assistant (incomplete): ")
    assert cli(app, "history", "k2")[1].splitlines()[2] == f"assistant: {cut}resumed answer"


def test_the_example_weather_assistant_shows_its_tool_call_and_result(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'agent.db'}"
    code, shown = cli(REPO, "--db", db, "chat", "weather", "What's the weather in Lima?")
    lines = shown.splitlines()
    assert code == 0
    assert lines[1:4] == [
        '⚙ weather__forecast({"city": "Lima"})',
        "↳ Lima day 1: overcast, 25°C",
        "Here is what the weather service says: Lima day 1: overcast, 25°C",
    ]
    assert lines[4].startswith("── completed · ")


def test_warnings_reach_the_terminal_as_one_line_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("YAO_AGENT_DEBUG", raising=False)
    root, err = logging.Logger("terminal"), io.StringIO()  # a logger without handlers, as the CLI has
    with terminal_logging(root, err):
        try:
            raise ValueError("kaboom")
        except ValueError:
            root.exception("run r1 could not be stored")
        root.info("progress is not shown")
    assert err.getvalue() == "error: run r1 could not be stored (ValueError: kaboom)\n"
    monkeypatch.setenv("YAO_AGENT_DEBUG", "1")
    with terminal_logging(root, err):
        assert root.handlers == []  # a developer who asks gets Python's own output, tracebacks included


def used(tokens: int, cost_usd: float | None = None) -> UsageOut:
    return {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens, "cost_usd": cost_usd, "calls": 1}


def test_the_closing_line_says_how_long_the_user_waited_and_how_long_the_run_took() -> None:
    out, now = io.StringIO(), [100.0]
    renderer = Renderer(out, as_json=False, started=88.0, clock=lambda: now[0])
    renderer.show(StreamEnd("run_1", "completed", "completed", used(60), duration_ms=1000))
    assert out.getvalue() == "── completed · 60 tokens · 12.0 s (run 1.0 s)\n"
    priced = io.StringIO()
    Renderer(priced, as_json=False, started=88.0, clock=lambda: now[0]).show(
        StreamEnd("run_1", "completed", "completed", used(60, 0.00042), duration_ms=1000)
    )
    assert priced.getvalue() == "── completed · 60 tokens · $0.0004 · 12.0 s (run 1.0 s)\n"  # what the run cost
    as_json = io.StringIO()
    Renderer(as_json, as_json=True, started=88.0, clock=lambda: now[0]).show(
        StreamEnd("run_1", "completed", "completed", used(60), duration_ms=1000)
    )
    assert json.loads(as_json.getvalue())["duration_ms"] == 1000  # --json keeps the run's own figure


def test_a_chat_reports_the_time_since_the_command_started(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="Hello"))
    code, shown = cli(app, "chat", "chat", "hi")
    found = re.fullmatch(r"── completed · \d+ tokens · ([\d.]+) s \(run ([\d.]+) s\)", shown.splitlines()[-1])
    assert code == 0 and found is not None
    assert float(found[1]) >= float(found[2])


# A cold process: what it imported is only what its connectors need.
COLD = (
    "import sys; from yao_agent.cli import main; rc = main(sys.argv[1:]);"
    "print('SDKS', sorted(m for m in ('litellm', 'openai') if m in sys.modules)); sys.exit(rc)"
)


LONG = "Could you explain in detail how the tides work and why most coasts get two of them a day?"


@pytest.mark.parametrize(
    "command",
    [["chat", "chat", "Hello"], ["validate"], ["chat", "concierge", LONG]],
    ids=["chat", "validate", "fallback-from-a-connector-without-its-key"],
)
def test_a_scripted_chat_and_validate_import_no_model_sdk(tmp_path: Path, command: list[str]) -> None:
    db = f"sqlite:///{tmp_path / 'agent.db'}"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", COLD, "--app", str(REPO), "--db", db, *command],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "SDKS []"


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    db = f"sqlite:///{tmp_path / 'agent.db'}"
    shell = Terminal(tmp_path, "--app", str(REPO), "--db", db, "chat", "chat", "--chat", "t1")
    try:
        yield shell
    finally:
        shell.close()


def test_the_repl_edits_lines_and_recalls_them_with_the_up_arrow(terminal: Terminal, tmp_path: Path) -> None:
    terminal.wait_for(b"you> ")
    terminal.type(b"first wordz\x7fs\r")  # Backspace fixes a typo
    assert b"You said: first words" in terminal.wait_for(b"you> ")
    terminal.type(b"\x1b[A\r")  # Up, then Enter: the same line again
    assert b"You said: first words" in terminal.wait_for(b"you> ")
    terminal.type(b"\x04")  # Ctrl-D leaves
    assert terminal.process.wait(30) == 0
    db = f"sqlite:///{tmp_path / 'agent.db'}"
    assert cli(REPO, "--db", db, "history", "t1")[1].splitlines()[::2] == ["user: first words"] * 2
    assert (tmp_path / ".yao-agent_history").read_text().splitlines()[-1] == "first words"


def test_ctrl_c_at_the_prompt_leaves_at_once_and_gives_the_terminal_back(terminal: Terminal) -> None:
    terminal.wait_for(b"you> ")
    terminal.process.send_signal(signal.SIGINT)  # what the terminal sends for Ctrl-C
    assert terminal.process.wait(10) == 130  # not waiting for a line nobody will type
    assert termios.tcgetattr(terminal.master) == terminal.mode  # echo and line mode as they were


def test_what_the_model_wrote_reaches_the_terminal_as_written_and_never_acts_on_it(
    app: Path, threaded_provider: FakeProvider
) -> None:
    """An escape sequence in a reply (clear the screen, set the clipboard or the title) is shown, not
    obeyed; an emoji code is text; lines stay."""
    threaded_provider.enqueue(Reply(text="one\x1b[2J\x1b]52;c;cHduZWQ=\x07 :smile:\ntwo"))
    code, shown = cli(app, "chat", "chat", "hi", "--chat", "e1")
    assert code == 0
    assert shown.splitlines()[1:3] == ["one\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07 :smile:", "two"]
    code, shown = cli(app, "history", "e1")
    assert shown.splitlines()[1:] == ["assistant: one\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07 :smile:", "two"]
