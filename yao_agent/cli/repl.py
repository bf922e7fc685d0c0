"""`yao-agent chat`: one turn, or the REPL, in the terminal (rendered by cli_chat.py).

The REPL sends each line to the assistant, one turn each, in one chat (`--chat ID` or a new one). A
line led by `/` is a command for the REPL, never sent to the model: `/help` lists them, `/new` starts
a new chat, `/resume` continues the chat's failed, cancelled (Ctrl-C) or interrupted run as `yao-agent
resume` does, `/quit` leaves (as Ctrl-D does); `//text` sends `/text`. An unknown command says so. The
REPL edits lines with readline where Python has it, with a history of the last 1,000 lines in
~/.yao-agent_history.

A run that ends waiting for a person (tool approvals) is no failure: the REPL on a terminal asks,
call by call (`Run server__tool({...})? [y/N]`; anything but y/yes denies, then an optional reason is
asked on the next line, Enter for none), decides, and streams the continuation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Generator, Mapping
from typing import Any, TextIO

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.cli.chat import (
    Renderer,
    call_text,
    command_start,
    escaped,
    follow,
    hint_waiting,
    identity_of,
    open_runs,
    terminal_logging,
)
from yao_agent.cli.startup import loading
from yao_agent.errors import Exit, UsageError
from yao_agent.events import StreamEnd
from yao_agent.pipeline import RunHandle, RunRequest
from yao_agent.service.runs import Runs

HISTORY_FILE = "~/.yao-agent_history"  # one history for every app, like the shells' and Python's own
HISTORY_LINES = 1000


async def chat(args: argparse.Namespace, out: TextIO) -> int:
    with terminal_logging():
        return await _chat(args, out)


async def _chat(args: argparse.Namespace, out: TextIO) -> int:
    with loading():  # the app and the store
        runs = await open_runs(args)
    try:
        with loading():  # the engines (and their SDKs) the assistant's connectors need
            await runs.process.prepare(args.assistant, identity_of(args))  # (an unknown assistant: a usage error)
        if args.message is not None:
            return await _turn(runs, args, args.message, args.chat, out)
        with line_editing():
            return await _repl(runs, args, out)
    finally:
        await runs.aclose()


async def _turn(runs: Runs, args: argparse.Namespace, text: str, chat_id: str | None, out: TextIO) -> int:
    request = RunRequest(args.assistant, identity_of(args), [{"role": "user", "content": text}], chat_id=chat_id)
    handle = await runs.start(request)
    renderer = Renderer(out, as_json=args.json, started=command_start(args), verbose=args.verbose)
    code = await follow(handle, renderer)
    hint_waiting(args, handle.chat_id, renderer.end, out)
    return code


async def _repl(runs: Runs, args: argparse.Namespace, out: TextIO) -> int:
    """Lines to the model, one turn each, in one chat; a line led by `/` is a command (`//` sends a `/`)."""
    session = Session(runs, args, out, args.chat)
    async for line in _lines(asyncio.get_running_loop()):
        text = line.strip()
        if not text:
            continue
        if text.startswith("/") and not text.startswith("//"):
            if not await session.command(text):
                break
            continue
        await session.say(line[1:] if text.startswith("//") else line)
    return session.code


class Session:
    """The REPL's chat: its id (None until the first message opens one) and the last run's exit code."""

    def __init__(self, runs: Runs, args: argparse.Namespace, out: TextIO, chat_id: str | None) -> None:
        self.runs, self.args, self.out = runs, args, out
        self.chat_id = chat_id
        self.code = Exit.OK

    def tell(self, text: str) -> None:
        """A word from the REPL itself (on stderr with --json: stdout is events)."""
        print(text, file=sys.stderr if self.args.json else self.out, flush=True)

    async def say(self, text: str) -> None:
        entered = time.monotonic()
        message = {"role": "user", "content": text}
        request = RunRequest(self.args.assistant, identity_of(self.args), [message], chat_id=self.chat_id)
        try:
            handle = await self.runs.start(request)
        except UsageError as exc:  # the chat is busy elsewhere, the message is refused …: say so, go on
            self.tell(f"error: {exc}")
            return
        self.chat_id = handle.chat_id
        await self._follow(handle, entered)

    async def command(self, text: str) -> bool:
        """Do what a `/` line asks; False when it asks to leave."""
        word, _, rest = text.partition(" ")
        word = word.lower()
        if word not in COMMANDS:
            self.tell(f"unknown command {escaped(word)} (/help lists the commands; //text sends /text)")
        elif rest.strip():
            self.tell(f"{word} takes no argument")
        elif word in ("/quit", "/exit"):
            return False
        elif word == "/help":
            self.tell(HELP)
        elif word == "/new":
            self.chat_id = None
            self.tell("a new chat: your next message starts it")
        else:
            await self.resume()
        return True

    async def resume(self) -> None:
        """Continue the chat's failed, cancelled or interrupted run, as `yao-agent resume` does."""
        if self.chat_id is None:
            self.tell("nothing to resume: no chat yet")
            return
        entered = time.monotonic()
        try:
            handle = await self.runs.resume(identity_of(self.args), self.chat_id)
        except UsageError as exc:  # no resume point: the last run completed, or waits for approvals
            self.tell(f"error: {exc}")
            return
        await self._follow(handle, entered)

    async def _follow(self, handle: RunHandle, entered: float) -> None:
        renderer = Renderer(self.out, as_json=self.args.json, started=entered, verbose=self.args.verbose)
        code = await follow(handle, renderer)
        self.code = await _decide_inline(self.runs, self.args, handle.chat_id, renderer.end, self.out, code)


