"""`yao-agent chat`, `history` and `resume`: a run's events rendered live in the terminal.

Text streams as it arrives, reasoning dimmed, tool calls and results on their own lines, and a final
line with the outcome, usage and duration. `--json` prints the events themselves, one per line.
Ctrl-C cancels the run cleanly: it is stored as cancelled and can be resumed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Generator
from contextlib import aclosing
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from yao_agent.errors import NotFound
from yao_agent.events import Event, FallbackEvent, MessageDelta, MessageEnd, StreamEnd, StreamStart, ToolResult, to_json
from yao_agent.identity import Identity
from yao_agent.jsonvalue import as_mapping
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunHandle, RunRequest, Runtime, start, start_resume

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Renderer:
    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self.as_json = as_json
        self.out = out
        self.console = Console(file=out, highlight=False, soft_wrap=True)
        self.midline = False
        self.streaming: str | None = None  # the message whose text is being printed
        self.end: StreamEnd | None = None

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
            self.console.print(event.text, end="", style=style, markup=False)
            self.midline = True
        elif isinstance(event, MessageEnd):
            self._message_end(event)
        else:
            self._other(event)

    def _newline(self) -> None:
        if self.midline:
            self.console.print()
            self.midline = False

    def _message_end(self, event: MessageEnd) -> None:
        if event.kind == "tool_call":
            self._newline()
            call: dict[str, Any] = event.content
            self.console.print(f"⚙ {call.get('name')}({call.get('arguments')})", style="cyan", markup=False)
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
            self.console.print(f"↳ {shown}", style="red" if event.error else "green", markup=False)
        elif isinstance(event, FallbackEvent):
            self._newline()
            self.console.print(f"↪ {event.from_connector} → {event.to}: {event.reason}", style="yellow", markup=False)
        elif isinstance(event, StreamEnd):
            self._newline()
            self._stream_end(event)

    def _stream_end(self, event: StreamEnd) -> None:
        tokens = event.usage.get("total_tokens", 0)
        line = f"── {event.status} · {tokens} tokens · {event.duration_ms / 1000:.1f} s"
        if event.status == "completed":
            self.console.print(line, style="dim")
        else:
            detail = as_mapping(event.error).get("message") or ""
            why = ": ".join(part for part in (event.reason if event.reason != event.status else "", detail) if part)
            self.console.print(f"{line} · {why}" if why else line, style="red", markup=False)
        if event.next is not None:
            self.console.print(f"next: {json.dumps(event.next, ensure_ascii=False)}", style="magenta", markup=False)


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def identity_of(args: argparse.Namespace) -> Identity:
    return Identity(args.user or "local", args.team or None)


async def _open(args: argparse.Namespace) -> Runtime:
    app_dir = Path(args.app or os.environ.get("YAO_AGENT_APP") or ".")
    return await Runtime.open(app_dir, db=args.db)


async def _follow(handle: RunHandle, renderer: Renderer) -> int:
    """Render a run to its end; Ctrl-C cancels it (stored, resumable) instead of killing the process."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, handle.cancel)
    try:
        async with aclosing(handle.events()) as events:
            async for event in events:
                renderer.show(event)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    return EXIT_OK if renderer.end is not None and renderer.end.status == "completed" else EXIT_FAILED


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
    if root.handlers or os.environ.get("YAO_AGENT_DEBUG") == "1":
        yield
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine())
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


async def chat(args: argparse.Namespace, out: TextIO) -> int:
    with terminal_logging():
        return await _chat(args, out)


async def _chat(args: argparse.Namespace, out: TextIO) -> int:
    rt = await _open(args)
    try:
        await rt.prepare(args.assistant, identity_of(args))  # also: an unknown assistant is a usage error here
        if args.message is not None:
            return await _turn(rt, args, args.message, args.chat, out)
        return await _repl(rt, args, out)
    finally:
        await rt.aclose()


async def _turn(rt: Runtime, args: argparse.Namespace, text: str, chat_id: str | None, out: TextIO) -> int:
    request = RunRequest(args.assistant, identity_of(args), [{"role": "user", "content": text}], chat_id=chat_id)
    handle = await start(rt, request)
    return await _follow(handle, Renderer(out, as_json=args.json))


async def _repl(rt: Runtime, args: argparse.Namespace, out: TextIO) -> int:
    loop = asyncio.get_running_loop()
    chat_id: str | None = args.chat
    code = EXIT_OK
    async for line in _lines(loop):
        if not line.strip():
            continue
        request = RunRequest(args.assistant, identity_of(args), [{"role": "user", "content": line}], chat_id=chat_id)
        handle = await start(rt, request)
        chat_id = handle.state.chat_id
        code = await _follow(handle, Renderer(out, as_json=args.json))
    return code


async def _lines(loop: asyncio.AbstractEventLoop) -> AsyncIterator[str]:
    while True:
        try:
            yield await loop.run_in_executor(None, input, "you> ")
        except (EOFError, KeyboardInterrupt):
            return


async def history(args: argparse.Namespace, out: TextIO) -> int:
    rt = await _open(args)
    try:
        who = identity_of(args)
        if await rt.store.check_chat(who, args.chat_id) is None:
            raise NotFound(f"no chat '{args.chat_id}'")
        messages = await rt.store.history(who, args.chat_id)
    finally:
        await rt.aclose()
    if args.json:
        for message in messages:
            print(json.dumps(message.to_api(), ensure_ascii=False), file=out)
    else:
        console = Console(file=out, highlight=False, soft_wrap=True)
        for message in messages:
            _show_message(console, message)
    return EXIT_OK


def _show_message(console: Console, message: ChatMessage) -> None:
    style = {"user": "bold", "assistant": None, "tool": "green", "system": "dim"}[message.role]
    mark = " (incomplete)" if message.status == "incomplete" else ""
    if message.reasoning:
        console.print(f"{message.role}: [reasoning] {message.reasoning}", style="dim italic", markup=False)
    text = message.content if isinstance(message.content, str) else json.dumps(message.content, ensure_ascii=False)
    if message.content is not None:
        console.print(f"{message.role}{mark}: {text}", style=style, markup=False)
    for call in message.tool_calls:
        console.print(f"{message.role}: ⚙ {call.name}({call.arguments})", style="cyan", markup=False)


async def resume(args: argparse.Namespace, out: TextIO) -> int:
    with terminal_logging():
        rt = await _open(args)
        try:
            handle = await start_resume(rt, identity_of(args), args.chat_id)
            return await _follow(handle, Renderer(out, as_json=args.json))
        finally:
            await rt.aclose()
