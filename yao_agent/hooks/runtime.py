"""Running a hook function: `HookRunner.call(source, shown, "Create", args, ctx, policy)` → `HookCall`.

One warm call of a hook that uses no `ctx` method is one string into V8 and one string back (see
`bridge`). A hook that awaits `ctx` methods goes round: V8 answers with the calls it made, the host
performs them, delivers the results and asks again, until the hook's promise settles. While the host
performs them the call holds no worker (`leases.py`): its context waits in its worker, and the call
takes that worker back to deliver the results.

Limits come from the assistant's `HookPolicy`. `timeout_ms` bounds the JavaScript's own running time in
one call (waiting for a `ctx.call` child run does not count: that run has its own limits); a context
that timed out or ran out of memory is thrown away and the next call gets a fresh one.

The JavaScript runs in worker processes (`procs.py`). A warm context belongs to one hook text (an app
version's, `pool.py`) and one tenant — the caller's team, or the user for a caller without a team — so
what a hook keeps in its globals never reaches another tenant's calls, and a run never meets another
version's code.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

from yao_agent import settings
from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.dsl.specs import HookPolicy, HookSource
from yao_agent.errors import HookError, UsageError
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import FUNCTIONS, POLL, deliver_request, run_request
from yao_agent.hooks.engine import Budget, JsEngine, ScriptCrash, ScriptFailure, ScriptOutOfMemory, ScriptTimeout
from yao_agent.hooks.host import MAX_DEPTH, HookContext, HostCalls, TooManyCalls
from yao_agent.hooks.leases import Lease, Workers
from yao_agent.hooks.pool import HookFile, Loads
from yao_agent.hooks.procs import Worker, WorkerLost

__all__ = ["HookCall", "HookContext", "HookRunner"]

WORKERS_ENV = settings.HOOK_WORKERS  # how many worker processes run hooks (nested calls get extras)
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


def default_workers() -> int:
    """`YAO_AGENT_HOOK_WORKERS`, else one per core, 2 to 4: each process holds one call at a time."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return max(2, min(4, os.cpu_count() or 2))


class ContextKey(NamedTuple):
    """What a warm context holds: one hook text (by its digest) of one file (as the app names it; two files
    alike keep their globals apart), for one tenant."""

    digest: str
    file: str
    tenant: tuple[str, str]


def tenant_of(snapshot: Mapping[str, object]) -> tuple[str, str]:
    """Whose hook state a call may see, and whose share of the workers it uses: the caller's team, else
    the caller (a user without a team)."""
    team = snapshot.get("team_id")
    return ("team", str(team)) if team else ("user", str(snapshot.get("user_id")))


class HookRunner:
    """Runs hook functions in warm, sandboxed V8 contexts; one runner serves every hook file of an app."""

    def __init__(self, workers: int | None = None) -> None:
        self._size = workers if workers is not None else default_workers()
        self._files: dict[Path, HookFile] = {}
        self._loads = Loads()
        self._pool: Workers | None = None

    async def call(
        self,
        hook: HookSource | Path,
        shown: str,
        function: str,
        args: Sequence[Any],
        ctx: HookContext,
        policy: HookPolicy,
    ) -> HookCall:
        """Call `function(ctx, *args)` of the hook — the text an app version loaded, or the file at a path as
        it is now; a failure raises `HookError` naming `shown`."""
        if function not in FUNCTIONS:
            raise UsageError(f"a hook function is one of {', '.join(FUNCTIONS)}, not {function!r}")
        pool = self._workers()
        source = hook if isinstance(hook, HookSource) else self._file(hook, shown).current(function)
        loaded = self._loads.found(source, shown)
        if loaded is not None and loaded.error is None and loaded.kinds.get(function) == "undefined":
            return _ABSENT
        snapshot_json = _to_json(ctx.snapshot)
        args_json = _to_json(args if isinstance(args, list | tuple) else list(args))
        tenant = tenant_of(ctx.snapshot)
        key = ContextKey(source.digest, shown, tenant)
        worker = pool.idle(key, tenant) or await _acquire(pool, key, tenant, shown, function)
        lease = Lease(pool, worker, tenant)
        engine: JsEngine | None = None
        try:
            engine = await self._engine(worker, key, source, shown, function, policy)
            call = _Call(shown, function, policy)
            return await _call_in(engine, lease, call, snapshot_json, args_json, ctx)
        finally:
            lease.end()
            if engine is not None:
                _put_back(worker, key, engine)

    async def _engine(
        self, worker: Worker, key: ContextKey, source: HookSource, shown: str, function: str, policy: HookPolicy
    ) -> JsEngine:
        """The warm context for `key` in `worker`, or a new one with `source` loaded; the call's alone until
        `_put_back` (a context in use is no warm context another call or the LRU may take)."""
        found = worker.take(key)
        if isinstance(found, JsEngine) and not found.broken:
            return found
        if found is not None:
            found.close()
        return await self._loads.load(worker, source, shown, function, policy)

    def _workers(self) -> Workers:
        """The processes of the running loop; those started on another (now gone) loop are stopped."""
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.loop is not loop:
            if pool is not None:
                _close_elsewhere(pool)
                self._files.clear()
            pool = self._pool = Workers(self._size)
        return pool

    def _file(self, path: Path, shown: str) -> HookFile:
        hook = self._files.get(path)
        if hook is None or hook.shown != shown:
            hook = self._files[path] = HookFile(path, shown)
        return hook

    async def aclose(self) -> None:
        """Stop every worker. The runner can still be used afterwards; it starts cold."""
        pool, self._pool = self._pool, None
        self._files.clear()
        if pool is None:
            return
        if pool.loop is asyncio.get_running_loop():
            await pool.aclose()
        else:
            _close_elsewhere(pool)


