"""`yao-agent chat`, `history`, `resume`, `runs`, `approvals`, `approve`: a chat and its runs. Each
command imports its module when it runs (`--help` stays light)."""

from __future__ import annotations

import argparse
from typing import TextIO

from yao_agent.cli.common import Commands, identity_options, run_async, verbose_option


def cmd_chat(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.startup import loading

    with loading():  # most of a cold chat's start-up is this import
        from yao_agent.cli.repl import chat

    return run_async(chat(args, out))


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.chat import history

    return run_async(history(args, out))


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.chat import resume

    return run_async(resume(args, out))


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.runs import runs_of_chat

    return run_async(runs_of_chat(args, out))


def cmd_approvals(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.approvals import approvals

    return run_async(approvals(args, out))


def cmd_approve(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.cli.startup import loading

    with loading():  # the continuation runs the model and the tools: their imports, as for `chat`
        from yao_agent.cli.approvals import approve

    return run_async(approve(args, out))


def add_commands(cmds: Commands) -> None:
    p = cmds.command("chat", cmd_chat, "stream one turn with an assistant (a REPL when MESSAGE is absent)")
    p.add_argument("assistant", metavar="ASSISTANT")
    p.add_argument("message", metavar="MESSAGE", nargs="?")
    p.add_argument("--chat", metavar="ID", help="continue this chat, or start it under this id")
    identity_options(p)
    verbose_option(p)
    p = cmds.command("history", cmd_history, "the stored messages of a chat (exit 2: no such chat)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    identity_options(p)
    p = cmds.command("resume", cmd_resume, "continue a failed, cancelled or interrupted run (exit 2: no resume point)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    identity_options(p)
    verbose_option(p)
    p = cmds.command("approvals", cmd_approvals, "the tool calls a chat's run waits to have approved (exit 2: none)")
    p.add_argument("chat_id", metavar="CHAT_ID")
    identity_options(p)
    p = cmds.command(
        "approve", cmd_approve, "approve the calls a chat's run waits for, deny those given; continue the run"
    )
    p.add_argument("chat_id", metavar="CHAT_ID")
    p.add_argument("--deny", metavar="TOOL_CALL_ID[:REASON]", action="append",
                   help="deny this call (the model reads the reason); repeat for more")  # fmt: skip
    identity_options(p)
    verbose_option(p)
    p = cmds.command("runs", cmd_runs, "a chat's runs, or one run's steps: transitions, who answered, tokens, timing")
    p.add_argument("chat_id", metavar="CHAT_ID")
    p.add_argument("run_id", metavar="RUN_ID", nargs="?")
    identity_options(p)
