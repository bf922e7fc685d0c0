"""Running a hook function: `HookRunner.call(path, shown, "Create", args, ctx, policy)` → `HookCall`.

One warm call of a hook that uses no `ctx` method is one string into V8 and one string back (see
`bridge`). A hook that awaits `ctx` methods goes round: V8 answers with the calls it made, the host
performs them, delivers the results and asks again, until the hook's promise settles.

Limits come from the assistant's `HookPolicy`. `timeout_ms` bounds the JavaScript's own running time in
one call (waiting for a `ctx.call` child run does not count: that run has its own limits); a context
that timed out or ran out of memory is thrown away and the next call gets a fresh one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError, UsageError
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import FUNCTIONS, POLL, deliver_request, run_request
from yao_agent.hooks.engine import Budget, JsEngine, ScriptFailure, ScriptOutOfMemory, ScriptTimeout
from yao_agent.hooks.host import HookContext, HostCalls, TooManyCalls
from yao_agent.hooks.pool import HookFile
from yao_agent.jsonvalue import as_list, as_mapping

__all__ = ["HookCall", "HookContext", "HookRunner"]

DEFAULT_CONTEXTS_PER_FILE = 2
# Compact (less to copy into V8) and strict: NaN has no JSON form, and V8's JSON.parse would reject it.
_to_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False).encode


@dataclass(frozen=True)
class HookCall:
    """What a call gave: a file without the function is not an error, so the caller can tell it apart."""

    defined: bool  # False when the file defines no such function (not an error)
    value: Any  # the JSON-decoded return value (None for null/undefined)


_ABSENT = HookCall(defined=False, value=None)


class _Call:
    """One call in progress: where errors point and how long its JavaScript may run."""

    __slots__ = ("budget", "function", "policy", "shown")

    def __init__(self, shown: str, function: str, policy: HookPolicy) -> None:
        self.shown = shown
        self.function = function
        self.policy = policy
        self.budget = Budget(policy.timeout_ms / 1000)


class HookRunner:
    """Runs hook functions in warm, sandboxed V8 contexts; one runner serves every hook file of an app."""

    def __init__(self, contexts_per_file: int = DEFAULT_CONTEXTS_PER_FILE) -> None:
        self._contexts_per_file = max(1, contexts_per_file)
        self._files: dict[Path, HookFile] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def call(
        self, path: Path, shown: str, function: str, args: Sequence[Any], ctx: HookContext, policy: HookPolicy
    ) -> HookCall:
        """Call `function(ctx, *args)` of the hook file at `path`; a failure raises `HookError` naming `shown`."""
        if function not in FUNCTIONS:
            raise UsageError(f"a hook function is one of {', '.join(FUNCTIONS)}, not {function!r}")
        hook = self._file(path, shown)
        hook.refresh(function)
        loaded = hook.loaded
        if loaded is not None and loaded.error is None and loaded.kinds.get(function) == "undefined":
            return _ABSENT
        snapshot_json = _to_json(ctx.snapshot)
        args_json = _to_json(args if isinstance(args, list | tuple) else list(args))
        engine = hook.idle() or await hook.acquire(function, policy)
        try:
            return await _call_in(engine, hook, function, snapshot_json, args_json, ctx, policy)
        finally:
            hook.release(engine)

    def _file(self, path: Path, shown: str) -> HookFile:
        """The file's contexts on the running loop; those made on another (now gone) loop are dropped."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._close_files()
            self._loop = loop
        hook = self._files.get(path)
        if hook is None or hook.shown != shown:
            if hook is not None:
                hook.close()
            hook = self._files[path] = HookFile(path, shown, self._contexts_per_file)
        return hook

    async def aclose(self) -> None:
        """Free every context. The runner can still be used afterwards; it starts cold."""
        self._close_files()

    def _close_files(self) -> None:
        for hook in self._files.values():
            hook.close()
        self._files.clear()


