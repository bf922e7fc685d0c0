"""A run's events rendered live in the terminal (for `chat`, `resume`, `approve`); `history`, `resume`.

Text streams as it arrives, reasoning dimmed, tool calls and results on their own lines, and a final
line with the outcome, usage and how long the user waited: since the command started (in the REPL,
since the line was entered), then the run's own duration, which leaves out start-up. `--json` prints
the events themselves, one per line, with the run's `duration_ms`. Ctrl-C cancels the run cleanly:
it is stored as cancelled and can be resumed. A run's hooks' `ctx.log` lines show between the lines
of the conversation, dimmed, when the output is a terminal (info and up); `--verbose` shows all of
them, debug included, wherever the output goes (on stderr with `--json`).

A run that ends waiting for a person (tool approvals) is no failure: the command exits 0 and says how
to decide (`yao-agent approve`); the REPL (cli_repl.py) asks instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shlex
import signal
import sys
import time
from collections.abc import Callable, Generator, Mapping
from contextlib import aclosing
from typing import Any, TextIO

from rich.console import Console

from yao_agent import settings
from yao_agent.cli.common import said, visible
from yao_agent.errors import Exit
from yao_agent.events import (
    ApprovalRequest,
    Compaction,
    Event,
    FallbackEvent,
    Guardrail,
    MessageDelta,
    MessageEnd,
    MessageStart,
    References,
    StreamEnd,
    StreamStart,
    ToolResult,
    to_json,
)
from yao_agent.hooks.host import printable
from yao_agent.identity import Identity
from yao_agent.knowledge.references import where
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunHandle
from yao_agent.service.runs import Runs

HOOK_LOGGER = "yao_agent.hook"  # where a hook's ctx.log lines are logged (pipeline/hostapi.py)
Clock = Callable[[], float]


class Renderer:
    """A run's events for a person (or, with `as_json`, for a program).

    `started` is when the user began to wait (`clock`'s time; default: now)."""

    def __init__(
        self,
        out: TextIO,
        *,
        as_json: bool,
        started: float | None = None,
        clock: Clock = time.monotonic,
        verbose: bool = False,
    ) -> None:
        self.as_json = as_json
        self.out = out
        self.clock = clock
        self.started = clock() if started is None else started
        self.console = Console(file=out, highlight=False, soft_wrap=True, emoji=False)  # the text as written
        self.midline = False
        self.streaming: str | None = None  # the message whose text is being printed
        self.end: StreamEnd | None = None
        self.hook_level = hook_level(verbose=verbose, terminal=self.console.is_terminal and not as_json)

    def hook_line(self, record: logging.LogRecord) -> None:
        """One `ctx.log` line of the run's hooks, between the lines of the conversation (on stderr with
        --json: stdout is events). Escaped where it was logged."""
        text = f"[{record.levelname.lower()}] {record.getMessage()}"
        if self.as_json:
            print(f"hook {text}", file=sys.stderr, flush=True)
            return
        self._newline()
        style = "red" if record.levelno >= logging.ERROR else "yellow" if record.levelno >= logging.WARNING else "dim"
        self.console.print(text, style=style, markup=False)

    def show(self, event: Event) -> None:
        if isinstance(event, StreamEnd):
            self.end = event
        if self.as_json:
            print(to_json(event), file=self.out, flush=True)
            return
        if isinstance(event, MessageDelta) and event.text:
            if self.streaming != event.message_id:
                self._newline()  # reasoning, then the answer: each on its own lines
                self.streaming = event.message_id
            style = "dim italic" if event.kind == "reasoning" else None
            self.console.print(visible(event.text), end="", style=style, markup=False)
            self.midline = True
        elif isinstance(event, MessageEnd):
            self._message_end(event)
        elif isinstance(event, MessageStart) and event.continues is not None:
            self._continued(event)
        else:
            self._other(event)

    def _continued(self, event: MessageStart) -> None:
        """A resume goes on from a reply cut off before (shown then, and in `history`): the new text follows
        an ellipsis."""
        self._newline()
        self.streaming = event.message_id
        self.console.print("…", end="", style="dim")
        self.midline = True

    def _newline(self) -> None:
        if self.midline:
            self.console.print()
            self.midline = False

    def _message_end(self, event: MessageEnd) -> None:
        if event.kind == "tool_call":
            self._newline()
            call: dict[str, Any] = event.content
            self.console.print(escaped(f"⚙ {call.get('name')}({call.get('arguments')})"), style="cyan", markup=False)
        elif event.kind in ("text", "reasoning"):
            self._newline()
            if event.status == "incomplete":
                self.console.print("(cut off: this reply is incomplete)", style="yellow")

    def _other(self, event: Event) -> None:
        if isinstance(event, StreamStart):
            self.console.print(f"chat {event.chat_id} · {event.assistant_id}", style="dim")
        elif isinstance(event, ToolResult):
            self._newline()
            shown = event.error if event.error else _short(event.result)
            self.console.print(visible(f"↳ {shown}"), style="red" if event.error else "green", markup=False)
        elif isinstance(event, FallbackEvent):
            self._newline()
            fell = visible(f"↪ {event.from_connector} → {event.to}: {event.reason}")
            self.console.print(fell, style="yellow", markup=False)
        elif isinstance(event, ApprovalRequest):
            self._newline()
            name = escaped(f"{event.server}__{event.tool}")
            self.console.print(f"⏸ {name} waits for approval (call {escaped(event.tool_call_id)})",
                               style="yellow", markup=False)  # fmt: skip
        elif isinstance(event, References):
            self._newline()
            for reference in event.references:
                self.console.print(visible(f"⌕ [{reference['n']}] {where(reference)}"), style="dim", markup=False)
        elif isinstance(event, Guardrail):
            self._newline()
            done = "masked" if event.action == "mask" else "blocked"
            what = f"⛨ {event.stage.replace('_', ' ')} {done} by {event.check}"
            shown = visible(f"{what}: {event.reason}" if event.reason else what)
            self.console.print(shown, style="dim" if event.action == "mask" else "yellow", markup=False)
        elif isinstance(event, Compaction):
            self._newline()
            said = f"⇣ {_plural(event.messages_summarised, 'earlier message')} summarised to fit the model's window"
            sizes = f"({event.tokens_before} → {event.tokens_after} tokens, by {event.connector})"
            self.console.print(f"{said} {sizes}", style="dim", markup=False)
        elif isinstance(event, StreamEnd):
            self._newline()
            self._stream_end(event)

    def _stream_end(self, event: StreamEnd) -> None:
        tokens, cost = event.usage.get("total_tokens", 0), event.usage.get("cost_usd")
        waited = self.clock() - self.started
        spent = f" · ${cost:.4f}" if cost else ""  # unknown (None) or free (a script): nothing to say
        line = f"── {event.status} · {tokens} tokens{spent} · {waited:.1f} s (run {event.duration_ms / 1000:.1f} s)"
        if event.status == "completed":
            self.console.print(line, style="dim")
        elif event.status == "waiting":  # not a failure: the calls announced above wait for a person
            waiting = _plural(len(event.approvals or ()), "call")
            self.console.print(f"{line} · {waiting} waiting for approval", style="yellow", markup=False)
        else:
            why = ": ".join(
                part for part in (event.reason if event.reason != event.status else "", said(event.error)) if part
            )
            self.console.print(f"{line} · {why}" if why else line, style="red", markup=False)
        if event.next is not None:
            data = visible(json.dumps(event.next, ensure_ascii=False))
            self.console.print(f"next: {data}", style="magenta", markup=False)


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def identity_of(args: argparse.Namespace) -> Identity:
    return Identity(args.user or "local", args.team or None)


async def open_runs(args: argparse.Namespace) -> Runs:
    app_dir = settings.app_dir(args.app)
    return await Runs.open(app_dir, db=args.db)


def hook_level(*, verbose: bool, terminal: bool) -> int | None:
    """Which of the hooks' `ctx.log` lines a chat shows: on a terminal, info and up (dimmed); with
    `--verbose`, every one, debug included, wherever the output goes; else none here (warnings and
    errors still reach stderr as any warning does)."""
    if verbose:
        return logging.DEBUG
    return logging.INFO if terminal else None


@contextlib.contextmanager
def hook_lines(renderer: Renderer, logger: logging.Logger | None = None) -> Generator[None]:
    """While a run is rendered, its hooks' `ctx.log` lines go to the renderer (and only there)."""
    logger = logger or logging.getLogger(HOOK_LOGGER)
    if renderer.hook_level is None:
        yield
        return
    handler = _ToRenderer(renderer)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(renderer.hook_level)
    logger.propagate = False  # shown here: not a second time as a warning on stderr
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])  # (setLevel, not the attribute: the logger caches what it lets through)
        logger.propagate = saved[1]


