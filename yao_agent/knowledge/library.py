"""The knowledge service: who sees which collection, and everything done to one (CONTRACT §9.1).

Isolation fails closed twice: here, a caller's `Sight` holds only the app collections their `access`
admits and their own team; and in the store, every statement filters by that sight, so a collection
outside it is missing, whatever id is asked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from yao_agent.connectors import Engines
from yao_agent.connectors.deltas import Embedded
from yao_agent.connectors.resolve import RoleSettings
from yao_agent.dsl.knowledge import visible_to
from yao_agent.dsl.specs import TEAM_COLLECTIONS, App, ChunkSettings
from yao_agent.errors import NotFound, PermissionDenied, UsageError
from yao_agent.identity import Identity, Operator
from yao_agent.ids import IdSource
from yao_agent.knowledge.embedder import Embedders
from yao_agent.knowledge.references import Reference
from yao_agent.knowledge.search import Ask, Searcher
from yao_agent.store.audit import CLI, Actor, actor_of
from yao_agent.store.knowledge import CollectionRecord, DocumentRecord, Sight
from yao_agent.store.protocol import KnowledgeFace

if TYPE_CHECKING:  # (documents are read and cut only when one is added: a run that searches needs none of it)
    from yao_agent.knowledge.ingest import Added, Upload

Caller = Identity | Operator
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
READABLE = (".md", ".markdown", ".txt", ".html", ".htm", ".pdf")
MAX_METADATA = 32  # keys per document


@dataclass(frozen=True, slots=True)
class Synced:
    collection: str
    added: list[str]  # sources (re)indexed
    unchanged: int
    removed: int
    embedded: int = 0  # chunks given the vectors they lacked (after the collection's embedding changed)


class Library:
    def __init__(
        self, app: App, store: KnowledgeFace, engines: Engines, settings: RoleSettings, *,
        ids: IdSource, clock: Callable[[], float], environ: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.app, self.store, self.ids, self.clock = app, store, ids, clock
        self.embedders = Embedders(app, engines, settings, environ)
        self.searcher = Searcher(store, self._query_vector)
        self._declared = ""  # the app version whose collections the store has

    # --- who sees what --------------------------------------------------------------------------

    def sight(self, who: Caller, team: str | None = None) -> Sight:
        """A person sees the app collections their access admits and their team's; the operator sees
        every app collection, and the team it names."""
        if isinstance(who, Operator):
            return Sight(team or "", tuple(sorted(self.app.knowledge)))
        return Sight(who.team_id or "", visible_to(self.app.knowledge, who.user_id, who.team_id))

    async def declare(self) -> None:
        """The app's collections, as its YAML declares them, in the store (once per app version)."""
        if self._declared == self.app.version and self.app.version:
            return
        declared = [(c.id, c.name, c.embedding or "") for c in self.app.knowledge.values()]
        if declared:
            await self.store.kb_declare(declared)
        self._declared = self.app.version

    async def collections(self, who: Caller, team: str | None = None) -> list[CollectionRecord]:
        await self.declare()
        return await self.store.kb_collections(self.sight(who, team))

    async def collection(self, who: Caller, collection_id: str, team: str | None = None) -> CollectionRecord:
        await self.declare()
        found = await self.store.kb_collection(self.sight(who, team), collection_id)
        if found is None:  # not there, or not the caller's: the same answer (no way to probe other teams)
            raise NotFound(f"no collection '{collection_id}'")
        return found

    # --- changes --------------------------------------------------------------------------------

    async def create(self, who: Caller, name: str, embedding: str | None, team: str | None = None) -> CollectionRecord:
        """A team collection, `<team>:<name>`: made by a team admin of the team, or the operator."""
        owner = team if isinstance(who, Operator) else who.team_id
        if owner is None:
            raise PermissionDenied("a team collection needs a team (the caller has none; the CLI takes --team)")
        if isinstance(who, Identity) and not who.admin:
            raise PermissionDenied("only a team admin creates the team's collections")
        if not NAME.fullmatch(name):
            raise UsageError(f"invalid collection name {name!r} (expected 1-64 letters, digits, '_' and '-')")
        if embedding is not None and ("$ENV" in embedding or not embedding.strip()):
            raise UsageError("embedding: expected a connector id or use::<role> ($ENV is for the app's own YAML)")
        if embedding and not embedding.startswith("use::") and embedding not in self.app.connectors:
            raise UsageError(f"embedding: unknown connector '{embedding}' (expected a connector id or use::<role>)")
        return await self.store.kb_create(owner, name, embedding or "", by=actor_of(who))

    async def writable(self, who: Caller, collection_id: str, team: str | None = None) -> CollectionRecord:
        """A collection the caller may change: their team's, as its admin; an app collection, as the operator."""
        found = await self.collection(who, collection_id, team)
        if isinstance(who, Operator):
            return found
        if found.origin == "app":
            raise PermissionDenied(f"collection '{collection_id}' is the app's: the operator changes it (yao-agent kb)")
        if not who.admin:
            raise PermissionDenied(f"only a team admin changes collection '{collection_id}'")
        return found

    async def add(self, who: Caller, collection_id: str, upload: Upload, team: str | None = None) -> Added:
        found = await self.writable(who, collection_id, team)
        _check_metadata(upload.metadata)
        return await self._add(self.sight(who, team), found, upload, actor_of(who))

    async def _add(self, sight: Sight, collection: CollectionRecord, upload: Upload, by: Actor) -> Added:
        spec = self.app.knowledge.get(collection.id) if collection.origin == "app" else None
        chunking = spec.chunk if spec is not None else ChunkSettings()

        async def embed(texts: Sequence[str]) -> list[list[float]]:
            return (await self.embedders.for_collection(collection, texts)).vectors

        from yao_agent.knowledge.ingest import add

        return await add(self.store, sight, collection, upload, chunking, embed if collection.embedding else None,
                         new_id=self.ids.new("doc"), now=self.clock(), by=by)  # fmt: skip

    async def delete(self, who: Caller, collection_id: str, document_id: str, team: str | None = None) -> None:
        await self.writable(who, collection_id, team)
        if not await self.store.kb_delete(self.sight(who, team), collection_id, document_id, by=actor_of(who)):
            raise NotFound(f"no document '{document_id}' in collection '{collection_id}'")

    async def documents(self, who: Caller, collection_id: str, team: str | None = None) -> list[DocumentRecord]:
        await self.collection(who, collection_id, team)
        return await self.store.kb_documents(self.sight(who, team), collection_id)

    async def sync(self, collection_id: str | None = None) -> list[Synced]:
        """The operator's: each app collection (or the one named) brought in line with its `sources`."""
        await self.declare()
        if collection_id is not None and collection_id not in self.app.knowledge:
            raise NotFound(f"no app collection '{collection_id}' (known: {', '.join(sorted(self.app.knowledge))})")
        chosen = [collection_id] if collection_id is not None else sorted(self.app.knowledge)
        return [await self._sync_one(c) for c in chosen]

    async def _sync_one(self, collection_id: str) -> Synced:
        sight = self.sight(Operator())
        collection = await self.collection(Operator(), collection_id)
        files = source_files(self.app.root, self.app.knowledge[collection_id].sources)
        from yao_agent.knowledge.ingest import Upload

        added: list[str] = []
        unchanged = 0
        for rel, path in files:
            done = await self._add(sight, collection, Upload(path.name, path.read_bytes(), source=rel), CLI)
            unchanged += done.unchanged
            if not done.unchanged:
                added.append(rel)
        keep = [rel for rel, _ in files]
        removed = await self.store.kb_delete_missing(sight, collection_id, keep, by=CLI)
        return Synced(collection_id, added, unchanged, removed, await self._fill(sight, collection))

    async def _fill(self, sight: Sight, collection: CollectionRecord) -> int:
        """Embed the chunks that have no vector yet: all of them after the collection's embedding changed."""
        if not collection.embedding:
            return 0
        from yao_agent.knowledge.ingest import EMBED_BATCH, embedding_text
        from yao_agent.knowledge.vectors import pack  # (NumPy: loaded once a collection has vectors)

        done = 0
        while rows := await self.store.kb_unembedded(sight, collection.id, EMBED_BATCH):
            got = await self.embedders.for_collection(collection, [embedding_text(h, t) for _, h, t in rows])
            vectors = {chunk_id: pack(v) for (chunk_id, _, _), v in zip(rows, got.vectors, strict=True)}
            stored = await self.store.kb_set_vectors(sight, collection.id, collection.embedding, vectors)
            if not stored:
                break  # its embedding changed meanwhile: the next sync embeds for the new one
            done += stored
        return done

    # --- search ---------------------------------------------------------------------------------

    async def search(self, who: Caller, names: Sequence[str], ask: Ask, team: str | None = None) -> list[Reference]:
        """`names`: collection ids and `team` (every collection of the caller's team). Collections the caller
        cannot see are passed over, as if they did not exist."""
        await self.declare()
        sight = self.sight(who, team)
        visible = await self.store.kb_collections(sight)
        wanted = set(names)
        chosen = [c for c in visible if c.id in wanted or (TEAM_COLLECTIONS in wanted and c.origin == "team")]
        return await self.searcher.search(sight, chosen, ask)

    async def _query_vector(self, collection: CollectionRecord, query: str) -> list[float] | None:
        if not collection.embedding:
            return None
        return (await self.embedders.for_collection(collection, [query])).vectors[0]

    async def embed_for_caller(self, identity: Identity, texts: Sequence[str]) -> Embedded:
        return await self.embedders.for_caller(identity, texts)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if len(metadata) > MAX_METADATA:
        raise UsageError(f"metadata has {len(metadata)} keys (expected at most {MAX_METADATA})")
    for key, value in metadata.items():
        if not isinstance(key, str) or not NAME.fullmatch(key) or not isinstance(value, str) or len(value) > 512:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(
                f"metadata {key!r}: expected a key of letters, digits, '_', '-' and a text value (≤ 512 chars)"
            )


def source_files(root: Path, sources: Sequence[str]) -> list[tuple[str, Path]]:
    """The readable files a collection's `sources` name (files, or folders searched recursively), each once,
    with its path relative to the app root; none outside the app folder."""
    base = root.resolve()
    found: dict[str, Path] = {}
    for source in sources:
        start = (root / source).resolve()
        if not start.is_relative_to(base) or not start.exists():
            continue
        paths = [start] if start.is_file() else sorted(p for p in start.rglob("*") if p.is_file())
        for path in paths:
            real = path.resolve()
            if real.suffix.lower() in READABLE and real.is_relative_to(base):
                found.setdefault(real.relative_to(base).as_posix(), real)
    return sorted(found.items())
