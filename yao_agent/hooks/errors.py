"""Turning what V8 reports into a `HookError` that names the hook file, the line in it, and a short message.

Lines come from V8 itself: the hook file is run as its own, unmodified script named `HOOK_URL`, so the
first stack frame carrying that name is the innermost place in the user's file; frames of the runtime
(`RUNTIME_URL`) are skipped. Load-time failures (a syntax error, a throw at top level) are reported by
V8 as `<name>:<line>: <message>` followed by the source line and, for throws, the stack.
"""

from __future__ import annotations

import re
from typing import Any

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import HookError
from yao_agent.hooks.bridge import HOOK_URL

MAX_MESSAGE = 500
_FRAME = re.compile(re.escape(HOOK_URL) + r":(\d+):\d+")
_REPORT_HEAD = re.compile(r"^[^\n]*?:(\d+): ([^\n]*)")
# V8 reads a hook file as a script, where `export` is just an unexpected token: say why.
_MODULE_SYNTAX = re.compile(r"^SyntaxError: (Unexpected token 'export'|Cannot use .* outside a module)")
MODULE_HINT = (
    " (a hook file is a plain script, not a module: define Create and Next as top-level functions, "
    "without export or import)"
)


def short(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line of at most `limit` characters: enough to act on, never a dump."""
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def line_in_stack(stack: str) -> int | None:
    match = _FRAME.search(stack)
    return int(match.group(1)) if match else None


def from_report(error: Any, *, file: str, function: str) -> HookError:
    """A failure the runtime caught and described as `{kind, name?, message, stack?}`."""
    info = as_mapping(error)
    kind = str(info.get("kind", "value"))
    message = str(info.get("message", ""))
    stack = str(info.get("stack", ""))
    if kind == "throw":
        name = str(info.get("name", "Error"))
        text = f"{name}: {message}" if message else name
    elif kind == "json":
        text = f"{function} returned a value that is not JSON-serialisable: {message}"
    else:
        text = message or "the hook failed without a message"
    return HookError(short(text), file=file, line=line_in_stack(stack), function=function)


def from_load(text: str, *, file: str, function: str, lines: int) -> HookError:
    """A failure while the hook file itself ran: a syntax error or a throw at top level.

    V8 places an unexpected end of input on the line after the file's last one; that is clamped.
    """
    head = _REPORT_HEAD.match(text)
    if head is None:
        return HookError(short(text) or "the hook file could not be loaded", file=file, function=function)
    line = line_in_stack(text) or int(head.group(1))
    message = short(head.group(2).removeprefix("Uncaught "))
    if _MODULE_SYNTAX.match(message):
        message += MODULE_HINT
    return HookError(message, file=file, line=min(line, max(lines, 1)), function=function)


def timed_out(timeout_ms: int, *, file: str, function: str) -> HookError:
    return HookError(f"hook timed out after {timeout_ms} ms", file=file, function=function)


def out_of_memory(memory_mb: int, *, file: str, function: str) -> HookError:
    return HookError(f"hook exceeded its memory limit of {memory_mb} MB", file=file, function=function)


def crashed(detail: str, memory_mb: int, *, file: str, function: str) -> HookError:
    """The process running the hook ended under it: V8 gave up (an allocation its limit could not stop) or
    the process was killed. Only this call failed; the next one gets a new process."""
    message = f"the hook ran out of memory or was stopped: its V8 process ended ({detail}) under a memory limit of "
    return HookError(short(message + f"{memory_mb} MB"), file=file, function=function)


def lost_while_waiting(detail: str, *, file: str, function: str) -> HookError:
    """The process holding the hook's context ended while the hook waited for a `ctx` call: another call
    in it, or the process itself, failed meanwhile. Nothing of this hook's own is known to be wrong."""
    message = f"the hook's V8 process ended while the hook waited for a ctx call ({detail}); run it again"
    return HookError(short(message), file=file, function=function)


def host_failure(exc: BaseException) -> str:
    """What a hook sees when a `ctx` method fails on the host: the error's own words, no traceback."""
    return short(str(exc), 300) or type(exc).__name__
