"""`yao-agent chat concierge` on the example app, offline: its Create and Next hooks at work, as a user sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import Terminal, cli

LONG = "Could you explain in detail how the light and heavy roles differ, and when this app uses each of them?"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the heavy role's first connector then fails over, offline
    return f"sqlite:///{tmp_path / 'agent.db'}"


def next_data(shown: str) -> dict[str, object]:
    [line] = [line for line in shown.splitlines() if line.startswith("next: ")]
    return json.loads(line.removeprefix("next: "))


def test_a_short_question_stays_on_the_light_role(db: str) -> None:
    code, shown = cli(REPO, "--db", db, "chat", "concierge", "What time is it?", "--chat", "short")
    assert code == 0, shown
    assert "You said: What time is it?" in shown  # demo.echo, the light role
    assert next_data(shown) == {"route": "light", "words": 6, "tools_used": 0}


def test_a_long_question_is_routed_to_the_heavy_role(db: str) -> None:
    assert len(LONG) > 80  # what the concierge's Create calls long
    code, shown = cli(REPO, "--db", db, "chat", "concierge", LONG, "--chat", "long")
    assert code == 0, shown
    assert "Here is a considered answer to: Could you explain" in shown  # demo.thinker, the heavy role
    assert "You said:" not in shown
    data = next_data(shown)
    assert data["route"] == "heavy" and data["tools_used"] == 0
    code, history = cli(REPO, "--db", db, "history", "long")
    assert code == 0 and history.splitlines()[0] == f"user: {LONG}"


TALKATIVE = """\
async function Create(ctx, messages, options) {
  await ctx.log("info", "saw " + messages.length + " message(s)");
  await ctx.log("debug", "the details");
  await ctx.log("warn", "careful");
  if (messages[messages.length - 1].content === "boom") {
    const nothing = null;
    return nothing.there;
  }
  return null;
}
"""
LOGGED = ["[info] hooks/talk.js (chat): saw 1 message(s)", "[debug] hooks/talk.js (chat): the details",
          "[warning] hooks/talk.js (chat): careful"]  # fmt: skip


@pytest.fixture
def talkative(tmp_path: Path) -> Path:
    files = {"assistants/chat/assistant.yml": "name: Chat\nhook: hooks/talk.js\n", "hooks/talk.js": TALKATIVE}
    return make_app(tmp_path / "app", files)


def test_a_hook_error_names_the_file_and_line_it_came_from(talkative: Path) -> None:
    thrown = "hooks/talk.js:7: TypeError: Cannot read properties of null (reading 'there')"
    code, shown = cli(talkative, "chat", "chat", "boom", "--chat", "b1")
    assert code == 1
    assert shown.splitlines()[-1].endswith(f" · hook_error: {thrown}")
    run_id = json.loads(cli(talkative, "runs", "b1", "--json")[1])["run_id"]
    code, shown = cli(talkative, "runs", "b1", run_id)  # the run's steps: the hook's says it too
    assert code == 0 and shown.splitlines()[1].endswith(f"  failed  {thrown}")


def test_verbose_shows_every_ctx_log_line_between_the_lines_of_the_chat(
    talkative: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, shown = cli(talkative, "chat", "chat", "hi")
    assert code == 0 and "hooks/talk.js" not in shown  # not a terminal: only warnings, on stderr, as before
    code, shown = cli(talkative, "chat", "chat", "hi", "--verbose")
    assert code == 0 and shown.splitlines()[1:5] == [*LOGGED, "You said: hi"]
    capsys.readouterr()
    code, shown = cli(talkative, "chat", "chat", "hi", "-v", "--json")
    types = [json.loads(line)["type"] for line in shown.splitlines()]  # stdout: events only
    assert types[0] == "stream_start" and types[-1] == "stream_end"
    assert capsys.readouterr().err.splitlines() == [f"hook {line}" for line in LOGGED]


def test_on_a_terminal_ctx_log_lines_show_dimmed_debug_aside(talkative: Path, tmp_path: Path) -> None:
    shell = Terminal(tmp_path, "--app", str(talkative), "chat", "chat", "hi")
    try:
        seen = shell.wait_for(b"completed")
    finally:
        shell.close()
    assert b"\x1b[2m[info] hooks/talk.js (chat): saw 1 message(s)" in seen
    assert seen.count(b"careful") == 1 and b"the details" not in seen  # the warning once, not again on stderr
