"""The tools assistants use: MCP servers from `mcps/*.yml`, offered to the model as `<prefix>__<tool>`.

One manager serves every run of a process. Servers start on first use and stay up; a call's arguments
are checked here before any server sees them, and every failure comes back as a `ToolOutcome` that says
whether the model may correct the call (`retryable`) or the run must end.

Importing this module stays cheap: the MCP SDK is imported when the first server is used.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from yao_agent.dsl.specs import McpServerSpec, McpUse
from yao_agent.errors import ToolError
from yao_agent.tools import catalog
from yao_agent.tools.catalog import ToolSpec
from yao_agent.tools.outcome import DEFAULT_MAX_CHARS, ToolOutcome, failure
from yao_agent.tools.validate import ArgumentChecker, ArgumentError, parse_arguments

if TYPE_CHECKING:
    from yao_agent.tools.connection import ServerLink

IN_PROCESS_FILE = "<in-process>"
log = logging.getLogger("yao_agent.tools")
# Told what a server offers each time it is listed (a start, a restart): the store keeps it for replays.
Listed = Callable[[str, Sequence[ToolSpec]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Offer:
    """What a run may call: the tools of the servers that answered, and why the others could not."""

    tools: list[ToolSpec]
    unavailable: Mapping[str, str] = field(default_factory=dict[str, str])  # server id → what went wrong


class Tools(Protocol):
    """What a run asks of its tools: `ToolManager` runs MCP servers; a replay serves stored results."""

    async def offer(self, uses: Sequence[McpUse]) -> Offer: ...

    def find(self, name: str, offered: Sequence[ToolSpec]) -> ToolSpec | None: ...

    def locate(self, name: str) -> ToolSpec | None: ...

    def server_of(self, tool_name: str) -> str | None: ...

    async def call(self, spec: ToolSpec, arguments: str) -> ToolOutcome: ...

    def warm(self, uses: Sequence[McpUse]) -> None: ...

    async def aclose(self) -> None: ...


class ToolManager:
    """Lists, checks and runs MCP tools for every run of this process; `aclose` stops the servers."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSpec],
        *,
        root: Path,
        environ: Mapping[str, str] | None = None,
        in_process: Mapping[str, Any] | None = None,
        max_result_chars: int = DEFAULT_MAX_CHARS,
        on_listed: Listed | None = None,
    ) -> None:
        self._on_listed = on_listed
        self._told: dict[str, Sequence[ToolSpec]] = {}  # the listing `on_listed` was last given, per server
        self._in_process = dict(in_process or {})
        self._specs = dict(servers)
        for server_id in self._in_process:
            self._specs.setdefault(server_id, McpServerSpec(id=server_id, file=IN_PROCESS_FILE))
        self._root = root
        self._environ = environ
        self._max_chars = max_result_chars
        self._links: dict[str, ServerLink] = {}
        self._checker = ArgumentChecker()
        self._warned: set[tuple[str, str]] = set()
        self._closed = False

    async def __aenter__(self) -> ToolManager:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def tools_for(self, uses: Sequence[McpUse]) -> list[ToolSpec]:
        """The tools of `uses`, starting their servers (in parallel) if needed; a `ToolError` naming the
        server when one cannot be started or reached."""
        offer = await self.offer(uses)
        for message in offer.unavailable.values():
            raise ToolError(message)
        return offer.tools

    async def offer(self, uses: Sequence[McpUse]) -> Offer:
        """The tools an assistant offers the model, starting its servers (in parallel) if needed.

        A server that cannot be started or reached is left out and named, with why, in `unavailable`:
        one broken server must not fail runs that would call none of its tools. (An unknown server id
        is a `ToolError`: the app is wrong, not the server.)
        """
        links = [(use, self._link(use.server)) for use in uses]
        cold = {link.spec.id: link for _, link in links if link.catalogue is None}
        unavailable: dict[str, str] = {}
        if cold:
            results = await asyncio.gather(*(link.tools() for link in cold.values()), return_exceptions=True)
            for server_id, result in zip(cold, results, strict=True):
                if isinstance(result, ToolError):
                    unavailable[server_id] = result.message
                elif isinstance(result, BaseException):
                    raise result
        offered: dict[str, ToolSpec] = {}
        for use, link in links:
            if link.spec.id not in unavailable and link.catalogue is not None:
                for spec in catalog.select(link.spec, link.catalogue, use.tools, self._warned):
                    offered.setdefault(spec.name, spec)
        if self._on_listed is not None:
            await self._tell_listed([link for _, link in links])
        return Offer(list(offered.values()), unavailable)

    async def _tell_listed(self, links: Sequence[ServerLink]) -> None:
        """Pass on each listing not passed on yet (a server listed in the background by `warm` too); never
        fails the run: keeping it is for a later replay."""
        assert self._on_listed is not None
        for link in links:
            listed = link.catalogue
            if listed is None or self._told.get(link.spec.id) is listed:
                continue
            self._told[link.spec.id] = listed
            try:
                await self._on_listed(link.spec.id, listed)
            except Exception as exc:
                log.warning("MCP server '%s': its tools could not be kept for replays: %s", link.spec.id, exc)

    def server_of(self, tool_name: str) -> str | None:
        """The id of the server whose tools are named like `tool_name` (`<prefix>__<tool>`), if any."""
        prefix = tool_name.partition("__")[0]
        return next((spec.id for spec in self._specs.values() if spec.tool_prefix == prefix), None)

    async def call(self, spec: ToolSpec, arguments: str) -> ToolOutcome:
        """Run one tool call the model made; `arguments` is the JSON text it wrote. Never raises but
        for cancellation, which reaches the server as a cancelled request."""
        try:
            link = self._link(spec.server)
        except ToolError as exc:
            return failure(exc.message, retryable=False)
        try:
            parsed = parse_arguments(arguments)
            self._checker.check(spec, parsed)
        except ArgumentError as exc:
            return failure(str(exc), retryable=True)
        return await link.call(spec.tool, parsed)

    def find(self, name: str, offered: Sequence[ToolSpec]) -> ToolSpec | None:
        """The offered tool the model named, or None: a model may only call what it was offered."""
        return catalog.find(name, offered)

    def locate(self, name: str) -> ToolSpec | None:
        """The tool called `name` on any server listed so far: to say which server a stored call was for."""
        for link in self._links.values():
            spec = catalog.find(name, link.catalogue or ())
            if spec is not None:
                return spec
        return None

    def warm(self, uses: Sequence[McpUse]) -> None:
        """Start the servers of `uses` that never started, without waiting for them.

        The first `tools_for` waits for the same start and reports its failure, so a server that
        cannot start is launched once, not once here and again for the run.
        """
        for use in uses:
            try:
                link = self._link(use.server)
            except ToolError:
                continue  # an unknown server: left for the run to report
            link.warm()

    async def aclose(self) -> None:
        """Close every session and stop every subprocess; the manager refuses new work afterwards."""
        self._closed = True
        links = list(self._links.values())
        self._links.clear()
        await asyncio.gather(*(link.aclose() for link in links))

    def _link(self, server_id: str) -> ServerLink:
        if self._closed:
            raise ToolError("the tool manager is closed")
        link = self._links.get(server_id)
        if link is None:
            spec = self._specs.get(server_id)
            if spec is None:
                known = ", ".join(sorted(self._specs)) or "none"
                raise ToolError(f"unknown MCP server '{server_id}' (known: {known})")
            from yao_agent.tools.connection import ServerLink

            link = ServerLink(
                spec,
                root=self._root,
                environ=self._environ,
                in_process=self._in_process.get(server_id),
                max_result_chars=self._max_chars,
            )
            self._links[server_id] = link
        return link