COMMANDS = ("/help", "/new", "/resume", "/quit", "/exit")
HELP = """\
/help     these commands
/new      start a new chat (your next message opens it)
/resume   continue this chat's failed, cancelled or interrupted run
/quit     leave (Ctrl-D too; /exit as well)
//text    send /text to the assistant"""


async def _decide_inline(
    runs: Runs, args: argparse.Namespace, chat_id: str, end: StreamEnd | None, out: TextIO, code: int
) -> int:
    """While the turn waits for approvals, ask the person at the terminal, decide, and stream the
    continuation (which may wait again). Without a person to ask (--json, or stdin not a terminal),
    say how to decide instead. Returns the exit code of the last run."""
    loop = asyncio.get_running_loop()
    while end is not None and end.status == "waiting":
        if args.json or not sys.stdin.isatty():
            hint_waiting(args, chat_id, end, out, repl=True)
            break
        try:
            decisions = await _ask(loop, [as_mapping(item) for item in end.approvals or ()])
            handle = await runs.decide(identity_of(args), chat_id, decisions)
        except EOFError:  # Ctrl-D at a question: nothing is decided, the calls still wait
            print(file=out)
            hint_waiting(args, chat_id, end, out, repl=True)
            break
        except UsageError as exc:  # decided meanwhile (another person, another process), or a bad reason
            print(f"error: {exc}", file=sys.stderr, flush=True)
            break
        renderer = Renderer(out, as_json=False, verbose=args.verbose)
        code = await follow(handle, renderer)
        end = renderer.end
    return code


async def _ask(loop: asyncio.AbstractEventLoop, pending: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One question per pending call: y or yes approves it, anything else (Enter too) denies it, and then
    asks why; an empty answer gives no reason (the model reads `denied: not approved`)."""
    decisions: list[dict[str, Any]] = []
    with _no_line_history():
        for item in pending:
            answer = await _read_line(loop, f"Run {call_text(item)}? [y/N] ")
            decision: dict[str, Any] = {"tool_call_id": item.get("tool_call_id"), "approve": True}
            if answer.strip().lower() not in ("y", "yes"):
                reason = (await _read_line(loop, "Why not? (optional, Enter to skip) ")).strip()
                decision = {**decision, "approve": False} | ({"reason": reason} if reason else {})
            decisions.append(decision)
    return decisions


@contextlib.contextmanager
def _no_line_history() -> Generator[None]:
    """Answers to approval questions stay out of the REPL's line history (Up recalls messages, not "y")."""
    readline = sys.modules.get("readline")  # loaded by line_editing on a terminal only
    if readline is None:
        yield
        return
    readline.set_auto_history(False)
    try:
        yield
    finally:
        readline.set_auto_history(True)


async def _lines(loop: asyncio.AbstractEventLoop) -> AsyncIterator[str]:
    while True:
        try:
            yield await _read_line(loop, "you> ")
        except (EOFError, KeyboardInterrupt):
            return


def _read_line(loop: asyncio.AbstractEventLoop, prompt: str) -> asyncio.Future[str]:
    """`input()` on a daemon thread, so the loop runs meanwhile. Not on the loop's default executor:
    `asyncio.run` waits for its threads at exit, and Ctrl-C at the prompt would wait for a line."""
    future: asyncio.Future[str] = loop.create_future()

    def read() -> None:
        try:
            line, error = input(prompt), None
        except BaseException as exc:  # EOFError at Ctrl-D: handed to the REPL, which ends
            line, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for the line
            loop.call_soon_threadsafe(_settle, future, line, error)

    threading.Thread(target=read, name="yao-repl-input", daemon=True).start()
    return future


def _settle(future: asyncio.Future[str], line: str | None, error: BaseException | None) -> None:
    if future.done():  # the REPL was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(line or "")


@contextlib.contextmanager
def line_editing(history: str = HISTORY_FILE, terminal: TextIO | None = None) -> Generator[None]:
    """Editing keys (arrows, Home, Ctrl-R …) and the history of earlier lines for `input()`, through
    readline, when the REPL reads a terminal and Python has readline (Windows' has not)."""
    tty: TextIO = terminal or sys.stdin
    if not tty.isatty():
        yield
        return
    try:
        import readline  # input() uses it from now on, on whichever thread calls it
        import termios
    except ImportError:
        yield
        return
    path = os.path.expanduser(history)
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LINES)
    mode = termios.tcgetattr(tty)
    try:
        yield
    finally:
        # Leaving at Ctrl-C, readline may still hold the terminal in its own mode (no echo): give it back.
        termios.tcsetattr(tty, termios.TCSADRAIN, mode)
        with contextlib.suppress(OSError):
            readline.write_history_file(path)
