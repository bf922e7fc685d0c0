"""The host half of `ctx`: what the hook's `ctx.log/send/memory/call` do in Python, and their results.

Calls a hook makes together (say, `Promise.all` of two `ctx.call`s) run concurrently, started in the
order the hook made them. A result goes back as JSON; a failure goes back as a one-line message, never
a Python traceback: a run error (a child that failed, a store that is down) in its own words, anything
else as "internal error", logged here with its traceback. A `DelegateError` is not handed to the hook
at all: a delegation that cannot happen (too deep, a cycle) ends the run with `delegate_error`; nor is an
`OverBudget`: a child's model call a budget refused ends the run with `budget_exceeded`.

Every limit on what hooks may do is here (docs/tutorial/first-hook.md lists them). One hook call may
make at most `MAX_CALLS` ctx calls, and at most `MAX_EFFECTS` of them may be `ctx.send` or `ctx.call`
(each adds messages to the chat, or a whole child run): a hook looping on `ctx.send` fails instead of
flooding the chat. A message or a memory value too large is an error the hook can catch (it can send
less); a run whose hooks have sent `MAX_SENT_PER_RUN` bytes, or made `MAX_CALLS_PER_RUN` `ctx.call`s,
all its children's hooks included, fails with `hook_error`: `RunSpend` is shared by the whole run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from yao_agent.errors import DelegateError, OverBudget, RunError, UsageError
from yao_agent.hooks.api import host_names
from yao_agent.hooks.errors import host_failure

log = logging.getLogger("yao_agent.hook")
MAX_CALLS = 1000  # ctx calls in one hook call
MAX_EFFECTS = 100  # ctx.send, ctx.call and ctx.search in one hook call
MAX_SEND_BYTES = 256 * 1024  # one ctx.send message, as JSON
MAX_SENT_PER_RUN = 2 * 1024 * 1024  # every ctx.send of one run, its children's hooks included
MAX_CALLS_PER_RUN = 50  # ctx.call of one run, its children's hooks included
MAX_MEMORY_VALUE_BYTES = 64 * 1024  # one ctx.memory value, as JSON (keys: see the store's MEMORY_KEY_MAX)
MAX_LOG_CHARS = 2000  # one ctx.log line in the server log; the rest is cut
MAX_DEPTH = 64  # how deeply arrays and objects may nest in what a hook returns or passes to ctx
_EFFECTS = frozenset({"send", "call", "search"})  # what costs: a message, a run, a search
# C0 and C1 controls, line and paragraph separators, bidirectional overrides, lone surrogates.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMES = host_names()  # `mget` → `ctx.memory.get`: as errors and logs name a ctx call

# Strict: a NaN would reach V8's JSON.parse and fail the whole batch instead of the one call.
_to_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


@dataclass
class RunSpend:
    """What the hooks of one run (its `ctx.call` and delegated children included) have used."""

    sent_bytes: int = 0
    calls: int = 0


@dataclass
class HookContext:
    """What a hook sees as `ctx`: a read-only snapshot plus async host methods."""

    snapshot: dict[str, Any]  # chat_id, assistant_id, user_id, team_id, locale, metadata (JSON-able)
    log: Callable[[str, str], Awaitable[None]]  # ctx.log(level, msg)
    send: Callable[[Any], Awaitable[str]]  # ctx.send(textOrMessage) -> message id
    memory_get: Callable[[str], Awaitable[Any]]  # ctx.memory.get(key)
    memory_set: Callable[[str, Any], Awaitable[None]]  # ctx.memory.set(key, value)
    call: Callable[[str, Any], Awaitable[Any]]  # ctx.call(assistant_id, messages) -> the child's reply
    hook: str = ""  # the hook file as the app names it, for the log
    spend: RunSpend = field(default_factory=RunSpend)  # the run's, shared by all its hook calls
    search: Callable[[str, Any], Awaitable[Any]] = field(default=None)  # pyright: ignore[reportAssignmentType]
    # ctx.search(query, {knowledge, top_k, filter}) -> references; None: the host offers no search

    def __post_init__(self) -> None:
        if self.search is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.search = _no_search


async def _no_search(query: str, options: Any) -> Any:
    raise UsageError("ctx.search: no knowledge here (the hook runs outside an app's run)")


def printable(text: str, limit: int = MAX_LOG_CHARS) -> str:
    """One line a log can show as is: control, line-breaking and direction-changing characters escaped
    (a newline is shown as `\\n`, ESC as `\\x1b`), and at most `limit` characters of the text."""
    cut = _UNSAFE.sub(_escape, text[:limit])
    return cut if len(text) <= limit else f"{cut}… ({len(text) - limit} more characters)"


def _escape(found: re.Match[str]) -> str:
    c = found.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class TooManyCalls(Exception):
    """The hook made more ctx calls in one call than it may; `message` says which limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _method(ctx: HookContext, op: str) -> Callable[..., Awaitable[Any]]:
    methods: dict[str, Callable[..., Awaitable[Any]]] = {
        "log": ctx.log,
        "send": ctx.send,
        "mget": ctx.memory_get,
        "mset": ctx.memory_set,
        "call": ctx.call,
        "search": ctx.search,
    }
    return methods[op]


