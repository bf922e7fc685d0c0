"""The host half of `ctx`: what the hook's `ctx.log/send/memory/call` do in Python, and their results.

Calls a hook makes together (say, `Promise.all` of two `ctx.call`s) run concurrently, started in the
order the hook made them. A result goes back as JSON; a failure goes back as a one-line message, never
a Python traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from yao_agent.hooks.errors import host_failure

# Strict: a NaN would reach V8's JSON.parse and fail the whole batch instead of the one call.
_to_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


@dataclass
class HookContext:
    """What a hook sees as `ctx`: a read-only snapshot plus async host methods."""

    snapshot: dict[str, Any]  # chat_id, assistant_id, user_id, team_id, locale, metadata (JSON-able)
    log: Callable[[str, str], Awaitable[None]]  # ctx.log(level, msg)
    send: Callable[[Any], Awaitable[str]]  # ctx.send(textOrMessage) -> message id
    memory_get: Callable[[str], Awaitable[Any]]  # ctx.memory.get(key)
    memory_set: Callable[[str, Any], Awaitable[None]]  # ctx.memory.set(key, value)
    call: Callable[[str, Any], Awaitable[Any]]  # ctx.call(assistant_id, messages) -> the child's reply


def _method(ctx: HookContext, op: str) -> Callable[..., Awaitable[Any]]:
    methods: dict[str, Callable[..., Awaitable[Any]]] = {
        "log": ctx.log,
        "send": ctx.send,
        "mget": ctx.memory_get,
        "mset": ctx.memory_set,
        "call": ctx.call,
    }
    return methods[op]


async def _perform(ctx: HookContext, call_id: int, op: str, args: list[Any]) -> tuple[int, int, Any]:
    """One `ctx` call, as the `[id, ok, value-or-message]` triple the runtime's `deliver` expects."""
    try:
        value = await _method(ctx, op)(*args)
        _to_json(value)  # fail here, as this call's error, rather than later for the whole batch
    except Exception as exc:
        return call_id, 0, host_failure(exc)
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

    @property
    def pending(self) -> bool:
        return bool(self._waiting or self._running)

    def start(self, calls: list[Any]) -> None:
        """Take each `[id, op, args]` the hook asked for; a malformed entry is a runtime bug, so it raises."""
        self._waiting.extend((int(call_id), str(op), list(args)) for call_id, op, args in calls)
        if len(self._waiting) + len(self._running) > 1:
            self._launch()

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
        return _to_json([task.result() for task in done])

    async def finish(self) -> None:
        """The hook has returned: let calls it did not await complete (a `ctx.send` must still happen)."""
        self._launch()
        if self._running:
            await asyncio.gather(*self._running)
            self._running = set()

    def cancel(self) -> None:
        self._waiting.clear()
        for task in self._running:
            task.cancel()
        self._running = set()
