"""`yao-agent approvals`, `approve` and the `chat` REPL's questions (CONTRACT §4.8, §7), as a person types them.

The assistant's `testing` MCP server is the real one, started over stdio by each command; its `tally`
tool needs approval and appends a line to a file per execution, so the file says what really ran.
The model is the loopback fake provider; the store is SQLite, and PostgreSQL when available.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import Cli, Terminal
from yao_agent.testing import FakeProvider, Reply, ToolCall


def tally(ledger: Path, label: str, call_id: str) -> ToolCall:
    return ToolCall("testing__tally", {"path": str(ledger), "label": label}, id=call_id)


def counted(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def waiting_chat(cli: Cli, threaded_provider: FakeProvider, ledger: Path, chat_id: str = "c1", *more: str) -> str:
    """A turn whose reply asks for two tallies: the run waits for a person. Returns what it printed."""
    threaded_provider.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"), tally(ledger, "twice", "t2"))))
    code, shown = cli("chat", "tooled", "pay", "--chat", chat_id, *more)
    assert code == 0, shown  # waiting is no failure
    assert counted(ledger) == []
    return shown


def test_a_one_shot_chat_that_waits_says_which_calls_and_how_to_decide(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path
) -> None:
    lines = waiting_chat(cli, threaded_provider, ledger).splitlines()
    assert lines[3:5] == [f"⏸ testing__tally waits for approval (call {n})" for n in ("t1", "t2")]
    assert lines[5].startswith("── waiting · ") and lines[5].endswith(" · 2 calls waiting for approval")
    assert lines[6:] == ["decide with: yao-agent approve c1 [--deny ID[:REASON]]..."]


def test_approvals_lists_the_pending_calls_as_a_table_and_as_json(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting_chat(cli, threaded_provider, ledger)
    code, shown = cli("approvals", "c1")
    assert (code, shown.splitlines()) == (0, [
        "tool call id  tool            arguments",
        f't1            testing__tally  {{"path":"{ledger}","label":"paid"}}',
        f't2            testing__tally  {{"path":"{ledger}","label":"twice"}}',
        "decide with: yao-agent approve c1 [--deny ID[:REASON]]...",
    ])  # fmt: skip
    code, shown = cli("approvals", "c1", "--json")
    found = json.loads(shown)
    assert code == 0 and set(found) == {"chat_id", "run_id", "approvals"} and found["chat_id"] == "c1"
    assert found["approvals"] == [
        {"tool_call_id": n, "server": "testing", "tool": "tally", "arguments": {"path": str(ledger), "label": label}}
        for n, label in (("t1", "paid"), ("t2", "twice"))
    ]
    capsys.readouterr()
    assert cli("approvals", "c1", "--user", "bob") == (2, "")  # another person's chat does not exist for them
    assert capsys.readouterr().err == "error: no chat 'c1'\n"
    assert cli("approvals", "nowhere") == (2, "")
    assert capsys.readouterr().err == "error: no chat 'nowhere'\n"


def test_approve_runs_the_approved_call_once_and_never_the_denied_one(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting_chat(cli, threaded_provider, ledger)
    threaded_provider.enqueue(Reply(text="Paid once; the second one was refused."))
    code, shown = cli("approve", "c1", "--deny", "t2:too costly: we paid already")
    lines = shown.splitlines()
    assert code == 0, shown
    assert lines[:3] == [
        "✓ approved testing__tally (call t1)",
        "✗ denied testing__tally (call t2): too costly: we paid already",
        "chat c1 · tooled",
    ]
    assert sorted(lines[3:5]) == ["↳ counted paid", "↳ denied: too costly: we paid already"]
    assert lines[5] == "Paid once; the second one was refused."
    assert lines[6].startswith("── completed · ")
    assert counted(ledger) == ["paid"]  # once for the approved call, never for the denied one
    sent = {m["tool_call_id"]: m["content"] for m in threaded_provider.requests[-1].messages if m["role"] == "tool"}
    assert sent == {"t1": "counted paid", "t2": "denied: too costly: we paid already"}  # what the model read
    code, shown = cli("history", "c1")
    assert code == 0
    assert shown.splitlines()[3:] == [
        "tool: counted paid · approved by local",
        "tool: denied: too costly: we paid already · denied by local: too costly: we paid already",
        "assistant: Paid once; the second one was refused.",
    ]
    capsys.readouterr()
    assert cli("approvals", "c1") == (2, "")
    assert capsys.readouterr().err == "error: chat 'c1' has no pending approvals\n"
    assert cli("approve", "c1") == (2, "")  # decided already: nothing left to approve
    assert capsys.readouterr().err == "error: chat 'c1' has no pending approvals\n"
    assert counted(ledger) == ["paid"]


def test_an_unknown_deny_id_is_refused_and_nothing_is_decided(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting_chat(cli, threaded_provider, ledger)
    capsys.readouterr()
    assert cli("approve", "c1", "--deny", "t3:typo") == (2, "")
    assert capsys.readouterr().err == "error: --deny: no pending call 't3' (pending: t1, t2); nothing was decided\n"
    assert cli("approve", "c1", "--deny", "t1", "--deny", "t1:again") == (2, "")
    assert capsys.readouterr().err == "error: --deny: call 't1' is denied twice\n"
    assert cli("resume", "c1") == (2, "")  # a resume is no way around a person's decision
    assert "waits for a person to approve testing__tally" in capsys.readouterr().err
    assert counted(ledger) == [] and len(threaded_provider.requests) == 1  # no tool ran, the model was not asked again
    code, shown = cli("approvals", "c1", "--json")
    assert code == 0 and [a["tool_call_id"] for a in json.loads(shown)["approvals"]] == ["t1", "t2"]


def test_approve_json_prints_the_continuations_events_only(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path
) -> None:
    waiting_chat(cli, threaded_provider, ledger)
    threaded_provider.enqueue(Reply(text="Both paid."))
    code, shown = cli("approve", "c1", "--json")
    events = [json.loads(line) for line in shown.splitlines()]  # every line is an event
    assert code == 0
    assert [events[0]["type"], events[-1]["type"]] == ["stream_start", "stream_end"]
    assert (events[-1]["status"], events[-1]["reason"]) == ("completed", "completed")
    results = {e["tool_call_id"]: e["result"] for e in events if e["type"] == "tool_result"}
    assert results == {"t1": "counted paid", "t2": "counted twice"}
    assert sorted(counted(ledger)) == ["paid", "twice"]


def test_the_hinted_command_decides_as_the_same_person(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shown = waiting_chat(cli, threaded_provider, ledger, "b1", "--user", "bob", "--team", "acme", "--json")
    events = [json.loads(line) for line in shown.splitlines()]  # stdout stays events: the hint is on stderr
    assert [e["tool_call_id"] for e in events if e["type"] == "approval_request"] == ["t1", "t2"]
    assert (events[-1]["status"], events[-1]["reason"]) == ("waiting", "approval_required")
    hint = capsys.readouterr().err.strip()
    assert hint == "decide with: yao-agent approve b1 --user bob --team acme [--deny ID[:REASON]]..."
    command = shlex.split(hint.removeprefix("decide with: ").removesuffix(" [--deny ID[:REASON]]..."))
    threaded_provider.enqueue(Reply(text="Done."))
    code, shown = cli(*command[1:], "--deny", "t1")
    assert code == 0 and "Done." in shown
    assert counted(ledger) == ["twice"]
    history = cli("history", "b1", "--user", "bob", "--team", "acme")[1]
    assert "tool: denied: not approved · denied by bob" in history.splitlines()


@pytest.mark.slow
def test_a_repl_without_a_terminal_does_not_ask_and_says_how_to_decide(
    cli: Cli, threaded_provider: FakeProvider, ledger: Path
) -> None:
    threaded_provider.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"),)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "yao_agent.cli", *cli.words(), "chat", "tooled", "--chat", "p1"],
                          input="pay\n", capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "[y/N]" not in out
    assert out.splitlines()[-2:] == [  # then the next prompt, which meets the end of the input
        "decide with: yao-agent approve p1 [--deny ID[:REASON]]... (or type a new message: it denies them)",
        "you> ",
    ]
    assert counted(ledger) == []
    assert cli("approvals", "p1")[0] == 0  # still waiting for a person


@pytest.fixture
def repl(tmp_path: Path, cli: Cli) -> Iterator[Terminal]:
    shell = Terminal(tmp_path, *cli.words(), "chat", "tooled", "--chat", "r1")
    try:
        yield shell
    finally:
        shell.close()


def asked(ledger: Path, label: str) -> bytes:
    return f'Run testing__tally({{"path": "{ledger}", "label": "{label}"}})? [y/N] '.encode()


def test_the_repl_asks_for_each_call_then_continues_the_run(
    repl: Terminal, cli: Cli, threaded_provider: FakeProvider, ledger: Path, tmp_path: Path
) -> None:
    threaded_provider.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"), tally(ledger, "twice", "t2"))),
                 Reply(text="One paid, one refused."))  # fmt: skip
    repl.wait_for(b"you> ")
    repl.type(b"pay twice\r")
    repl.wait_for(asked(ledger, "paid"))
    repl.type(b"y\r")
    repl.wait_for(asked(ledger, "twice"))
    repl.type(b"n\r")
    repl.wait_for(b"Why not? (optional, Enter to skip) ")
    repl.type(b"not twice\r")
    continued = repl.wait_for(b"you> ")
    assert b"counted paid" in continued and b"One paid, one refused." in continued
    repl.type(b"\x04")  # Ctrl-D leaves
    assert repl.process.wait(30) == 0
    assert counted(ledger) == ["paid"]
    history = cli("history", "r1")[1].splitlines()
    assert "tool: counted paid · approved by local" in history
    assert "tool: denied: not twice · denied by local: not twice" in history
    assert (tmp_path / ".yao-agent_history").read_text().splitlines() == ["pay twice"]  # not the answers


@pytest.mark.slow
def test_the_repl_asks_again_when_the_continuation_waits_again(
    repl: Terminal, cli: Cli, threaded_provider: FakeProvider, ledger: Path
) -> None:
    threaded_provider.enqueue(Reply(tool_calls=(tally(ledger, "first", "t1"),)),
                 Reply(tool_calls=(tally(ledger, "second", "t2"),)), Reply(text="Second one paid."))  # fmt: skip
    repl.wait_for(b"you> ")
    repl.type(b"pay\r")
    repl.wait_for(asked(ledger, "first"))
    repl.type(b"\r")  # Enter: the default, N
    repl.wait_for(b"Why not? (optional, Enter to skip) ")
    repl.type(b"\r")  # no reason
    repl.wait_for(asked(ledger, "second"))
    repl.type(b"yes\r")
    assert b"Second one paid." in repl.wait_for(b"you> ")
    repl.type(b"\x04")
    assert repl.process.wait(30) == 0
    assert counted(ledger) == ["second"]
    sent = {m["tool_call_id"]: m["content"] for m in threaded_provider.requests[1].messages if m["role"] == "tool"}
    assert sent == {"t1": "denied: not approved"}
    history = cli("history", "r1")[1].splitlines()
    assert "tool: denied: not approved · denied by local" in history
    assert "tool: counted second · approved by local" in history


@pytest.mark.slow
def test_ctrl_d_at_a_question_decides_nothing_and_the_calls_still_wait(
    repl: Terminal, cli: Cli, threaded_provider: FakeProvider, ledger: Path
) -> None:
    threaded_provider.enqueue(Reply(tool_calls=(tally(ledger, "paid", "t1"),)))
    repl.wait_for(b"you> ")
    repl.type(b"pay\r")
    repl.wait_for(asked(ledger, "paid"))
    repl.type(b"\x04")
    assert b"decide with: yao-agent approve r1 [--deny ID[:REASON]]..." in repl.wait_for(b"you> ")
    repl.type(b"\x04")
    assert repl.process.wait(30) == 0
    assert counted(ledger) == [] and len(threaded_provider.requests) == 1
    code, shown = cli("approvals", "r1", "--json")
    assert code == 0 and [a["tool_call_id"] for a in json.loads(shown)["approvals"]] == ["t1"]