def _refused(ctx: HookContext, op: str, args: list[Any]) -> str | None:
    """Why this call may not happen, in the hook's terms (it can catch it); None if it may.
    Raises `TooManyCalls` when the run has used up what its hooks may send."""
    if op == "send":
        size = _json_size(args[0] if args else None)
        if size > MAX_SEND_BYTES:
            return f"ctx.send: a message may be at most {_kb(MAX_SEND_BYTES)} as JSON; this one is {_kb(size)}"
        if ctx.spend.sent_bytes + size > MAX_SENT_PER_RUN:
            raise TooManyCalls(f"the hooks of this run sent more than {_kb(MAX_SENT_PER_RUN)} with ctx.send "
                               f"(the limit per run is {_kb(MAX_SENT_PER_RUN)})")  # fmt: skip
        ctx.spend.sent_bytes += size
    elif op == "mset":
        size = _json_size(args[1] if len(args) > 1 else None)
        if size > MAX_MEMORY_VALUE_BYTES:
            return (f"ctx.memory.set: a value may be at most {_kb(MAX_MEMORY_VALUE_BYTES)} as JSON; this one is "
                    f"{_kb(size)}")  # fmt: skip
    return None


def _json_size(value: Any) -> int:
    try:
        return len(_to_json(value).encode())
    except ValueError:
        return 0  # no JSON form: the method itself says so


def _kb(size: int) -> str:
    return f"{size / 1024 / 1024:g} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


async def _perform(ctx: HookContext, call_id: int, op: str, args: list[Any]) -> tuple[int, int, Any]:
    """One `ctx` call, as the `[id, ok, value-or-message]` triple the runtime's `deliver` expects."""
    refused = _refused(ctx, op, args)
    if refused is not None:
        return call_id, 0, refused
    try:
        value = await _method(ctx, op)(*args)
    except (DelegateError, OverBudget):  # not the hook's to catch: the run ends
        raise
    except (RunError, UsageError) as exc:
        return call_id, 0, host_failure(exc)
    except Exception as exc:
        name = _NAMES.get(op, op)
        log.error("%s (%s): %s failed on an internal error", ctx.hook, ctx.snapshot.get("assistant_id"), name,
                  exc_info=exc)  # fmt: skip
        return call_id, 0, f"internal error in {name} (logged on the server)"
    try:
        _to_json(value)  # fail here, as this call's error, rather than later for the whole batch
    except ValueError as exc:
        return call_id, 0, f"{_NAMES.get(op, op)} gave a value with no JSON form: {host_failure(exc)}"
    return call_id, 1, value


class HostCalls:
    """The `ctx` calls of one hook call that are still running on the host.

    A lone quick call (the usual `await ctx.log(...)`) is awaited in place when its result is wanted: a
    task and `asyncio.wait` would cost more than the call itself. Several calls become tasks at once, so
    they run together, and so does `ctx.call`, whose child run gets its own task and context variables.
    """

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx
        self._waiting: list[tuple[int, str, list[Any]]] = []  # asked for, not started
        self._running: set[asyncio.Task[tuple[int, int, Any]]] = set()
        self._made = 0
        self._effects = 0

    @property
    def pending(self) -> bool:
        return bool(self._waiting or self._running)

    def start(self, calls: list[Any]) -> None:
        """Take each `[id, op, args]` the hook asked for; a malformed entry is a runtime bug, so it raises."""
        taken = [(int(call_id), str(op), list(args)) for call_id, op, args in calls]
        self._count(taken)
        self._waiting.extend(taken)
        if len(self._waiting) + len(self._running) > 1:
            self._launch()

    def _count(self, taken: list[tuple[int, str, list[Any]]]) -> None:
        self._made += len(taken)
        self._effects += sum(1 for _, op, _ in taken if op in _EFFECTS)
        spend = self._ctx.spend
        spend.calls += sum(1 for _, op, _ in taken if op == "call")
        if spend.calls > MAX_CALLS_PER_RUN:
            raise TooManyCalls(f"the hooks of this run made more than {MAX_CALLS_PER_RUN} ctx.call calls "
                               f"(the limit per run is {MAX_CALLS_PER_RUN})")  # fmt: skip
        if self._effects > MAX_EFFECTS:
            raise TooManyCalls(f"the hook made more than {MAX_EFFECTS} ctx.send/ctx.call/ctx.search calls in one call "
                               f"(the limit is {MAX_EFFECTS})")  # fmt: skip
        if self._made > MAX_CALLS:
            raise TooManyCalls(f"the hook made more than {MAX_CALLS} ctx calls in one call (the limit is {MAX_CALLS})")

    def _launch(self) -> None:
        for call_id, op, args in self._waiting:
            self._running.add(asyncio.create_task(_perform(self._ctx, call_id, op, args)))
        self._waiting.clear()

    async def next_results(self) -> str:
        """Wait for at least one call to finish; the finished ones, as the JSON `deliver` takes."""
        if len(self._waiting) == 1 and not self._running and self._waiting[0][1] != "call":
            (call_id, op, args) = self._waiting.pop()
            return _to_json([await _perform(self._ctx, call_id, op, args)])
        self._launch()
        done, self._running = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
        return _to_json(_results(done))

    async def finish(self) -> None:
        """The hook has returned: let calls it did not await complete (a `ctx.send` must still happen)."""
        self._launch()
        if self._running:
            done, _ = await asyncio.wait(self._running)
            self._running = set()
            _results(done)

    def cancel(self) -> None:
        self._waiting.clear()
        for task in self._running:
            task.cancel()
        self._running = set()


def _results(done: set[asyncio.Task[tuple[int, int, Any]]]) -> list[tuple[int, int, Any]]:
    """The finished calls' triples; a `DelegateError` among them is raised once every one was looked at."""
    results: list[tuple[int, int, Any]] = []
    carried: BaseException | None = None
    for task in done:
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is None:
            results.append(task.result())
        elif carried is None:
            carried = error
    if carried is not None:
        raise carried
    return results