def _close_elsewhere(pool: Workers) -> None:
    """Stop a pool of another loop: on that loop if it still runs (in another thread), else here."""
    if pool.loop.is_running() and not pool.loop.is_closed():
        pool.loop.call_soon_threadsafe(pool.close_now)
    else:
        pool.close_now()


async def _acquire(pool: Workers, key: ContextKey, tenant: tuple[str, str], shown: str, function: str) -> Worker:
    try:
        return await pool.acquire(key, tenant)
    except WorkerLost as exc:
        raise HookError(f"the hook runtime could not be started: {exc.detail}", file=shown,
                        function=function) from None  # fmt: skip


def _put_back(worker: Worker, key: ContextKey, engine: JsEngine) -> None:
    """Keep a context warm for the next call of its text and tenant, unless it cannot serve again."""
    if engine.broken:
        engine.close()
    else:
        worker.keep(key, engine)


async def _call_in(engine: JsEngine, lease: Lease, call: _Call, snapshot: str, args: str, ctx: HookContext) -> HookCall:
    """The call proper, on a context that is this caller's alone."""
    function = call.function
    kind = engine.kinds.get(function, "undefined")
    if kind == "undefined":
        return _ABSENT
    if kind != "function":
        raise HookError(f"{function} is defined but is not a function (it is a {kind})", file=call.shown,
                        function=function)  # fmt: skip
    engine.set_memory_limit(call.policy.memory_mb)
    answer = await _script(engine, [run_request(function, snapshot, args)], call)
    if answer[:1] == "R":  # the common case: a plain function that used no ctx method
        return HookCall(defined=True, value=_decode(answer[1:], call))
    token = lease.pool.enter()  # only ctx calls can start a child run, whose hooks must not wait for room
    try:
        return HookCall(defined=True, value=await _converse(engine, lease, answer, ctx, call))
    finally:
        lease.pool.leave(token)


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
    except ScriptCrash as exc:
        raise errors.crashed(exc.detail, call.policy.memory_mb, file=call.shown, function=call.function) from None


async def _converse(engine: JsEngine, lease: Lease, answer: str, ctx: HookContext, call: _Call) -> Any:
    """Perform the hook's `ctx` calls and hand results back until it settles; its value, or its error.

    Every call the hook made is performed even if it did not await it, and even if it then threw (a
    `ctx.log` just before a `throw` is how an author debugs); only a timeout, an overflow or a
    cancellation abandons calls still running. The worker is let go while the host works.
    """
    host = HostCalls(ctx)
    try:
        state, body = await _until_settled(engine, lease, answer, host, call)
        lease.let_go()
        await host.finish()
    except TooManyCalls as exc:
        host.cancel()
        raise HookError(exc.message, file=call.shown, function=call.function) from None
    except WorkerLost as exc:
        host.cancel()
        raise errors.lost_while_waiting(exc.detail, file=call.shown, function=call.function) from None
    except BaseException:
        host.cancel()
        raise
    if state == "E":
        raise errors.from_report(body, file=call.shown, function=call.function)
    return body


async def _until_settled(engine: JsEngine, lease: Lease, answer: str, host: HostCalls, call: _Call) -> tuple[str, Any]:
    """Go round until the hook's promise settles.

    While calls are running, the next step waits for one (without the worker), delivers it and polls, in
    one round trip; with none running, one poll shows what the promise's continuations did; if it is
    still pending after that, nothing will ever wake it.
    """
    polled = False
    state, calls, body = _parse(answer, call)
    host.start(calls)
    while state == "P":
        if host.pending:
            requests = [deliver_request(await lease.away(host.next_results())), POLL]
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
    """The runtime only answers JSON, unless the hook replaced built-ins it relies on (Array.prototype.join…).

    A value nested deeper than `MAX_DEPTH` is refused here, where it enters the server: Python's own JSON
    handling recurses, and a hook returning ten thousand nested arrays would otherwise fail the run with
    an internal error, here or wherever the value is written next.
    """
    try:
        value = json.loads(text)
    except ValueError:
        raise HookError("the hook's answer could not be read: did it replace a JavaScript built-in?",
                        file=call.shown, function=call.function) from None  # fmt: skip
    except RecursionError:
        value = _TOO_DEEP
    # An envelope (`M{...}`) adds three levels around a ctx call's arguments.
    if value is _TOO_DEEP or (text.count("[") + text.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH + 3):
        raise HookError(f"the hook gave a value nested more than {MAX_DEPTH} levels deep (the limit)",
                        file=call.shown, function=call.function) from None  # fmt: skip
    return value


_TOO_DEEP = object()


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (without recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[Any] = list(cast(dict[str, Any], item).values())
        elif isinstance(item, list):
            children = cast(list[Any], item)
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH + 3:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest
