"""What a run reaches outside itself, in one place, each part with its production default.

Only dependencies live here: the app, the store, the engines, hooks and tools, the clock, ids and
sleep. The runs in flight (admission, leases, handles) are the service's `Process` (yao_agent/service/process.py).
Tests build a `Runtime` with their own store, engines, clock, ids or sleep; nothing is patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from yao_agent import settings
from yao_agent.connectors import Cooldowns, Engines, RetryPolicy, resolve_connectors
from yao_agent.connectors.providers import resolve_endpoint
from yao_agent.dsl import App, load_app
from yao_agent.errors import ModelError
from yao_agent.hooks import HookRunner
from yao_agent.identity import Identity
from yao_agent.ids import IdSource, RandomIds
from yao_agent.knowledge.library import Library
from yao_agent.store import SqlStore, Store, open_engine, store_url
from yao_agent.tools import ToolManager, Tools, ToolSpec
from yao_agent.tools.catalog import stored

Sleep = Callable[[float], Awaitable[None]]
# A run whose process is on another host is presumed dead when its heartbeat is this old.
STALE_AFTER_S = 60.0
_BOOT = secrets.token_hex(4)  # tells this process from an earlier one that had the same pid


def process_owner() -> str:
    return f"{socket.gethostname()}|{os.getpid()}|{_BOOT}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but whose parent has not yet collected it still answers `kill(pid, 0)`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # not Linux, or gone meanwhile
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def owner_is_dead(owner: str, heartbeat_at: float, now: float | None = None) -> bool:
    """Whether the process that owns a `running` run is gone, so the run can be marked interrupted."""
    host, _, rest = owner.partition("|")
    pid_text, _, boot = rest.partition("|")
    if host == socket.gethostname() and pid_text.isdigit():
        pid = int(pid_text)
        if pid == os.getpid():
            return boot != _BOOT
        return not _pid_alive(pid)
    return (now if now is not None else time.time()) - heartbeat_at > STALE_AFTER_S


def tool_manager(app: App, environ: Mapping[str, str] | None, store: Store) -> ToolManager:
    """The MCP servers of `app`; what each offers, when listed, is kept in `store` for replays."""

    async def keep(server_id: str, tools: Sequence[ToolSpec]) -> None:
        await store.save_tool_catalog(server_id, [stored(t) for t in tools])

    return ToolManager(app.mcps, root=app.root, environ=environ, on_listed=keep)


@dataclass(eq=False)  # one bundle per process (or test): compared, and hashed, by identity
class Runtime:
    app: App
    store: Store  # what the runs need of a store, and what the services ask it (store/protocol.py)
    engines: Engines = field(default_factory=Engines)
    hooks: HookRunner = field(default_factory=HookRunner)
    # The MCP tool manager; by default one for the app's `mcps/` servers (built in __post_init__).
    tools: Tools = field(default=None)  # pyright: ignore[reportAssignmentType]
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Sleep = asyncio.sleep
    ids: IdSource = field(default_factory=RandomIds)
    environ: Mapping[str, str] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Connectors that failed lately, skipped by fallback chains (on the `monotonic` clock by default).
    cooldowns: Cooldowns = field(default=None)  # pyright: ignore[reportAssignmentType]
    owner: str = field(default_factory=process_owner)  # this process, as the runs it stores name it
    # The knowledge service: collections, documents and searches (built in __post_init__ on the store).
    knowledge: Library = field(default=None)  # pyright: ignore[reportAssignmentType]

    def __post_init__(self) -> None:
        if self.cooldowns is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.cooldowns = Cooldowns(self.monotonic)
        if self.tools is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.tools = tool_manager(self.app, self.environ, self.store)
        if self.knowledge is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.knowledge = Library(self.app, self.store, self.engines, self.store, ids=self.ids, clock=self.clock,
                                     environ=self.environ)  # fmt: skip

    @classmethod
    async def open(cls, app_dir: str | Path, *, db: str | None = None) -> Runtime:
        """Load the app and open its store (migrating it): `db`, else $YAO_AGENT_DB, else app.yml's `store`."""
        app = load_app(app_dir)
        return cls(app=app, store=SqlStore(await open_engine(store_url(settings.store(db, app), app.root))))

    async def prepare(self, assistant_id: str, identity: Identity) -> None:
        """Load the engines an assistant's connectors need now, so the first run does not pay for it.

        (litellm alone takes seconds to import.) Resolution errors are left for the run to report.
        """
        assistant = self.app.assistant(assistant_id)
        self.tools.warm(assistant.mcp.servers)  # its MCP servers start meanwhile; the run waits for them
        with contextlib.suppress(ModelError):
            found = await resolve_connectors(assistant.connector, self.app, identity, self.store, self.environ)
            for connector in found.connectors:
                with contextlib.suppress(ModelError):  # a connector whose key is not set will not be called
                    resolve_endpoint(connector, self.environ)
                    self.engines.get(connector)

    async def aclose(self) -> None:
        """Close the engines, hooks, tools and the store (the runs using them are `Runs.aclose`'s to end first)."""
        # Each is closed whatever the one before did (the stack runs them last-in first-out, every one): a
        # store left open when a tool server failed to stop would leave its connections to the collector.
        async with AsyncExitStack() as closing:
            closing.push_async_callback(self.store.aclose)
            closing.push_async_callback(self.tools.aclose)
            closing.push_async_callback(self.hooks.aclose)
            closing.push_async_callback(self.engines.aclose)