class _ToRenderer(logging.Handler):
    def __init__(self, renderer: Renderer) -> None:
        super().__init__()
        self.renderer = renderer

    def emit(self, record: logging.LogRecord) -> None:
        self.renderer.hook_line(record)


async def follow(handle: RunHandle, renderer: Renderer) -> int:
    """Render a run to its end; Ctrl-C cancels it (stored, resumable) instead of killing the process.
    A run that waits for approvals did not fail: it is 0, like a completed one."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, handle.cancel)
    try:
        with hook_lines(renderer):
            async with aclosing(handle.events()) as events:
                async for event in events:
                    renderer.show(event)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    ok = renderer.end is not None and renderer.end.status in ("completed", "waiting")
    return Exit.OK if ok else Exit.FAILED


def escaped(text: str) -> str:
    """Text the model or another person wrote, fit for the terminal: control and direction-changing
    characters escaped (they could rewrite the screen), and never cut."""
    return printable(text, limit=len(text))


def call_text(approval: Mapping[str, Any]) -> str:
    """A pending call as the person deciding reads it, `server__tool({...})`, whole: what is approved is
    all of it. Escaped, since the model wrote the arguments."""
    arguments = json.dumps(approval.get("arguments"), ensure_ascii=False)
    return escaped(f"{approval.get('server')}__{approval.get('tool')}({arguments})")


def approve_command(args: argparse.Namespace, chat_id: str) -> str:
    """The command that decides the chat's pending calls, as the same identity (the chat is theirs)."""
    words = ["yao-agent", "approve", chat_id]
    for flag, value in (("--user", args.user), ("--team", args.team)):
        if value:
            words += [flag, value]
    return escaped(shlex.join(words))


