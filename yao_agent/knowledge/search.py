"""Hybrid retrieval: full text and vectors, fused by reciprocal rank (CONTRACT §9.1).

Each list ranks chunks its own way — the store's full text (FTS5's bm25, PostgreSQL's ts_rank_cd) and, for
collections with an embedder, the cosine of their vectors to the query's — and a chunk's fused score is
the sum of 1/(K + rank) over the lists it is in. Ranks, not scores, are fused: bm25 and cosine are on
scales that do not compare. The score is then scaled to 0..1 (1: first in every list). An embedder that
fails leaves full text to answer: a search never fails for want of vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from yao_agent.knowledge.references import Reference
from yao_agent.store.knowledge import ChunkHit, CollectionRecord, Sight
from yao_agent.store.protocol import KnowledgeFace

if TYPE_CHECKING:
    from yao_agent.knowledge.vectors import Matrix, VectorCache

log = logging.getLogger("yao_agent.knowledge")

K = 60  # the usual constant of reciprocal rank fusion: a chunk's place matters less the lower it is
# The query's vector for a collection (by the collection's embedder), or None when it has none.
QueryVector = Callable[[CollectionRecord, str], Awaitable[Sequence[float] | None]]


@dataclass(frozen=True, slots=True)
class Ask:
    query: str
    top_k: int = 6
    min_score: float = 0.0
    filter: Mapping[str, str] = field(default_factory=dict[str, str])

    @property
    def depth(self) -> int:
        """How far down each list is read: deeper than top_k, so fusion has something to reorder."""
        return max(4 * self.top_k, 20)


class Searcher:
    def __init__(self, store: KnowledgeFace, vector_of: QueryVector, cache: VectorCache | None = None) -> None:
        self._store = store
        self._vector_of = vector_of
        self._cache = cache  # made by the first search by meaning: NumPy loads then, not with every process

    async def search(self, sight: Sight, collections: Sequence[CollectionRecord], ask: Ask) -> list[Reference]:
        if not collections or not ask.query.strip():
            return []
        ids = [c.id for c in collections]
        # The vectors first, then full text and the vectors' chunks in one statement: a round trip less (and on
        # PostgreSQL a thread's turn less) than full text beside the vectors and their chunks after.
        vector_ids = await self._by_meaning(sight, collections, ask)
        text_hits, vector_hits = await self._store.kb_hits(sight, ids, ask.query, ask.depth, ask.filter, vector_ids)
        by_id = {hit.chunk_id: hit for hit in [*text_hits, *vector_hits]}
        lists = [[h.chunk_id for h in text_hits]] + ([[i for i in vector_ids if i in by_id]] if vector_ids else [])
        fused = fuse(lists)
        chosen = [(chunk_id, score) for chunk_id, score in fused if score >= ask.min_score][: ask.top_k]
        return [_reference(by_id[chunk_id], score) for chunk_id, score in chosen]

    async def _by_meaning(self, sight: Sight, collections: Sequence[CollectionRecord], ask: Ask) -> list[int]:
        """The chunks nearest the query across the collections that have vectors, best first."""
        found: list[tuple[int, float]] = []
        vectors: dict[str, Matrix | None] = {}
        for collection in collections:
            if not collection.embedding:
                continue
            from yao_agent.knowledge.vectors import VectorCache, nearest

            self._cache = self._cache or VectorCache()
            if collection.embedding not in vectors:
                vectors[collection.embedding] = await self._query_vector(collection, ask.query)
            query = vectors[collection.embedding]
            if query is None:
                continue
            loaded = self._cache.get(collection.id, collection.generation)
            if loaded is None:
                generation, chunk_ids, data = await self._store.kb_vectors(sight, collection.id)
                loaded = self._cache.put(collection.id, generation, chunk_ids, data)
            found += nearest(loaded, query, ask.depth)
        found.sort(key=lambda hit: -hit[1])
        return [chunk_id for chunk_id, _ in found[: ask.depth]]

    async def _query_vector(self, collection: CollectionRecord, query: str) -> Matrix | None:
        try:
            vector = await self._vector_of(collection, query)
        except Exception as exc:  # a provider's error, a key not set: full text still answers
            log.warning("knowledge: no query vector for %s (full text only): %s", collection.id, exc)
            return None
        if vector is None:
            return None
        import numpy as np

        array: Matrix = np.asarray(vector, dtype="<f4")
        norm = float(np.linalg.norm(array))
        return (array / np.float32(norm)).astype("<f4") if norm else None


def fuse(lists: Sequence[Sequence[int]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked id lists, best first, scores scaled to 0..1."""
    if not lists:
        return []
    scores: dict[int, float] = {}
    for ranked in lists:
        for rank, chunk_id in enumerate(ranked, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (K + rank)
    best = len(lists) / (K + 1)
    return sorted(((i, s / best) for i, s in scores.items()), key=lambda item: (-item[1], item[0]))


def _reference(hit: ChunkHit, score: float) -> Reference:
    return Reference(collection=hit.collection_id, document_id=hit.document_id, title=hit.title, text=hit.text,
                     score=score, heading=hit.heading, metadata=hit.metadata)  # fmt: skip