async def _call_in(
    engine: JsEngine, hook: HookFile, function: str, snapshot: str, args: str, ctx: HookContext, policy: HookPolicy
) -> HookCall:
    """The call proper, on a context of the current version that is this caller's alone."""
    kind = engine.kinds.get(function, "undefined")
    if kind == "undefined":
        return _ABSENT
    if kind != "function":
        raise HookError(f"{function} is defined but is not a function (it is a {kind})", file=hook.shown,
                        function=function)  # fmt: skip
    engine.set_memory_limit(policy.memory_mb)
    call = _Call(hook.shown, function, policy)
    answer = await _script(engine, [run_request(function, snapshot, args)], call)
    if answer[:1] == "R":  # the common case: a plain function that used no ctx method
        return HookCall(defined=True, value=_decode(answer[1:], call))
    token = hook.enter()  # only ctx calls can start a child run that calls this file again
    try:
        return HookCall(defined=True, value=await _converse(engine, answer, ctx, call))
    finally:
        hook.leave(token)


async def _script(engine: JsEngine, requests: list[str], call: _Call) -> str:
    """Hand requests to the runtime for one call; V8's failures become the call's `HookError`."""
    try:
        return await engine.call(requests, call.budget)
    except ScriptTimeout:
        raise errors.timed_out(call.policy.timeout_ms, file=call.shown, function=call.function) from None
    except ScriptOutOfMemory:
        raise errors.out_of_memory(call.policy.memory_mb, file=call.shown, function=call.function) from None
    except ScriptFailure as exc:
        raise HookError(errors.short(exc.text), file=call.shown, function=call.function) from None


async def _converse(engine: JsEngine, answer: str, ctx: HookContext, call: _Call) -> Any:
    """Perform the hook's `ctx` calls and hand results back until it settles; its value, or its error.

    Every call the hook made is performed even if it did not await it, and even if it then threw (a
    `ctx.log` just before a `throw` is how an author debugs); only a timeout, an overflow or a
    cancellation abandons calls still running.
    """
    host = HostCalls(ctx)
    try:
        state, body = await _until_settled(engine, answer, host, call)
        await host.finish()
    except TooManyCalls as exc:
        host.cancel()
        raise HookError(exc.message, file=call.shown, function=call.function) from None
    except BaseException:
        host.cancel()
        if engine.out_of_memory():
            engine.broken = True
            raise errors.out_of_memory(call.policy.memory_mb, file=call.shown, function=call.function) from None
        raise
    if state == "E":
        raise errors.from_report(body, file=call.shown, function=call.function)
    return body


async def _until_settled(engine: JsEngine, answer: str, host: HostCalls, call: _Call) -> tuple[str, Any]:
    """Go round until the hook's promise settles.

    While calls are running, the next step waits for one, delivers it and polls, in one round trip; with
    none running, one poll shows what the promise's continuations did; if it is still pending after that,
    nothing will ever wake it.
    """
    polled = False
    state, calls, body = _parse(answer, call)
    host.start(calls)
    while state == "P":
        if host.pending:
            requests = [deliver_request(await host.next_results()), POLL]
        elif not polled:
            requests = [POLL]
        else:
            raise HookError(f"{call.function} returned a promise that can never settle (it awaits nothing the "
                            "host is doing)", file=call.shown, function=call.function)  # fmt: skip
        state, calls, body = _parse(await _script(engine, requests, call), call)
        host.start(calls)
        polled = True
    return state, body


def _parse(answer: str, call: _Call) -> tuple[str, list[Any], Any]:
    """(state, ctx calls to perform, value or error) from one of the runtime's answers."""
    tag = answer[:1]
    if tag == "M":
        envelope = as_mapping(_decode(answer[1:], call))
        return str(envelope.get("state")), as_list(envelope.get("calls")), envelope.get("body")
    if tag == "P":
        return "P", [], None
    return tag, [], _decode(answer[1:], call)


def _decode(text: str, call: _Call) -> Any:
    """The runtime only answers JSON, unless the hook replaced built-ins it relies on (Array.prototype.join…)."""
    try:
        return json.loads(text)
    except ValueError:
        raise HookError("the hook's answer could not be read: did it replace a JavaScript built-in?",
                        file=call.shown, function=call.function) from None  # fmt: skip
