"""One MCP server as this process holds it: started on first use, shared by every run, restarted when it died.

An MCP connection lives in anyio task groups that must be entered and left by the same task, and a
transport failure cancels the task that entered them. So each start of a server gets its own *owner*
task that opens the connection, lists the tools, then waits to be told to stop; runs only send
requests through it, from their own tasks, so a crashed transport never cancels a run.

This module imports the MCP SDK (slow to import); the manager imports it only when a server is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx2
from mcp import Client
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, Tool

from yao_agent import settings
from yao_agent.dsl.specs import McpServerSpec
from yao_agent.errors import EnvVarMissing, ToolError
from yao_agent.tools.catalog import ToolSpec, make_spec
from yao_agent.tools.outcome import DEFAULT_MAX_CHARS, ToolOutcome, failure, from_result
from yao_agent.tools.stderr import StderrPump

log = logging.getLogger("yao_agent.tools")

PYTHON_COMMANDS = frozenset({"python", "python3"})
# Stopping a stdio server may take: 2 s for it to exit on EOF, 2 s after SIGTERM, 2 s to reap a SIGKILL.
STOP_GRACE_S = 8.0
# How long a lost connection may take to show whether the server had exited before the call was sent.
EXIT_NOTICE_S = 0.5
HTTP_READ_TIMEOUT_S = 300.0
MAX_LIST_PAGES = 100


@dataclass(frozen=True)
class _Http:
    url: str
    headers: dict[str, str]


@dataclass(eq=False)
class _Session:
    """One start of a server: the owner task holding the connection open, and what it learnt."""

    stop: asyncio.Event
    ready: asyncio.Future[None]
    pump: StderrPump | None
    owner: asyncio.Task[None] | None = None
    client: Client | None = None
    error: Exception | None = None
    lost: bool = False  # a call saw the connection close
    heard: bool = False  # someone waited for this start (a background start nobody waited for has not)

    def unheard_failure(self) -> bool:
        """A background start failed and nobody has been told: the next caller is, rather than starting again."""
        ready = self.ready
        return not self.heard and ready.done() and not ready.cancelled() and ready.exception() is not None

    def dead(self) -> bool:
        """Whether this start is over: stopped, failed, exited, or its connection closed under a call."""
        if self.lost or self.stop.is_set() or (self.owner is not None and self.owner.done()):
            return True
        if self.pump is not None and self.pump.exited_at is not None:
            return True
        return self.client is not None and _connection_closed(self.client)


class ServerLink:
    """The shared connection to one MCP server; safe to use from many tasks at once."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        root: Path,
        environ: Mapping[str, str] | None = None,
        in_process: Any = None,
        max_result_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self.spec = spec
        self._root = root
        self._environ = environ
        self._in_process = in_process
        self._max_chars = max_result_chars
        self._lock = asyncio.Lock()
        self._session: _Session | None = None
        self.catalogue: list[ToolSpec] | None = None  # the tools of the latest start, kept across restarts
        self._closed = False

    async def tools(self) -> list[ToolSpec]:
        """The server's tools, listed once when it starts."""
        if self.catalogue is None:
            await self._live_session()
        assert self.catalogue is not None
        return self.catalogue

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one tool; a server found dead is restarted, and a call it never saw is sent again once."""
        for last in (False, True):
            outcome = await self._attempt(tool, arguments, last=last)
            if outcome is not None:
                return outcome
            log.info("MCP server '%s' had stopped before the call to '%s'; calling it again", self.spec.id, tool)
        raise AssertionError("unreachable: the last attempt always returns an outcome")

    def warm(self) -> None:
        """Start the server in the background if it never started (nobody is starting it now)."""
        if self._session is None and not self._closed and not self._lock.locked():
            with contextlib.suppress(ToolError):  # (a missing variable): the run's own start reports it
                self._session = self._launch()

    async def aclose(self) -> None:
        """Stop the server (or leave the HTTP one) and wait until it is gone."""
        self._closed = True
        async with self._lock:
            if self._session is not None:
                await _retire(self._session)
                self._session = None

    # -- starting and stopping ------------------------------------------------------------------

    async def _live_session(self) -> _Session:
        """The current session, started (once, however many tasks ask at the same time) if there is none."""
        async with self._lock:
            if self._closed:
                raise ToolError(f"MCP server '{self.spec.id}' is closed: the tool manager was closed")
            session = self._session
            if session is None or (session.dead() and not session.unheard_failure()):
                if session is not None:
                    await _retire(session)
                session = self._session = self._launch()
            session.heard = True
        try:
            await asyncio.shield(session.ready)
        except Exception as exc:
            raise await self._start_error(session, exc) from None
        return session

    def _launch(self) -> _Session:
        target = self._target()
        pump = (
            StderrPump(self.spec.id, asyncio.get_running_loop()) if isinstance(target, StdioServerParameters) else None
        )
        ready = asyncio.get_running_loop().create_future()
        ready.add_done_callback(_retrieve)  # a start nobody waits for any more must not log "never retrieved"
        session = _Session(stop=asyncio.Event(), ready=ready, pump=pump)
        session.owner = asyncio.create_task(self._own(session, target), name=f"mcp server {self.spec.id}")
        return session

    async def _own(self, session: _Session, target: object) -> None:
        """The owner task: open the connection, list the tools, hold it open until told to stop."""
        try:
            async with AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.spec.timeout_s):
                        client = await self._connect(stack, target, session.pump)
                        tools = await _list_tools(client)
                finally:
                    if session.pump is not None:
                        session.pump.release_writer()
                session.client = client
                self.catalogue = [make_spec(self.spec, t.name, t.description, t.input_schema) for t in tools]
                session.ready.set_result(None)
                await session.stop.wait()
        except Exception as exc:
            session.error = exc
            if session.ready.done():
                what = "closing failed" if session.stop.is_set() else "connection lost"
                log.warning("MCP server '%s': %s: %s", self.spec.id, what, _describe(exc))
            else:
                session.ready.set_exception(exc)
        finally:
            if not session.ready.done():
                session.ready.set_exception(ToolError(f"MCP server '{self.spec.id}' was stopped while starting"))

    async def _connect(self, stack: AsyncExitStack, target: object, pump: StderrPump | None) -> Client:
        if isinstance(target, StdioServerParameters):
            assert pump is not None
            return await stack.enter_async_context(Client(stdio_client(target, errlog=pump.writer), cache=None))
        if isinstance(target, _Http):
            timeout = httpx2.Timeout(self.spec.timeout_s, read=HTTP_READ_TIMEOUT_S)
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=target.headers, timeout=timeout))
            transport = streamable_http_client(target.url, http_client=http)
            return await stack.enter_async_context(Client(transport, cache=None))
        return await stack.enter_async_context(Client(target, cache=None))  # pyright: ignore[reportArgumentType]

    def _target(self) -> object:
        """What to connect to, with every `$ENV` resolved now, so a missing variable fails this start."""
        if self._in_process is not None:
            return self._in_process
        spec = self.spec
        try:
            if spec.transport == "http":
                if spec.url is None:
                    raise ToolError(f"MCP server '{spec.id}' ({spec.file}) has no url")
                headers = {key: value.resolve(self._environ) for key, value in spec.headers.items()}
                return _Http(spec.url.resolve(self._environ), headers)
            return self._stdio_parameters()
        except EnvVarMissing as exc:
            verb = "connect" if spec.transport == "http" else "start"
            raise ToolError(f"MCP server '{spec.id}' cannot {verb}: {exc}") from None

    def _stdio_parameters(self) -> StdioServerParameters:
        spec = self.spec
        if spec.command is None:
            raise ToolError(f"MCP server '{spec.id}' ({spec.file}) has no command")
        command = spec.command.resolve(self._environ)
        if command in PYTHON_COMMANDS:
            command = sys.executable  # the interpreter running yao-agent, with its packages
        parent = os.environ if self._environ is None else self._environ
        # Only what a program needs to start (PATH, HOME, ...) and what the server's YAML gives it: never
        # the server's whole environment, which holds every provider's key.
        inherited = {key: parent[key] for key in DEFAULT_INHERITED_ENV_VARS if key in parent}
        env = {**inherited, **{key: value.resolve(self._environ) for key, value in spec.env.items()}}
        args = [arg.resolve(self._environ) for arg in spec.args]
        return StdioServerParameters(command=command, args=args, env=env, cwd=spec.cwd or self._root)

    async def _start_error(self, session: _Session, exc: Exception) -> ToolError:
        """A start failure in words that say which server, and why, as far as we can tell."""
        if isinstance(exc, ToolError):
            return exc
        spec = self.spec
        head = f"MCP server '{spec.id}' ({spec.file})"
        if isinstance(exc, TimeoutError):
            return ToolError(f"{head} did not answer within {spec.timeout_s:g} s of starting")
        if session.pump is not None:
            await session.pump.wait_exit(within=EXIT_NOTICE_S)
            last = session.pump.last_line()
            said = f" (its last words: {last})" if last else ""
            return ToolError(f"{head} could not be started: {_describe(exc)}{said}")
        return ToolError(f"{head} is unreachable: {_describe(exc)}")

    # -- calling ----------------------------------------------------------------------------------

    async def _attempt(self, tool: str, arguments: dict[str, Any], *, last: bool) -> ToolOutcome | None:
        """One try; None means the server had died before the call reached it, so it is safe to resend."""
        try:
            session = await self._live_session()
        except ToolError as exc:
            return failure(exc.message, retryable=False)
        assert session.client is not None
        started = time.monotonic()
        deadline = asyncio.timeout(self.spec.timeout_s)
        try:
            async with deadline:
                result = await session.client.call_tool(tool, arguments)
        except TimeoutError:
            if not deadline.expired():
                raise
            return failure(f"tool timed out after {self.spec.timeout_s:g} s", retryable=False)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return failure(
                    f"MCP server '{self.spec.id}' failed the call to '{tool}': {exc.message}", retryable=False
                )
            session.lost = True
            if not last and await _died_before(session, started):
                return None
            return failure(self._lost_message(tool), retryable=False)
        except Exception as exc:  # one line for the user; the traceback only for a developer who asks
            log.warning("MCP server '%s': the call to '%s' failed: %s", self.spec.id, tool, _describe(exc),
                        exc_info=exc if settings.debug() else None)  # fmt: skip
            return failure(
                f"MCP server '{self.spec.id}' failed the call to '{tool}': {_describe(exc)}", retryable=False
            )
        return self._outcome(tool, from_result(result, self._max_chars))

    def _outcome(self, tool: str, outcome: ToolOutcome) -> ToolOutcome:
        """A server's "unknown tool" is not the model's mistake: its tools changed since they were listed."""
        if outcome.error == f"Unknown tool: {tool}":
            return failure(f"MCP server '{self.spec.id}' has no tool '{tool}' any more", retryable=False)
        return outcome

    def _lost_message(self, tool: str) -> str:
        return (
            f"MCP server '{self.spec.id}' stopped during the call to '{tool}' "
            "(the connection closed); it will be restarted on its next use"
        )


async def _retire(session: _Session) -> None:
    """Tell the owner to close the connection and wait until it has (the subprocess is gone)."""
    session.stop.set()
    owner = session.owner
    if owner is not None and not owner.done():
        done, _ = await asyncio.wait({owner}, timeout=STOP_GRACE_S)
        if not done:
            owner.cancel()
            await asyncio.wait({owner}, timeout=STOP_GRACE_S)
    if session.pump is not None:
        session.pump.release_writer()  # in case the owner never ran far enough to do it


async def _died_before(session: _Session, started: float) -> bool:
    """Whether the server was already gone when the call was sent, so the call never ran."""
    if session.pump is not None:
        exited_at = await session.pump.wait_exit(within=EXIT_NOTICE_S)
        return exited_at is not None and exited_at <= started
    if session.owner is not None:
        await asyncio.wait({session.owner}, timeout=EXIT_NOTICE_S)
    return session.error is not None and isinstance(_leaf(session.error), httpx2.ConnectError)


async def _list_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _connection_closed(client: Client) -> bool:
    """Whether the SDK saw the connection end (a stdio server that exited); it offers no public flag."""
    try:
        session = client.session
    except RuntimeError:
        return True
    dispatcher = getattr(session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups a failed task group raises."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], exc)
        return _leaf(group.exceptions[0]) if group.exceptions else group
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
        return "it closed the connection"
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
