"""A document into a collection: read, cut into chunks, embedded where its vectors are not known yet, stored.

Nothing is done twice (CONTRACT §9.1): a document whose bytes and metadata are already in the collection
is left as it is, and a changed one re-uses the stored vectors of every chunk whose text it still has
(chunks are cut at content-defined places, so an edit changes only the chunks around it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from yao_agent.dsl.specs import ChunkSettings
from yao_agent.knowledge.chunk import Chunk, chunks, content_hash
from yao_agent.knowledge.parse import parse
from yao_agent.store.audit import CLI, Actor
from yao_agent.store.knowledge import ChunkIn, CollectionRecord, DocumentRecord, Sight
from yao_agent.store.protocol import KnowledgeFace

EMBED_BATCH = 128  # texts per embedding request
# Texts → their vectors, by the collection's embedder.
Embed = Callable[[Sequence[str]], Awaitable[Sequence[Sequence[float]]]]


@dataclass(frozen=True, slots=True)
class Upload:
    name: str  # a file name: its extension says how it is read (.md .txt .html .pdf)
    data: bytes
    title: str | None = None  # None: the document's own (its first heading, its PDF title, its name)
    metadata: Mapping[str, str] = field(default_factory=dict[str, str])
    source: str = ""  # a synced file's path, `upload:<name>` for a file uploaded; a document of the same
    # source replaces the one before (so an edited file is re-indexed, not added twice)


@dataclass(frozen=True, slots=True)
class Added:
    document: DocumentRecord
    unchanged: bool  # the same bytes and metadata were there already: nothing was done
    embedded: int = 0  # chunks embedded now
    reused: int = 0  # chunks whose stored vectors were kept


async def add(
    store: KnowledgeFace, sight: Sight, collection: CollectionRecord, upload: Upload, chunking: ChunkSettings,
    embed: Embed | None, *, new_id: str, now: float, by: Actor = CLI,
) -> Added:  # fmt: skip
    digest = content_hash(upload.data)
    same = await store.kb_same_content(sight, collection.id, digest)
    if same is not None and dict(same.metadata) == dict(upload.metadata) and same.source == upload.source:
        return Added(same, unchanged=True)
    parsed = await asyncio.to_thread(parse, upload.name, upload.data)  # a PDF takes a while: off the loop
    title = upload.title or parsed.title
    cut = chunks(parsed, chunking.max_tokens, chunking.overlap_tokens)
    vectors, reused = await _vectors(store, sight, collection, cut, embed)
    rows = [ChunkIn(c.seq, c.heading, c.text, c.digest, vectors.get(c.digest)) for c in cut]
    record = DocumentRecord(id=new_id, collection_id=collection.id, title=title, source=upload.source,
                            content_hash=digest, metadata=dict(upload.metadata), chunk_count=len(rows),
                            created_at=now, updated_at=now)  # fmt: skip
    stored = await store.kb_put(sight, collection.id, record, rows, by=by)
    return Added(stored, unchanged=False, embedded=len({c.digest for c in cut}) - reused if embed else 0,
                 reused=reused)  # fmt: skip


async def _vectors(
    store: KnowledgeFace, sight: Sight, collection: CollectionRecord, cut: Sequence[Chunk], embed: Embed | None
) -> tuple[dict[str, bytes], int]:
    """Each chunk's vector by digest: those stored already, and the rest embedded now (in batches)."""
    if embed is None or not collection.embedding or not cut:
        return {}, 0
    known = await store.kb_known_vectors(sight, collection.id, sorted({c.digest for c in cut}))
    missing = list({c.digest: c for c in cut if c.digest not in known}.values())
    vectors = dict(known)
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        found = await embed([embedding_text(c.heading, c.text) for c in batch])
        from yao_agent.knowledge.vectors import pack  # (NumPy: loaded once a collection has vectors)

        vectors.update((c.digest, pack(v)) for c, v in zip(batch, found, strict=True))
    return vectors, len(known)


def embedding_text(heading: str, text: str) -> str:
    """What is embedded of a chunk: where it is in its document (its heading path), then its text."""
    return f"{heading}\n{text}" if heading else text
