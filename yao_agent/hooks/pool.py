"""Warm V8 contexts per hook file: compiled once, reused, replaced when the file changes.

A file keeps up to `size` contexts, each serving one call at a time, so concurrent runs of the same hook
do not queue behind each other; beyond that a call waits for one to come back — unless it is nested
inside a call of the same file (a hook whose `ctx.call` runs an assistant with the same hook), which
gets a context of its own, since waiting there could never end.

A change is seen by the file's mtime, size and inode, checked on every call. A write within the clock's
granularity of the previous one can leave all three unchanged, so until the file is older than
`RACY_S`, its bytes are compared too (git's "racy" check).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import BIND_JS, ENTRY_JS, FUNCTIONS, RUNTIME_JS, hook_script
from yao_agent.hooks.engine import Budget, JsEngine, ScriptFailure, ScriptOutOfMemory, ScriptTimeout
from yao_agent.jsonvalue import as_list

RACY_S = 1.0
RUNTIME_BUDGET_S = 5.0

# The hook files whose calls enclose the current task (a `ctx.call` runs its child in a task of ours).
_ENCLOSING: ContextVar[frozenset[Path]] = ContextVar("yao_agent_hook_files", default=frozenset())


@dataclass(frozen=True)
class Version:
    """One content of a hook file, as loaded."""

    number: int
    stamp: tuple[int, int, int]
    raw: bytes
    source: str
    lines: int


@dataclass
class Loaded:
    """What loading a version into a context found: the type of each hook function (`undefined` if absent)."""

    kinds: dict[str, str] = field(default_factory=dict[str, str])
    error: HookError | None = None  # a syntax error or top-level throw: the same bytes fail the same way


class HookFile:
    """The warm contexts of one hook file, all on one event loop."""

    def __init__(self, path: Path, shown: str, size: int) -> None:
        self.path = path
        self.shown = shown
        self.size = size
        self.loop = asyncio.get_running_loop()
        self.version = Version(0, (0, 0, 0), b"", "", 0)  # nothing read yet: the first refresh reads
        self.loaded: Loaded | None = None
        self._idle: list[JsEngine] = []
        self._versions: dict[JsEngine, int] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def _read(self, number: int, function: str) -> Version:
        try:
            st = os.stat(self.path)  # before reading: a write in between shows as a change next time
            raw = self.path.read_bytes()
        except OSError as exc:
            raise _unreadable(exc, self.shown, function) from None
        source = raw.decode("utf-8", errors="replace")
        return Version(number, (st.st_mtime_ns, st.st_size, st.st_ino), raw, source, len(source.splitlines()))

    def refresh(self, function: str) -> None:
        """Pick up a change on disk: later calls get contexts with the new content."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise _unreadable(exc, self.shown, function) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        current = self.version
        if stamp == current.stamp and (time.time_ns() - st.st_mtime_ns > RACY_S * 1e9 or self._same_bytes()):
            return
        self.version = self._read(current.number + 1, function)
        self.loaded = None
        for engine in self._idle:
            self._discard(engine)
        self._idle.clear()

    def _same_bytes(self) -> bool:
        try:
            return self.path.read_bytes() == self.version.raw
        except OSError:
            return False

    def idle(self) -> JsEngine | None:
        """A warm context of the current version, if one is free (no await: the common case)."""
        return self._idle.pop() if self._idle else None

    async def acquire(self, function: str, policy: HookPolicy) -> JsEngine:
        """A context with the current version loaded, for this caller alone until `release`."""
        while True:
            if self._idle:
                return self._idle.pop()
            if len(self._versions) < self.size or self.path in _ENCLOSING.get():
                return await self._new_engine(function, policy)
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            await waiter

    def release(self, engine: JsEngine) -> None:
        if engine.broken or self._versions.get(engine) != self.version.number or len(self._idle) >= self.size:
            self._discard(engine)
        else:
            self._idle.append(engine)
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break

    def enter(self) -> object:
        """Mark the current task as inside a call of this file (see `_ENCLOSING`); returns the token to `leave`."""
        return _ENCLOSING.set(_ENCLOSING.get() | {self.path})

    def leave(self, token: object) -> None:
        _ENCLOSING.reset(token)  # pyright: ignore[reportArgumentType]

    async def _new_engine(self, function: str, policy: HookPolicy) -> JsEngine:
        version = self.version
        if self.loaded is not None and self.loaded.error is not None:
            raise _again(self.loaded.error, function)
        engine = JsEngine()
        self._versions[engine] = version.number
        try:
            engine.set_memory_limit(policy.memory_mb)
            await engine.run([RUNTIME_JS], Budget(RUNTIME_BUDGET_S))
            engine.bind_entry(ENTRY_JS)
            kinds = await self._load(engine, version, function, policy.timeout_ms)
        except BaseException:
            self._discard(engine)
            raise
        engine.kinds = kinds
        if version is self.version:
            self.loaded = Loaded(kinds)
        return engine

    async def _load(self, engine: JsEngine, version: Version, function: str, timeout_ms: int) -> dict[str, str]:
        budget = Budget(timeout_ms / 1000)
        try:
            found = await engine.run([hook_script(version.source), BIND_JS], budget)
        except ScriptFailure as exc:
            error = errors.from_load(exc.text, file=self.shown, function=function, lines=version.lines)
            if version is self.version:
                self.loaded = Loaded(error=error)
            raise error from None
        except ScriptTimeout:
            raise errors.timed_out(timeout_ms, file=self.shown, function=function) from None
        except ScriptOutOfMemory:
            raise errors.out_of_memory(engine.memory_limit_mb, file=self.shown, function=function) from None
        return dict(zip(FUNCTIONS, (str(kind) for kind in as_list(json.loads(found))), strict=True))

    def _discard(self, engine: JsEngine) -> None:
        self._versions.pop(engine, None)
        engine.close()
        self._wake()

    def close(self) -> None:
        for engine in list(self._versions):
            engine.close()
        self._versions.clear()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        self._waiters.clear()


def _unreadable(exc: OSError, shown: str, function: str) -> HookError:
    return HookError(f"hook file cannot be read: {exc.strerror or exc}", file=shown, function=function)


def _again(error: HookError, function: str) -> HookError:
    return HookError(error.message, file=error.file, line=error.line, function=function)
