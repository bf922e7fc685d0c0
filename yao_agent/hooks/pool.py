"""Hook files as loaded: each version read once, compiled into contexts on demand, reloaded on change.

The contexts live in worker processes (`procs.py`), one per version of a file and tenant in each
worker that served it; `load` makes one. A version's number is unique in the process, so a context
made for one can never be taken for another.

A change is seen by the file's mtime, size and inode, checked on every call. A write within the clock's
granularity of the previous one can leave all three unchanged, so until the file is older than
`RACY_S`, its bytes are compared too (git's "racy" check).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.files import MAX_HOOK_BYTES, read_regular
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import BIND_JS, ENTRY_JS, FUNCTIONS, RUNTIME_JS, hook_script
from yao_agent.hooks.engine import Budget, JsEngine, ScriptCrash, ScriptFailure, ScriptOutOfMemory, ScriptTimeout
from yao_agent.hooks.procs import Worker
from yao_agent.jsonvalue import as_list

RACY_S = 1.0
RUNTIME_BUDGET_S = 5.0
_numbers = itertools.count(1)


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
    """One hook file: its current version and what loading it found."""

    def __init__(self, path: Path, shown: str) -> None:
        self.path = path
        self.shown = shown
        self.version = Version(0, (0, 0, 0), b"", "", 0)  # nothing read yet: the first refresh reads
        self.loaded: Loaded | None = None

    def _read(self, function: str) -> Version:
        try:
            st = os.stat(self.path)  # before reading: a write in between shows as a change next time
            raw = read_regular(self.path, MAX_HOOK_BYTES)  # a FIFO in its place must not block the server
        except OSError as exc:
            raise _unreadable(exc, self.shown, function) from None
        source = raw.decode("utf-8", errors="replace")
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        return Version(next(_numbers), stamp, raw, source, len(source.splitlines()))

    def refresh(self, function: str) -> bool:
        """Pick up a change on disk (later calls get contexts with the new content); whether there was one."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise _unreadable(exc, self.shown, function) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        current = self.version
        if stamp == current.stamp and (time.time_ns() - st.st_mtime_ns > RACY_S * 1e9 or self._same_bytes()):
            return False
        self.version = self._read(function)
        self.loaded = None
        return True

    def _same_bytes(self) -> bool:
        try:
            return read_regular(self.path, MAX_HOOK_BYTES) == self.version.raw
        except OSError:
            return False

    async def load(self, worker: Worker, function: str, policy: HookPolicy) -> JsEngine:
        """A new context in `worker` with the current version loaded (the caller keeps or closes it)."""
        version = self.version
        if self.loaded is not None and self.loaded.error is not None:
            raise _again(self.loaded.error, function)
        engine = JsEngine(worker)
        try:
            engine.set_memory_limit(policy.memory_mb)
            kinds = await self._load(engine, version, function, policy)
        except BaseException:
            engine.close()
            raise
        engine.kinds = kinds
        if version is self.version:
            self.loaded = Loaded(kinds)
        return engine

    async def _load(self, engine: JsEngine, version: Version, function: str, policy: HookPolicy) -> dict[str, str]:
        """The runtime, then the file as its own script; what V8 reports as the call's `HookError`."""
        budget = Budget(policy.timeout_ms / 1000)
        try:
            await engine.run([RUNTIME_JS], Budget(RUNTIME_BUDGET_S))
            await engine.bind_entry(ENTRY_JS)
            found = await engine.run([hook_script(version.source), BIND_JS], budget)
        except ScriptFailure as exc:
            error = errors.from_load(exc.text, file=self.shown, function=function, lines=version.lines)
            if version is self.version:
                self.loaded = Loaded(error=error)
            raise error from None
        except ScriptTimeout:
            raise errors.timed_out(policy.timeout_ms, file=self.shown, function=function) from None
        except ScriptOutOfMemory:
            raise errors.out_of_memory(policy.memory_mb, file=self.shown, function=function) from None
        except ScriptCrash as exc:
            raise errors.crashed(exc.detail, policy.memory_mb, file=self.shown, function=function) from None
        return dict(zip(FUNCTIONS, (str(kind) for kind in as_list(json.loads(found))), strict=True))


def _unreadable(exc: OSError, shown: str, function: str) -> HookError:
    return HookError(f"hook file cannot be read: {exc.strerror or exc}", file=shown, function=function)


def _again(error: HookError, function: str) -> HookError:
    return HookError(error.message, file=error.file, line=error.line, function=function)
