"""What the model is offered: one `ToolSpec` per MCP tool, named `<prefix>__<tool>`, filtered per assistant."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.dsl.specs import McpServerSpec

log = logging.getLogger("yao_agent.tools")

SEPARATOR = "__"
# OpenAI-compatible providers reject function names outside this pattern.
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model sees it, and where to run it.

    `parameters` is left out of the hash (a dict is unhashable) but kept in equality, so specs can key
    caches and a tool whose schema changed is a different spec.
    """

    name: str
    server: str
    tool: str
    description: str
    parameters: dict[str, Any] = field(hash=False)

    def to_openai(self) -> dict[str, Any]:
        """The chat-completions `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def tool_name(server: McpServerSpec, tool: str) -> str:
    return f"{server.tool_prefix}{SEPARATOR}{tool}"


def make_spec(server: McpServerSpec, tool: str, description: str | None, schema: Mapping[str, Any]) -> ToolSpec:
    """A `ToolSpec` for one listed tool; warns when a provider would refuse its name."""
    name = tool_name(server, tool)
    if not _PROVIDER_NAME.fullmatch(name):
        log.warning(
            "MCP server '%s' (%s): tool name '%s' is not accepted by OpenAI-compatible providers "
            "(letters, digits, '_' and '-', at most 64 characters)",
            server.id,
            server.file,
            name,
        )
    parameters: dict[str, Any] = dict(schema) if schema else {"type": "object", "properties": {}}
    return ToolSpec(name=name, server=server.id, tool=tool, description=description or "", parameters=parameters)


def stored(spec: ToolSpec) -> dict[str, Any]:
    """A tool as the store keeps it (store/replay.py): its name on its server, not its prefixed name."""
    return {"tool": spec.tool, "description": spec.description, "parameters": spec.parameters}


def from_stored(server: McpServerSpec, kept: Sequence[Mapping[str, Any]]) -> list[ToolSpec]:
    """The tools a server offered when it was last listed, named as the app names them now."""
    specs: list[ToolSpec] = []
    for tool in kept:
        name, description = tool.get("tool"), tool.get("description")
        if isinstance(name, str) and name:
            specs.append(make_spec(server, name, description if isinstance(description, str) else None,
                                   as_mapping(tool.get("parameters"))))  # fmt: skip
    return specs


def select(
    server: McpServerSpec, specs: Sequence[ToolSpec], wanted: Iterable[str] | None, warned: set[tuple[str, str]]
) -> list[ToolSpec]:
    """The server's tools an assistant asked for, in the server's order.

    A name the server does not have is logged once per server and name (`warned` remembers), since the
    same assistant asks again on every run.
    """
    if wanted is None:
        return list(specs)
    names = set(wanted)
    known = {spec.tool for spec in specs}
    for missing in sorted(names - known):
        if (server.id, missing) not in warned:
            warned.add((server.id, missing))
            offered = ", ".join(sorted(known)) or "none"
            log.warning(
                "MCP server '%s' (%s) has no tool '%s' (it offers: %s)", server.id, server.file, missing, offered
            )
    return [spec for spec in specs if spec.tool in names]


def find(name: str, offered: Sequence[ToolSpec]) -> ToolSpec | None:
    """The offered tool the model named, if any: a model may only call what it was offered."""
    for spec in offered:
        if spec.name == name:
            return spec
    return None
