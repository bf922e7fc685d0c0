"""Checks that need more than reading the files: hooks loaded in V8, MCP servers asked for their tools.

`yao-agent validate` loads every hook file; `validate --mcp` also starts the MCP servers the assistants
use and checks their tool filters against the tools each server lists, then stops them. It is given to
`dsl.check_app` by the CLI (the app's files are read there; running their code is this module's, above
`dsl`, `hooks` and `tools`). V8 and the MCP SDK are imported only when there is something to check.

Like `refs`, this reads raw YAML values and skips parts of the wrong shape: a hook or a filter is
checked even when its assistant has other mistakes. An MCP server file with mistakes is not started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from yao_agent.dsl import build, refs
from yao_agent.dsl.checks import items, mapping
from yao_agent.dsl.discover import Found
from yao_agent.dsl.source import Document
from yao_agent.dsl.source import Path as YamlPath
from yao_agent.dsl.specs import APPROVE_ALL, HookPolicy, HookSource, McpServerSpec, McpUse
from yao_agent.errors import Problem, ToolError

if TYPE_CHECKING:
    from yao_agent.tools.manager import ToolManager


@dataclass
class _HookUse:
    """One hook file and the most any assistant using it allows its load."""

    shown: str  # as the first assistant that uses it names it
    text: str  # as the loader read it
    timeout_ms: int
    memory_mb: int


@dataclass(frozen=True)
class _Filter:
    """One tool an assistant's `mcp.servers` entry names."""

    doc: Document
    path: YamlPath
    server: str
    tool: str


@dataclass
class _McpUses:
    servers: dict[str, McpServerSpec] = field(default_factory=dict[str, McpServerSpec])
    filters: list[_Filter] = field(default_factory=list[_Filter])


def probe(
    root: Path,
    docs: Mapping[Found, Document],
    texts: Mapping[Path, str],
    *,
    hooks: bool,
    mcp: bool,
    trusted: Set[str] = frozenset(),
) -> list[Problem]:
    """The problems found by loading hooks (`hooks`: each file's text as the loader read it, except those
    whose digest is `trusted`, checked already) and asking MCP servers (`mcp`). Call outside an event loop."""
    hook_files = _hook_files(root, docs, texts, trusted) if hooks else {}
    uses = _mcp_uses(root, docs) if mcp else _McpUses()
    if not hook_files and not uses.servers:
        return []
    return asyncio.run(_probe(root, hook_files, uses))


async def _probe(root: Path, hook_files: dict[Path, _HookUse], uses: _McpUses) -> list[Problem]:
    # The servers start while the hooks load: each side mostly waits for another process or thread.
    servers = asyncio.create_task(_check_servers(root, uses)) if uses.servers else None
    problems = await _check_hooks(hook_files) if hook_files else []
    if servers is not None:
        problems += await servers
    return problems


def _hook_files(
    root: Path, docs: Mapping[Found, Document], texts: Mapping[Path, str], trusted: Set[str]
) -> dict[Path, _HookUse]:
    """Each hook file once, however many assistants use it or however they spell its path."""
    files: dict[Path, _HookUse] = {}
    for item, doc in docs.items():
        if item.kind != "assistant":
            continue
        data = mapping(doc.value)
        hook = data.get("hook")
        text = texts.get(root / hook) if isinstance(hook, str) else None
        if text is None or HookSource.of(text).digest in trusted:
            continue  # no hook, a reference `refs` reports, or a text checked already
        # A file with mistakes may hold any value here: its limits are then the defaults.
        policy = HookPolicy() if doc.problems else HookPolicy(**mapping(data.get("hook_policy")))
        key = (root / str(hook)).resolve()
        use = files.get(key)
        if use is None:
            files[key] = _HookUse(str(hook), text, policy.timeout_ms, policy.memory_mb)
        else:
            use.timeout_ms = max(use.timeout_ms, policy.timeout_ms)
            use.memory_mb = max(use.memory_mb, policy.memory_mb)
    return files


async def _check_hooks(files: dict[Path, _HookUse]) -> list[Problem]:
    from yao_agent.hooks.check import check_hook_source

    problems: list[Problem] = []
    for use in files.values():  # one at a time: a context each, freed before the next
        policy = HookPolicy(timeout_ms=use.timeout_ms, memory_mb=use.memory_mb)
        problems += await check_hook_source(use.text, use.shown, policy)
    return problems


def _mcp_uses(root: Path, docs: Mapping[Found, Document]) -> _McpUses:
    """The servers assistants use (those whose files are valid) and every tool their filters name."""
    specs = {f.id: build.build_mcp(f.id, d, root) for f, d in docs.items() if f.kind == "mcp" and not d.problems}
    uses = _McpUses()
    for item, doc in docs.items():
        if item.kind != "assistant":
            continue
        for index, entry in items(mapping(mapping(doc.value).get("mcp")).get("servers")):
            server = entry if isinstance(entry, str) else mapping(entry).get("server")
            if not isinstance(server, str) or server not in specs:
                continue  # an unknown server: `refs` reports it
            uses.servers[server] = specs[server]
            for key in ("tools", "approve"):  # both name the server's tools (`approve: all` names none)
                for number, tool in items(mapping(entry).get(key)):
                    if isinstance(tool, str) and tool != APPROVE_ALL:
                        path = ("mcp", "servers", index, key, number)
                        uses.filters.append(_Filter(doc, path, server, tool))
    return uses


async def _check_servers(root: Path, uses: _McpUses) -> list[Problem]:
    from yao_agent.tools.manager import ToolManager

    async with ToolManager(uses.servers, root=root) as manager:
        listed = await asyncio.gather(*(_tool_names(manager, spec) for spec in uses.servers.values()))
    problems = [found for found in listed if isinstance(found, Problem)]
    tools = {spec.id: found for spec, found in zip(uses.servers.values(), listed, strict=True)}
    for use in uses.filters:
        known = tools[use.server]
        if isinstance(known, frozenset) and use.tool not in known:
            problems.append(use.doc.problem(use.path, refs.missing_tool(use.server, use.tool, known)))
    return problems


async def _tool_names(manager: ToolManager, spec: McpServerSpec) -> frozenset[str] | Problem:
    """The names of the server's tools, or why it could not be asked (never a traceback)."""
    try:
        offered = await manager.tools_for([McpUse(spec.id)])
    except ToolError as exc:
        # The problem names the server's file already; the manager's message names it again.
        return Problem(spec.file, 0, "", exc.message.replace(f" ({spec.file})", "", 1))
    return frozenset(tool.tool for tool in offered)
