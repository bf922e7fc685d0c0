"""Who may use which hook worker when: the pool of worker processes of one event loop, shared fairly.

A worker runs one request at a time, so a call holds it — a lease — only while its JavaScript runs.
While the hook waits for the host (`ctx.call`, `ctx.memory`, any `ctx` method), its call lets the
worker go: the context stays in that process, suspended, and other calls use the worker meanwhile.
When the host's results are in, the call takes that same worker back (`Lease.away`). So a slow
`ctx.call` holds no worker, and a hook's `ctx.call` reaching another hook never waits for its caller.

At most `size` processes run. When every worker is busy, callers queue, and a worker given back goes
to the waiter whose tenant (team, or user without a team) holds the fewest workers at that moment,
the longest waiting among equals: a tenant with many calls in flight is served after one with none, so
no tenant holds more than its share while others wait. A worker is never left idle while anyone waits.

A worker is preferably given to a call whose tenant already has contexts in it, or to one where no
other tenant's calls are suspended: when a process dies (a hook V8 cannot survive, a deadline overrun)
every call with a context in it fails, and this keeps that within one tenant as far as it can.

Suspended contexts take memory in their process, so a worker hosts at most `MAX_IN_FLIGHT` calls; a new
call waits for room. A call made from inside a hook's `ctx` call (a child run's hook) never waits for
room: the calls filling the workers may be waiting for it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from yao_agent.hooks.procs import Worker, WorkerLost

T = TypeVar("T")
MAX_IN_FLIGHT = 32  # calls with a context in one worker at once, running or waiting for the host
_NESTED: ContextVar[int] = ContextVar("yao_agent_hook_nesting", default=0)


@dataclass(eq=False)
class _Waiter:
    tenant: Hashable
    key: Hashable  # the context it would like warm (a new call), or None
    pinned: Worker | None  # the worker it must have: its context is there (a call coming back from the host)
    order: int
    nested: bool  # made inside a hook's ctx call: needs no room (see the module's docstring)
    future: asyncio.Future[Worker] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Workers:
    """The worker processes of one event loop, leased fairly between tenants."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.loop = asyncio.get_running_loop()
        self._all: list[Worker] = []  # until reaped, retired ones included
        self._queue: list[_Waiter] = []
        self._held: dict[Hashable, int] = {}  # tenant → workers it holds now
        self._orders = itertools.count()
        self._starting: set[asyncio.Task[None]] = set()
        self._spares = 0  # processes starting for the queue

    def idle(self, key: Hashable, tenant: Hashable) -> Worker | None:
        """A free worker leased to `tenant` at once (no await: the common case), preferably one holding
        `key` warm; none while others wait (they are served first)."""
        if self._queue:
            return None
        found = self._free_for(key, tenant, bool(_NESTED.get()))
        if found is not None:
            self._lease(found, tenant)
        return found

    async def acquire(self, key: Hashable, tenant: Hashable) -> Worker:
        """A worker for this caller alone until `release`: a free one, a new one, or its turn in the queue."""
        found = self.idle(key, tenant)
        if found is not None:
            return found
        if not self._queue and self._running() < self.size:
            return await self._spawn(tenant)
        return await self._wait(_Waiter(tenant, key, None, next(self._orders), bool(_NESTED.get())))

    async def resume(self, worker: Worker, tenant: Hashable) -> None:
        """`worker` again for a call whose context is suspended in it; `WorkerLost` if it has died since."""
        if worker.dead:
            raise WorkerLost(worker.ending())
        if not self._queue and worker.leasable:
            self._lease(worker, tenant)
            return
        await self._wait(_Waiter(tenant, None, worker, next(self._orders), True))

    def release(self, worker: Worker, tenant: Hashable) -> None:
        worker.busy = False
        held = self._held.get(tenant, 0) - 1
        if held > 0:
            self._held[tenant] = held
        else:
            self._held.pop(tenant, None)
        if self._queue:
            self._dispatch()

    def _lease(self, worker: Worker, tenant: Hashable) -> None:
        worker.busy = True
        self._held[tenant] = self._held.get(tenant, 0) + 1

    def _free_for(self, key: Hashable, tenant: Hashable, nested: bool) -> Worker | None:
        """The free worker with room a new call of `tenant` should take: one holding `key` warm, else one with
        no other tenant's calls in flight, else the one with the fewest warm contexts."""
        best: Worker | None = None
        best_rank = (True, 0)
        for candidate in self._all:
            if not candidate.leasable or (candidate.in_flight >= MAX_IN_FLIGHT and not nested):
                continue
            if candidate.warm(key):
                return candidate
            rank = (candidate.hosts_other_than(tenant), len(candidate.contexts))
            if best is None or rank < best_rank:
                best, best_rank = candidate, rank
        return best

    async def _wait(self, waiter: _Waiter) -> Worker:
        self._queue.append(waiter)
        self._dispatch()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter in self._queue:
                self._queue.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.release(waiter.future.result(), waiter.tenant)  # handed over just as it was cancelled
            raise

    def _dispatch(self) -> None:
        """Give free workers to waiters, the fairest first (see the module's docstring); start a process
        for a waiter when there is room for one."""
        while self._queue:
            if not self._serve_one():
                return

    def _serve_one(self) -> bool:
        """Serve the fairest waiter that can be served now, or start a process for those waiting for any
        worker; whether anything changed."""
        for waiter in sorted(self._queue, key=lambda w: (self._held.get(w.tenant, 0), w.order)):
            pinned = waiter.pinned
            if pinned is not None and pinned.dead:  # (a worker killed is waited for: its end says why)
                self._queue.remove(waiter)
                waiter.future.set_exception(WorkerLost(pinned.ending()))
                return True
            if pinned is None:
                found = self._free_for(waiter.key, waiter.tenant, waiter.nested)
            else:
                found = pinned if pinned.leasable else None
            if found is not None:
                self._queue.remove(waiter)
                self._lease(found, waiter.tenant)
                waiter.future.set_result(found)
                return True
        fresh = sum(1 for waiter in self._queue if waiter.pinned is None)
        if self._running() < self.size and self._spares < fresh:
            self._start_spare()
            return True
        return False

    def _running(self) -> int:
        return sum(1 for worker in self._all if not (worker.dead or worker.retired))

    def _new(self) -> Worker:
        try:
            made = Worker(self.loop)
        except OSError as exc:  # out of processes, of file descriptors
            raise WorkerLost(f"a process could not be started ({exc.strerror or exc})") from None
        made.on_gone = self._gone
        made.on_drained = self._dispatch
        self._all.append(made)
        return made

    async def _spawn(self, tenant: Hashable) -> Worker:
        """A new process, leased to `tenant` once it is up."""
        made = self._new()
        self._lease(made, tenant)
        try:
            await made.start()
        except BaseException:
            made.close_now()
            self.release(made, tenant)
            raise
        return made

    def _start_spare(self) -> None:
        """Start a process for the queue: the fairest waiter then takes it (or another free one first)."""
        try:
            made = self._new()  # counted as running from now
        except WorkerLost as exc:
            self._fail_one(exc)
            return
        self._spares += 1

        async def start() -> None:
            try:
                await made.start()
                made.busy = False
            except WorkerLost as exc:
                made.close_now()
                self._fail_one(exc)
            except BaseException:
                made.close_now()
                raise
            finally:
                self._spares -= 1
            self._dispatch()

        task = self.loop.create_task(start(), name="start a hook worker")
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    def _fail_one(self, exc: WorkerLost) -> None:
        """A process for the queue could not start: the fairest new call fails (another retry would too)."""
        fresh = [w for w in self._queue if w.pinned is None]
        if fresh:
            waiter = min(fresh, key=lambda w: (self._held.get(w.tenant, 0), w.order))
            self._queue.remove(waiter)
            waiter.future.set_exception(WorkerLost(exc.detail))

    def _gone(self, worker: Worker) -> None:
        if worker in self._all:
            self._all.remove(worker)
        self._dispatch()  # room for a new process, and calls suspended in it fail now

    def hosted_ended(self) -> None:
        """A call has ended: its worker has room for another."""
        if self._queue:
            self._dispatch()

    def enter(self) -> object:
        """Mark the current task as inside a hook's ctx calls (see the module's docstring); the token to `leave`."""
        return _NESTED.set(_NESTED.get() + 1)

    def leave(self, token: object) -> None:
        _NESTED.reset(token)  # pyright: ignore[reportArgumentType]

    def workers(self) -> list[Worker]:
        return list(self._all)

    async def aclose(self) -> None:
        """Kill every process and wait until each is reaped."""
        for task in list(self._starting):
            task.cancel()
        workers = list(self._all)
        for worker in workers:
            worker.kill("the hooks were closed")
        for worker in workers:
            try:
                await asyncio.wait_for(asyncio.shield(worker.exited), 5)
            except TimeoutError:
                worker.close_now()
        self._cancel_waiters()

    def close_now(self) -> None:
        """The same, blocking: for a pool whose event loop is gone or not this one."""
        for task in list(self._starting):
            task.cancel()
        for worker in list(self._all):
            worker.close_now()
        self._all.clear()
        self._cancel_waiters()

    def _cancel_waiters(self) -> None:
        for waiter in self._queue:
            if not waiter.future.done():
                waiter.future.cancel()
        self._queue.clear()


class Lease:
    """One hook call's hold on the worker its context lives in: held while its JavaScript runs, let go
    while the hook waits for the host."""

    __slots__ = ("held", "pool", "tenant", "worker")

    def __init__(self, pool: Workers, worker: Worker, tenant: Hashable) -> None:
        self.pool = pool
        self.worker = worker
        self.tenant = tenant
        self.held = True
        worker.hosting[tenant] = worker.hosting.get(tenant, 0) + 1

    def let_go(self) -> None:
        if self.held:
            self.held = False
            self.pool.release(self.worker, self.tenant)

    async def away(self, work: Awaitable[T]) -> T:
        """`work` (the host's part) without holding the worker; the worker again afterwards (`WorkerLost` if
        it died meanwhile). If `work` fails, the worker is not taken back."""
        self.let_go()
        result = await work
        await self.pool.resume(self.worker, self.tenant)
        self.held = True
        return result

    def end(self) -> None:
        """The call is over: the worker goes back, and the call no longer counts as hosted there."""
        self.let_go()
        left = self.worker.hosting.get(self.tenant, 0) - 1
        if left > 0:
            self.worker.hosting[self.tenant] = left
        else:
            self.worker.hosting.pop(self.tenant, None)
        self.pool.hosted_ended()
