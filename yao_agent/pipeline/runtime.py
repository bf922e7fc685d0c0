"""Everything a run reaches outside itself, in one place, each part with its production default.

Tests build a `Runtime` with their own store, engines, clock, ids or sleep; nothing is patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yao_agent.connectors import Cooldowns, Engines, RetryPolicy, resolve_connectors
from yao_agent.connectors.providers import resolve_endpoint
from yao_agent.dsl import App, load_app
from yao_agent.errors import ModelError, NoActiveRun, NotFound, UsageError
from yao_agent.hooks import HookRunner
from yao_agent.identity import OPERATOR, Identity
from yao_agent.ids import IdSource, RandomIds
from yao_agent.messages import parse_input
from yao_agent.pipeline.admission import Admission
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.leases import TTL_S, PgLease
from yao_agent.tools import ToolManager

if TYPE_CHECKING:
    from yao_agent.pipeline.handle import RunHandle

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
    return True


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


@dataclass
class Runtime:
    app: App
    store: SqlStore
    engines: Engines = field(default_factory=Engines)
    hooks: HookRunner = field(default_factory=HookRunner)
    # The MCP tool manager; by default one for the app's `mcps/` servers (built in __post_init__).
    tools: ToolManager = field(default=None)  # pyright: ignore[reportAssignmentType]
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Sleep = asyncio.sleep
    ids: IdSource = field(default_factory=RandomIds)
    environ: Mapping[str, str] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Connectors that failed lately, skipped by fallback chains (on the `monotonic` clock by default).
    cooldowns: Cooldowns = field(default=None)  # pyright: ignore[reportAssignmentType]
    owner: str = field(default_factory=process_owner)
    admission: Admission = field(default=None)  # pyright: ignore[reportAssignmentType]
    active: dict[str, RunHandle] = field(default_factory=dict[str, "RunHandle"])

    def __post_init__(self) -> None:
        if self.admission is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.admission = Admission(self.clock)
        if self.cooldowns is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.cooldowns = Cooldowns(self.monotonic)
        if self.tools is None:  # pyright: ignore[reportUnnecessaryComparison]
            self.tools = ToolManager(self.app.mcps, root=self.app.root, environ=self.environ)

    @classmethod
    async def open(cls, app_dir: str | Path, *, db: str | None = None, recover: bool = True) -> Runtime:
        """Load the app, open its store (migrating it), and mark runs of dead processes interrupted."""
        app = load_app(app_dir)
        raw = db or os.environ.get("YAO_AGENT_DB") or app.config.store
        store = SqlStore(await open_engine(store_url(raw, app.root)))
        runtime = cls(app=app, store=store)
        await runtime.share_chats()
        if recover:
            await runtime.recover()
        return runtime

    async def share_chats(self) -> None:
        """On PostgreSQL, hold chats with leases and hear other processes' cancels (several servers)."""
        if self.store.db.dialect != "postgresql" or self.admission.lease is not None:
            return
        ttl = float(os.environ.get("YAO_AGENT_LEASE_TTL_S") or TTL_S)  # how long a dead process holds a chat
        lease = PgLease(self.store.db, self.owner, self.admission.cancel_before, clock=self.clock, ttl_s=ttl,
                        on_lost=self.admission.lost)  # fmt: skip
        await lease.start()
        self.admission.lease = lease

    def append(self, identity: Identity, chat_id: str, messages: Any) -> str:
        """Add user messages to the chat's active run: its next model call sees them. Returns its run id.

        A run that is cancelled, or already past its last model call (ending, storing), takes no more
        messages: they would never be answered, so the caller is told (and sends a new request).
        """
        state = self.admission.active_state(chat_id)
        if state is None or state.identity != identity:
            raise NoActiveRun(f"chat '{chat_id}' has no active run in this process to append to")
        given = parse_input(messages, where="messages")
        if any(m["role"] != "user" for m in given):
            raise UsageError("messages: only user messages can be appended to a run")
        if state.run.status != "running" or state.cancel_requested or self.admission.active_cancelled(chat_id):
            raise NoActiveRun(
                f"chat '{chat_id}': its run {state.run_id} is ending and takes no more messages; "
                "send them as a new request (it runs next)"
            )
        state.appended.extend(given)
        return state.run_id

    async def cancel(self, identity: Identity, chat_id: str) -> int:
        """Cancel the chat's active run and every request accepted before now, in every process.

        Returns how many were cancelled: here, and in the other processes that answered (see
        `PgLease.cancel_counted`), so a cancel whose run lives in another process does not say 0.
        """
        if await self.store.check_chat(identity, chat_id) is None and self.admission.active_state(chat_id) is None:
            raise NotFound(f"no chat '{chat_id}'")
        state = self.admission.active_state(chat_id)
        if state is not None and state.identity != identity:
            raise NotFound(f"no chat '{chat_id}'")
        cancelled = self.admission.cancel(chat_id)
        lease = self.admission.lease
        if isinstance(lease, PgLease):
            cancelled += await lease.cancel_counted(chat_id)
        elif lease is not None:
            await lease.cancel_everywhere(chat_id)
        return cancelled

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

    async def recover(self) -> list[str]:
        return await self.store.recover_interrupted(OPERATOR, owner_is_dead)

    async def aclose(self) -> None:
        """Cancel what still runs (each run flushes), then close engines and the store."""
        handles = list(self.active.values())
        for handle in handles:
            handle.cancel()
        for handle in handles:
            with contextlib.suppress(Exception):
                await handle.wait()
        if isinstance(self.admission.lease, PgLease):
            await self.admission.lease.aclose()
        await self.engines.aclose()
        await self.hooks.aclose()
        await self.tools.aclose()
        await self.store.aclose()