def hint_waiting(args: argparse.Namespace, chat_id: str, end: StreamEnd | None, out: TextIO, *,
                 repl: bool = False) -> None:  # fmt: skip
    """After a run that waits for approvals, how to decide them (on stderr with --json: stdout is events)."""
    if end is None or end.status != "waiting":
        return
    text = f"decide with: {approve_command(args, chat_id)} [--deny ID[:REASON]]..."
    if repl:
        text += " (or type a new message: it denies them)"
    print(text, file=sys.stderr if args.json else out, flush=True)


class _OneLine(logging.Formatter):
    """A log record as one terminal line: an error's type and words, never its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        return f"{text} ({type(error).__name__}: {error})" if error is not None else text


@contextlib.contextmanager
def terminal_logging(root: logging.Logger | None = None, stream: TextIO | None = None) -> Generator[None]:
    """While a command runs, warnings reach the terminal as one line each (unless YAO_AGENT_DEBUG=1,
    or logging is configured already). Without a handler, Python would print tracebacks there."""
    root = root or logging.getLogger()
    if root.handlers or settings.debug():
        yield
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine())
    handler.addFilter(lambda record: not getattr(record, "run_outcome", False))  # the run's own last line says it
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def command_start(args: argparse.Namespace) -> float | None:
    """When `main` began (time.monotonic), if it said so: the user has waited since then."""
    started = getattr(args, "started", None)
    return started if isinstance(started, float) else None


async def history(args: argparse.Namespace, out: TextIO) -> int:
    runs = await open_runs(args)
    try:
        messages = await runs.messages(identity_of(args), args.chat_id)
    finally:
        await runs.aclose()
    if args.json:
        for message in messages:
            print(json.dumps(message.to_api(), ensure_ascii=False), file=out)
    else:
        console = Console(file=out, highlight=False, soft_wrap=True, emoji=False)
        for message in messages:
            if message.role == "summary":
                _show_summary(console, message, covered(messages, message))
            else:
                _show_message(console, message)
    return Exit.OK


def covered(messages: list[ChatMessage], summary: ChatMessage) -> int:
    """How many of the chat's messages a summary covers (its `summarises` range, other summaries aside)."""
    ids = [m.id for m in messages]
    first, last = summary.summarises or ("", "")
    if first not in ids or last not in ids:
        return 0
    return sum(1 for m in messages[ids.index(first) : ids.index(last) + 1] if m.role != "summary")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _show_summary(console: Console, message: ChatMessage, count: int) -> None:
    """A marker where the summary was made; the messages it covers are listed above it, as stored."""
    console.print(f"── summary of {_plural(count, 'earlier message')} ──", style="magenta", markup=False)
    console.print(visible(str(message.content)), style="dim", markup=False)


def _show_message(console: Console, message: ChatMessage) -> None:
    style = {"user": "bold", "assistant": None, "tool": "green", "system": "dim"}.get(message.role)
    mark = " (incomplete)" if message.status == "incomplete" else ""
    if message.reasoning:
        console.print(visible(f"{message.role}: [reasoning] {message.reasoning}"), style="dim italic", markup=False)
    text = message.content if isinstance(message.content, str) else json.dumps(message.content, ensure_ascii=False)
    if message.content is not None:
        console.print(visible(f"{message.role}{mark}: {text}{_decided(message.approval)}"), style=style, markup=False)
    for call in message.tool_calls:
        console.print(escaped(f"{message.role}: ⚙ {call.name}({call.arguments})"), style="cyan", markup=False)


def _decided(approval: Mapping[str, Any] | None) -> str:
    """What a person decided about the call this result answers, and who: ` · denied by alice: too costly`."""
    if approval is None:
        return ""
    verdict = "approved" if approval.get("approved") else "denied"
    reason = f": {approval['reason']}" if approval.get("reason") else ""
    return escaped(f" · {verdict} by {approval.get('by')}{reason}")


async def resume(args: argparse.Namespace, out: TextIO) -> int:
    with terminal_logging():
        runs = await open_runs(args)
        try:
            handle = await runs.resume(identity_of(args), args.chat_id)
            renderer = Renderer(out, as_json=args.json, started=command_start(args), verbose=args.verbose)
            code = await follow(handle, renderer)
            hint_waiting(args, handle.chat_id, renderer.end, out)
            return code
        finally:
            await runs.aclose()
