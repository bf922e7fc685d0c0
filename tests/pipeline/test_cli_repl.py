"""The REPL of `yao-agent chat`, driven through its stdin as a person types: its `/` commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files
from yao_agent.testing import FakeProvider, Reply


@pytest.fixture
def app(tmp_path: Path, threaded_provider: FakeProvider) -> Path:
    return make_app(tmp_path / "app", app_files(threaded_provider.base_url), base={})


def repl(app: Path, typed: str, *args: str) -> tuple[int, str, str]:
    """`yao-agent chat chat` without a message, given `typed` as its input; exit code, stdout, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "yao_agent.cli", "--app", str(app), "chat", "chat", *args],
        input=typed, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def sent(threaded_provider: FakeProvider) -> list[str]:
    """The last user message of each request the model received."""
    return [[m for m in r.messages if m["role"] == "user"][-1]["content"] for r in threaded_provider.requests]


def test_help_lists_the_commands_and_an_unknown_one_says_so_without_reaching_the_model(
    app: Path, threaded_provider: FakeProvider
) -> None:
    code, out, err = repl(app, "/help\n/nope\n/HELP me\n/quit\nnever sent\n")
    assert code == 0, err
    assert "/resume   continue this chat's failed, cancelled or interrupted run\n" in out
    assert "/quit     leave (Ctrl-D too; /exit as well)\n" in out
    assert "unknown command /nope (/help lists the commands; //text sends /text)" in out
    assert "/help takes no argument" in out
    assert threaded_provider.requests == []  # not one line went to the model, nor any after /quit


def test_new_starts_another_chat_and_a_double_slash_sends_a_slash(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="first"), Reply(text="second"))
    code, out, err = repl(app, "hello\n/new\n//etc is a path\n", "--chat", "n1")
    assert code == 0, err
    assert "a new chat: your next message starts it" in out
    assert sent(threaded_provider) == ["hello", "/etc is a path"]
    assert cli(app, "history", "n1")[1].splitlines() == ["user: hello", "assistant: first"]
    assert len(threaded_provider.requests[1].messages) == 2  # system prompt and the line: no earlier history


def test_resume_continues_the_chats_failed_run(app: Path, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(status=400, error_message="not now"), Reply(text="better now"))
    code, out, err = repl(app, "/resume\nhi\n/resume\n/resume\n", "--chat", "r1")
    assert code == 0, err
    said = out.split("you> ")
    assert said[1] == "error: no chat 'r1'\n"  # --chat names it from the start, but it has no run yet
    assert "not now" in said[2] and "better now" in said[3]
    assert said[4] == "error: chat 'r1' has no resume point (its last run completed, or is still running)\n"
    assert sent(threaded_provider) == ["hi", "hi"]
    assert cli(app, "history", "r1")[1].splitlines() == ["user: hi", "assistant: better now"]


def test_resume_before_any_message_of_a_new_chat_says_there_is_nothing(
    app: Path, threaded_provider: FakeProvider
) -> None:
    code, out, err = repl(app, "/resume\n")
    assert code == 0, err
    assert "nothing to resume: no chat yet" in out
    assert threaded_provider.requests == []
