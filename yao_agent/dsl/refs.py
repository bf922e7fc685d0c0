"""Cross-references between an app's files: every id one file names must exist in another.

Like `checks`, these read raw YAML values and skip parts of the wrong shape, so references are
checked even in files that have other mistakes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from yao_agent.base.files import MAX_HOOK_BYTES, read_regular
from yao_agent.errors import Problem

from .checks import items, mapping
from .envvars import ENV_PATTERN
from .source import Document
from .source import Path as YamlPath
from .specs import APPROVE_ALL, DEFAULT_ROLE, ROLE_PREFIX

HOOK_SUFFIXES = (".js", ".ts")  # a .ts hook's types are removed before V8 runs it (hooks/typescript.py)

# Literal values a hook may return; checked so a typo surfaces at load rather than mid-run.
_HOOK_PRESET = re.compile(r"""\bprompt_preset\s*:\s*["']([^"'\n]+)["']""")
_HOOK_CONNECTOR = re.compile(r"""\bconnector\s*:\s*["']([^"'\n]+)["']""")


def known_list(ids: Collection[str], limit: int = 15) -> str:
    names = sorted(ids)
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f", … {len(names) - limit} more" if len(names) > limit else "")


# What an error a tenant can provoke may list: only ids that tenant may use, and only a few of them, so
# that no error becomes a way to read the app's inventory.
HANDFUL = 5


def choices(name: str, known: Collection[str], limit: int = 15) -> str:
    """`(did you mean 'x'? known: a, b, x)`: the close match first, since it is usually the fix."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"({hint}known: {known_list(known, limit)})"


def unknown(kind: str, name: str, known: Collection[str], limit: int = 15) -> str:
    return f"unknown {kind} '{name}' {choices(name, known, limit)}"


def missing_tool(server: str, tool: str, known: Collection[str]) -> str:
    return f"server '{server}' has no tool '{tool}' {choices(tool, known)}"


@dataclass(frozen=True)
class Known:
    """Every id defined by a file, valid or not (one broken file must not cascade), and the roles."""

    connectors: frozenset[str]
    mcps: frozenset[str]
    roles: frozenset[str]
    knowledge: frozenset[str] = frozenset()
    assistants: frozenset[str] = frozenset()
    local: frozenset[str] = frozenset()  # the `type: local` connectors: they embed, and cannot chat
    local_in_roles: Mapping[str, str] = field(default_factory=dict[str, str])  # role → a local connector it names


def check_roles(doc: Document | None, known: Known) -> list[Problem]:
    problems: list[Problem] = []
    if doc is None:
        return problems
    roles = mapping(mapping(doc.value).get("roles"))
    for role, chain in roles.items():
        entries: list[tuple[int | None, Any]] = [*items(chain)] if isinstance(chain, list) else [(None, chain)]  # pyright: ignore[reportUnknownArgumentType]
        for index, connector in entries:
            path = ("roles", role) if index is None else ("roles", role, index)
            if isinstance(connector, str) and connector not in known.connectors and not ENV_PATTERN.search(connector):
                problems.append(doc.problem(path, unknown("connector", connector, known.connectors)))
            elif role == DEFAULT_ROLE and isinstance(connector, str) and connector in known.local:
                said = f"connector '{connector}' is type: local and only serves embeddings, while role '{role}'"
                problems.append(doc.problem(path, f"{said} answers chats (expected a connector that can chat)"))
    return problems


def check_assistant(doc: Document, root: Path, known: Known, read: dict[Path, str] | None = None) -> list[Problem]:
    """Its references to other files; the text of its hook file goes into `read` (path → text)."""
    data = mapping(doc.value)
    problems = connector_ref(doc, data.get("connector", ROLE_PREFIX + DEFAULT_ROLE), known)
    problems += chat_target(doc, data.get("connector"), known, ("connector",))
    summarizer = mapping(data.get("context")).get("summarize_with")
    if summarizer is not None:
        problems += connector_ref(doc, summarizer, known, ("context", "summarize_with"))
        problems += chat_target(doc, summarizer, known, ("context", "summarize_with"))
    problems += _hook_ref(doc, data, root, known, {} if read is None else read)
    seen: set[str] = set()
    for index, entry in items(mapping(data.get("mcp")).get("servers")):
        server = entry if isinstance(entry, str) else mapping(entry).get("server")
        if not isinstance(server, str):
            continue
        path = ("mcp", "servers", index)
        if server not in known.mcps:
            problems.append(doc.problem(path, unknown("MCP server", server, known.mcps)))
        elif server in seen:
            problems.append(doc.problem(path, f"MCP server '{server}' is listed twice (expected each once)"))
        seen.add(server)
        problems += _approved_offered(doc, path, mapping(entry))
    return problems


def _approved_offered(doc: Document, path: YamlPath, entry: Mapping[str, Any]) -> list[Problem]:
    """A tool to approve must be one the entry offers: one its `tools` leave out is never called."""
    tools = entry.get("tools")
    if not isinstance(tools, list):
        return []
    offered = [t for t in cast(list[Any], tools) if isinstance(t, str)]
    said = f"is not among this entry's tools ({', '.join(offered)}); a tool to approve must be offered"
    return [
        doc.problem((*path, "approve", number), f"'{tool}' {said}")
        for number, tool in items(entry.get("approve"))
        if isinstance(tool, str) and tool != APPROVE_ALL and tool not in offered
    ]


