"""Hook texts and loading them into contexts: what a call runs, compiled once per context.

A call names its hook by a `HookSource`: the text an app version read and checked, which that version's
runs compile whatever the file on disk says meanwhile (CONTRACT §8.4). A caller without a loaded app
(a test, a tool) may name a path instead: `HookFile` reads it, and reads it again when it changes.
Either way a context is made for one text, known by its digest, so a context made for one text can never
be taken for another; the contexts live in worker processes (`procs.py`).

A file's change is seen by its mtime, size and inode, checked on every call. A write within the clock's
granularity of the previous one can leave all three unchanged, so until the file is older than
`RACY_S`, its bytes are compared too (git's "racy" check).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from yao_agent.base.files import MAX_HOOK_BYTES, read_regular
from yao_agent.base.jsonvalue import as_list
from yao_agent.dsl.specs import HookPolicy, HookSource
from yao_agent.errors import HookError
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import BIND_JS, ENTRY_JS, FUNCTIONS, RUNTIME_JS, hook_script
from yao_agent.hooks.engine import Budget, JsEngine, ScriptCrash, ScriptFailure, ScriptOutOfMemory, ScriptTimeout
from yao_agent.hooks.procs import Worker
from yao_agent.hooks.typescript import Stripper

RACY_S = 1.0
RUNTIME_BUDGET_S = 5.0
MAX_REMEMBERED = 1024  # texts whose loading is remembered; past that the memory starts again (it is a cache)


class HookFile:
    """One hook file on disk, for callers that name a path: its current text."""

    def __init__(self, path: Path, shown: str) -> None:
        self.path = path
        self.shown = shown
        self.stamp = (0, 0, 0)
        self.raw = b""
        self.source: HookSource | None = None  # nothing read yet: the first call reads

    def current(self, function: str) -> HookSource:
        """The file's text as it is now (read again only when it changed)."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise _unreadable(exc, self.shown, function) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        fresh = stamp == self.stamp and (time.time_ns() - st.st_mtime_ns > RACY_S * 1e9 or self._same_bytes())
        if self.source is None or not fresh:
            try:
                # A FIFO in its place must not block the server. The stat was before the read: a write in
                # between shows as a change next time.
                self.raw = read_regular(self.path, MAX_HOOK_BYTES)
            except OSError as exc:
                raise _unreadable(exc, self.shown, function) from None
            self.stamp = stamp
            self.source = HookSource.of(self.raw.decode("utf-8", errors="replace"))
        return self.source

    def _same_bytes(self) -> bool:
        try:
            return read_regular(self.path, MAX_HOOK_BYTES) == self.raw
        except OSError:
            return False


@dataclass
class Loaded:
    """What loading a text into a context found: the type of each hook function (`undefined` if absent)."""

    kinds: dict[str, str] = field(default_factory=dict[str, str])
    error: HookError | None = None  # a syntax error or top-level throw: the same text fails the same way


class Loads:
    """Loading texts into new contexts, and what each text's loading found (by digest and shown name)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Loaded] = {}
        self._typescript = Stripper()  # `.ts` texts, their types removed (in the workers), once per version

    def found(self, source: HookSource, shown: str) -> Loaded | None:
        return self._found.get((source.digest, shown))

    def _remember(self, source: HookSource, shown: str, loaded: Loaded) -> None:
        if len(self._found) >= MAX_REMEMBERED:
            self._found.clear()
        self._found[(source.digest, shown)] = loaded

    async def load(self, worker: Worker, source: HookSource, shown: str, function: str, policy: HookPolicy) -> JsEngine:
        """A new context in `worker` with `source` loaded (the caller keeps or closes it)."""
        known = self.found(source, shown)
        if known is not None and known.error is not None:
            raise _again(known.error, function)
        try:
            text = await self._typescript.javascript(worker, source, shown, function)
        except HookError as error:  # a syntax error: the same text fails the same way
            self._remember(source, shown, Loaded(error=error))
            raise
        engine = JsEngine(worker)
        try:
            engine.set_memory_limit(policy.memory_mb)
            engine.kinds = await self._load(engine, source, text, shown, function, policy)
        except BaseException:
            engine.close()
            raise
        self._remember(source, shown, Loaded(engine.kinds))
        return engine

    async def _load(
        self, engine: JsEngine, source: HookSource, text: str, shown: str, function: str, policy: HookPolicy
    ) -> dict[str, str]:
        """The runtime, then the text (`source`'s JavaScript) as its own script; what V8 reports as the
        call's `HookError`."""
        budget = Budget(policy.timeout_ms / 1000)
        try:
            await engine.run([RUNTIME_JS], Budget(RUNTIME_BUDGET_S))
            await engine.bind_entry(ENTRY_JS)
            found = await engine.run([hook_script(text), BIND_JS], budget)
        except ScriptFailure as exc:
            lines = len(source.text.splitlines())
            error = errors.from_load(exc.text, file=shown, function=function, lines=lines)
            self._remember(source, shown, Loaded(error=error))
            raise error from None
        except ScriptTimeout:
            raise errors.timed_out(policy.timeout_ms, file=shown, function=function) from None
        except ScriptOutOfMemory:
            raise errors.out_of_memory(policy.memory_mb, file=shown, function=function) from None
        except ScriptCrash as exc:
            raise errors.crashed(exc.detail, policy.memory_mb, file=shown, function=function) from None
        return dict(zip(FUNCTIONS, (str(kind) for kind in as_list(json.loads(found))), strict=True))


def _unreadable(exc: OSError, shown: str, function: str) -> HookError:
    return HookError(f"hook file cannot be read: {exc.strerror or exc}", file=shown, function=function)


def _again(error: HookError, function: str) -> HookError:
    return HookError(error.message, file=error.file, line=error.line, function=function)
