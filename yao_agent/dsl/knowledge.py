"""An app's knowledge: collections (`knowledge/<path>.yml`) and assistants' `search` blocks, built and
cross-checked (CONTRACT §9.1)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from yao_agent.errors import Problem

from .checks import items, mapping
from .refs import Known, chat_target, connector_ref, unknown
from .source import Document
from .specs import (
    TEAM_COLLECTIONS,
    Access,
    ChunkSettings,
    CollectionSpec,
    SearchMode,
    SearchSettings,
    WebSearch,
)

Data = Mapping[str, Any]


def build_collection(collection_id: str, doc: Document, access: Access) -> CollectionSpec:
    data: Data = doc.value
    chunk = cast(Data, data.get("chunk", {}))
    defaults = ChunkSettings()
    return CollectionSpec(
        id=collection_id,
        file=doc.file,
        name=data["name"],
        sources=tuple(cast(list[str], data.get("sources", []))),
        embedding=data.get("embedding"),
        chunk=ChunkSettings(
            chunk.get("max_tokens", defaults.max_tokens), chunk.get("overlap_tokens", defaults.overlap_tokens)
        ),
        access=access,
    )


def build_search(data: Data | None) -> SearchSettings | None:
    if data is None:
        return None
    mode = data.get("mode", "always")
    web = cast(Data | None, data.get("web"))
    return SearchSettings(
        knowledge=tuple(cast(list[str], data.get("knowledge", []))),
        mode=cast(SearchMode, "off" if mode is False else mode),  # YAML reads a bare `off` as false
        intent_with=data.get("intent_with"),
        top_k=data.get("top_k", 6),
        min_score=float(data.get("min_score", 0.0)),
        web=WebSearch(web["server"], web.get("tool", "search")) if web is not None else None,
        cite=data.get("cite", True),
    )


def check_collection(doc: Document, root: Path, known: Known) -> list[Problem]:
    """Its embedding connector exists; each source is a path inside the app (one not there yet is a
    warning: `kb sync` says so again when it runs)."""
    data = mapping(doc.value)
    problems: list[Problem] = []
    if "embedding" in data:
        problems += connector_ref(doc, data["embedding"], known, ("embedding",))
    chunk = mapping(data.get("chunk"))
    size, overlap = chunk.get("max_tokens", 400), chunk.get("overlap_tokens", 40)
    if type(size) is int and type(overlap) is int and overlap > size // 2:  # (a bool is no count)
        said = f"overlap_tokens {overlap} is more than half of max_tokens {size} (expected at most {size // 2})"
        problems.append(doc.problem(("chunk", "overlap_tokens"), said))
    for index, source in items(data.get("sources")):
        if not isinstance(source, str):
            continue
        where = ("sources", index)
        try:
            path = (root / source).resolve()
            inside = path.is_relative_to(root.resolve())
            there = inside and path.exists()
        except (OSError, RuntimeError, ValueError) as exc:  # a NUL in it, a name too long, a symlink loop
            said = f"{source!r} cannot be used as a path ({getattr(exc, 'strerror', None) or exc})"
            problems.append(doc.problem(where, f"{said} (expected a file or folder under the app folder)"))
            continue
        if not inside:
            problems.append(doc.problem(where, f"'{source}' is outside the app folder (expected a path under it)"))
        elif not there:
            problems.append(doc.problem(where, f"'{source}' does not exist (yet): nothing to index", warning=True))
    return problems


def check_search(doc: Document, known: Known) -> list[Problem]:
    """An assistant's `search`: collections, the intent checker and the web tool's server exist."""
    search = mapping(mapping(doc.value).get("search"))
    problems: list[Problem] = []
    for index, name in items(search.get("knowledge")):
        if isinstance(name, str) and name != TEAM_COLLECTIONS and name not in known.knowledge:
            problems.append(doc.problem(("search", "knowledge", index), unknown("collection", name, known.knowledge)))
    if search.get("mode") == "auto" and "intent_with" not in search:
        said = "mode: auto needs intent_with (the connector or use::<role> that decides)"
        problems.append(doc.problem(("search", "mode"), said))
    if "intent_with" in search:
        problems += connector_ref(doc, search["intent_with"], known, ("search", "intent_with"))
        problems += chat_target(doc, search["intent_with"], known, ("search", "intent_with"))
    server = mapping(search.get("web")).get("server")
    if isinstance(server, str) and server not in known.mcps:
        problems.append(doc.problem(("search", "web", "server"), unknown("MCP server", server, known.mcps)))
    return problems


def visible_to(collections: Mapping[str, CollectionSpec], user_id: str, team_id: str | None) -> tuple[str, ...]:
    """The app collections whose `access` admits this caller."""
    return tuple(sorted(c.id for c in collections.values() if c.access.allows(user_id, team_id)))
