"""Changing the app while it serves (CONTRACT §8.4): watch its files, load a change, serve it if it is valid.

A change that validates becomes the app of every run that starts after it (`Process.adopt`); runs in
flight finish on the version they started with, their hooks included (a version carries the text of
each hook file as it was read and loaded in V8 here: a hook that does not compile is a problem like
bad YAML). A change that does not validate changes nothing: the
last good version keeps serving, and every problem is logged as `file:line …` and kept for
`GET /api/app` until a later load succeeds. SIGHUP loads at once (also what a supervisor of several
workers sends each of them, so that they converge on one version).

What is watched is what the app is made of — `app.yml` beside the folder, `assistants/`, `connectors/`,
`mcps/`, `knowledge/` and the folders of its hooks — never the whole folder: an app folder may also hold a virtual
environment or the SQLite store, whose churn is no change of the app. Only YAML and script files count.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from yao_agent.dsl.loader import Probe, check_app
from yao_agent.errors import Problem, UsageError
from yao_agent.service.probe import probe
from yao_agent.service.runs import Runs
from yao_agent.shapes import AppProblemOut, AppStateOut

log = logging.getLogger("yao_agent.reload")
SUFFIXES = (".yml", ".yaml", ".js", ".mjs", ".cjs", ".ts", ".json")
FOLDERS = ("assistants", "connectors", "mcps", "knowledge")
DEBOUNCE_MS = 200  # an editor's save is often several writes: load once they settle


class Reloader:
    """Loads the app again on a change or on demand, and keeps what the last attempt found wrong."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.root = runs.app.root
        self.errors: list[Problem] = []  # of the last load, when it failed (the previous version serves)
        self.checked_at = time.time()
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    def view(self, shown: Callable[[str], bool] = lambda _file: True) -> AppStateOut:
        """What `GET /api/app` shows: the version serving, since when, and why a newer one is not — the
        problems in the files `shown` admits, and how many others there are."""
        mine = [p for p in self.errors if shown(p.file)]
        return {
            "app_version": self.runs.app.version,
            "loaded_at": _iso(self.runs.process.loaded_at),
            "checked_at": _iso(self.checked_at),
            "errors": [_problem(p) for p in mine],
            "other_errors": len(self.errors) - len(mine),
        }

    async def reload(self, why: str) -> bool:
        """Load the app's files now; serve them if they are valid and differ. Whether the version changed."""
        async with self._lock:  # one load at a time: the newest files win
            try:
                report = await asyncio.to_thread(check_app, self.root, probe=self._probe())
                found, errors = report.app, report.errors
            except UsageError as exc:  # the folder itself is gone or emptied
                found, errors = None, [Problem(str(self.root), 0, "", str(exc))]
            self.checked_at = time.time()
            self.errors = errors
            if found is None:
                for problem in errors:
                    log.error("app not reloaded (%s): %s", why, problem)
                log.warning("still serving app version %s", self.runs.app.version)
                return False
            if found.version == self.runs.app.version:
                log.info("app files read (%s): version %s, unchanged", why, found.version)
                return False
            previous = self.runs.app.version
            self.runs.process.adopt(found)
            log.info("app reloaded (%s): version %s, was %s", why, found.version, previous)
            await self._audited(previous, found.version, why)
            return True

    async def _audited(self, previous: str, version: str, why: str) -> None:
        """The reload in the audit log (once for the deployment: each of its processes reloads). The app is
        no database change, so its row follows it; a store that fails then costs the row, not the reload."""
        try:
            await self.runs.rt.store.audit_reload(previous, version, why)
        except Exception:
            log.exception("the reload to app version %s could not be written to the audit log", version)

    def _probe(self) -> Probe:
        """Hooks are part of the version: each hook text is loaded in V8 as `validate` loads it, except those
        the serving version loaded already (checked then), so a hook that does not compile is held back."""
        served = frozenset(a.hook_source.digest for a in self.runs.app.assistants.values() if a.hook_source)
        return functools.partial(probe, hooks=True, mcp=False, trusted=served)

    def start(self) -> None:
        """Watch the app's files from now on (until `aclose`)."""
        recursive = [p for p in self._folders() if p.is_dir()]
        self._tasks = [asyncio.create_task(self._watch([self.root], recursive=False), name="watch app root")]
        if recursive:
            self._tasks.append(asyncio.create_task(self._watch(recursive, recursive=True), name="watch app"))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    def _folders(self) -> list[Path]:
        hooks = {a.hook_path.parent for a in self.runs.app.assistants.values() if a.hook_path is not None}
        inside = {p for p in hooks if p != self.root and self.root in p.parents}
        return sorted({self.root / name for name in FOLDERS} | inside)

    async def _watch(self, paths: list[Path], *, recursive: bool) -> None:
        from watchfiles import awatch  # pyright: ignore[reportUnknownVariableType]  (only a server imports it)

        while True:
            try:
                async for _ in awatch(*paths, watch_filter=_counts, debounce=DEBOUNCE_MS, recursive=recursive):
                    await self.reload("files changed")
            except asyncio.CancelledError:
                raise
            except Exception:  # a folder removed and made again, a watch limit reached: try again
                log.exception("watching the app's files failed; watching again in 1 s (SIGHUP reloads)")
                await asyncio.sleep(1)


def _counts(_change: object, path: str) -> bool:
    return path.endswith(SUFFIXES)


def _problem(problem: Problem) -> AppProblemOut:
    out: AppProblemOut = {"file": problem.file, "line": problem.line, "message": problem.message, "text": str(problem)}
    if problem.path:
        out["field"] = problem.path
    return out


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