def connector_ref(doc: Document, value: object, known: Known, path: YamlPath = ("connector",)) -> list[Problem]:
    if not isinstance(value, str) or ENV_PATTERN.search(value):
        return []  # wrong type: the schema said so; `$ENV`: resolved when used
    if value.startswith(ROLE_PREFIX):
        role = value.removeprefix(ROLE_PREFIX)
        if not role:
            return [doc.problem(path, "empty role after use:: (expected use::<role>, e.g. use::default)")]
        return _role_warning(doc, role, known, path)
    if value not in known.connectors:
        return [doc.problem(path, unknown("connector", value, known.connectors))]
    return []


def chat_target(doc: Document, value: object, known: Known, path: YamlPath) -> list[Problem]:
    """A connector (or `use::role`) that is to answer a chat must be able to: a `type: local` one only embeds."""
    if not isinstance(value, str):
        return []
    expected = "expected a connector that can chat"
    if value in known.local:
        return [doc.problem(path, f"connector '{value}' is type: local and only serves embeddings ({expected})")]
    local = known.local_in_roles.get(value.removeprefix(ROLE_PREFIX)) if value.startswith(ROLE_PREFIX) else None
    if local is not None:
        role = value.removeprefix(ROLE_PREFIX)
        said = f"role '{role}' names connector '{local}', which is type: local and only serves embeddings"
        return [doc.problem(path, f"{said} ({expected})")]
    return []


def _role_warning(doc: Document, role: str, known: Known, path: YamlPath) -> list[Problem]:
    if role in known.roles:
        return []
    if DEFAULT_ROLE in known.roles:
        message = (
            f"role '{role}' is not defined in app.yml: runs use role '{DEFAULT_ROLE}' "
            "unless a team or user role setting defines it"
        )
    else:
        message = (
            f"role '{role}' is not defined in app.yml (nor is '{DEFAULT_ROLE}'): "
            "a team or user role setting must provide it at run time"
        )
    return [doc.problem(path, message, warning=True)]


def _hook_ref(doc: Document, data: Mapping[str, Any], root: Path, known: Known, read: dict[Path, str]) -> list[Problem]:
    hook = data.get("hook")
    found = locate_hook(root, hook)
    if isinstance(found, str):
        return [doc.problem(("hook",), found)]
    if found is None:
        return []
    read[found[0]] = found[1]  # read once: what is checked here is what the app's runs compile
    presets = frozenset(mapping(data.get("prompt_presets")))
    return _scan_hook(str(hook), found[1], presets, known)


def locate_hook(root: Path, hook: object) -> tuple[Path, str] | str | None:
    """The hook file an assistant names and its text; what is wrong with the reference; or None (no hook,
    or a value of the wrong shape, which the schema reports)."""
    if not isinstance(hook, str) or not hook.endswith(HOOK_SUFFIXES):
        return None
    target = root / hook
    try:
        inside = target.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop; ValueError: a NUL in the path
        inside = False
    if not inside:
        return f"hook file '{hook}' is outside the app (expected a path under the app)"
    try:
        found, there = target.is_file(), target.exists()
    except OSError as exc:  # e.g. a name longer than the file system allows
        return f"hook file '{hook}' cannot be used: {exc.strerror} (expected a .js or .ts file)"
    if there and not found:  # a folder, a FIFO, a socket: never read (a FIFO would block the read)
        return f"hook file '{hook}' is not a regular file (expected a .js or .ts file)"
    if not found:
        hooks = sorted(p.relative_to(root).as_posix() for p in (root / "hooks").glob("*.[jt]s"))
        return f"hook file not found: {hook} (known: {known_list(hooks)})"
    try:
        return target, read_regular(target, MAX_HOOK_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"hook file cannot be read: {type(exc).__name__} (expected UTF-8 JavaScript or TypeScript)"


def _scan_hook(hook: str, source: str, presets: frozenset[str], known: Known) -> list[Problem]:
    """Warn about literal preset and connector names in the hook that cannot resolve."""
    out: list[Problem] = []
    for number, text in enumerate(source.split("\n"), start=1):
        for name in _HOOK_PRESET.findall(text):
            if name not in presets:
                out.append(Problem(hook, number, "", unknown("prompt preset", name, presets), warning=True))
        for name in _HOOK_CONNECTOR.findall(text):
            if name.startswith(ROLE_PREFIX) or ENV_PATTERN.search(name) or name in known.connectors:
                continue
            out.append(Problem(hook, number, "", unknown("connector", name, known.connectors), warning=True))
    return out


def check_mcp_prefixes(files: Mapping[str, str]) -> list[Problem]:
    """Two server ids that differ only by '.' vs '_' would give their tools the same names."""
    seen: dict[str, str] = {}
    problems: list[Problem] = []
    for server_id, rel in sorted(files.items()):
        prefix = server_id.replace(".", "_")
        if prefix in seen:
            message = f"MCP server id '{server_id}' gives its tools the prefix '{prefix}__' as '{seen[prefix]}' does"
            problems.append(Problem(rel, 0, "", message + " (expected distinct ids)"))
        seen[prefix] = server_id
    return problems
