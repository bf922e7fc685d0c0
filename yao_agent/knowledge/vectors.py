"""Exact vector search in NumPy, over a collection's vectors kept in memory between searches.

This Python's sqlite3 cannot load extensions (no sqlite-vec), and pgvector is not installed on the
PostgreSQL we run: a matrix product over normalised float32 vectors is exact, and measured fast enough up
to ~10⁵ chunks a collection (docs/performance.md). A collection's matrix is read once per `generation`
(bumped by every change of its documents), so a search costs the product, not a read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

MAX_CACHED_BYTES = 512 << 20  # the matrices kept, at most; the least recently searched go first


def pack(vector: Sequence[float]) -> bytes:
    """A vector as stored: float32, little-endian, normalised (so a dot product is the cosine)."""
    array = np.asarray(vector, dtype="<f4")
    norm = float(np.linalg.norm(array))
    return (array / norm if norm else array).astype("<f4").tobytes()


def unpack(data: bytes) -> Matrix:
    return np.frombuffer(data, dtype="<f4")


@dataclass(frozen=True, slots=True)
class Loaded:
    generation: int
    ids: npt.NDArray[np.int64]
    matrix: Matrix  # one row per chunk

    @property
    def size(self) -> int:
        return self.matrix.nbytes + self.ids.nbytes


class VectorCache:
    """The matrices of the collections searched lately, each valid for one generation of its collection."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self._kept: OrderedDict[str, Loaded] = OrderedDict()
        self._max = max_bytes

    def get(self, collection_id: str, generation: int) -> Loaded | None:
        found = self._kept.get(collection_id)
        if found is None or found.generation != generation:
            return None
        self._kept.move_to_end(collection_id)
        return found

    def put(self, collection_id: str, generation: int, ids: Sequence[int], data: bytes) -> Loaded:
        width = len(data) // (4 * len(ids)) if ids else 0
        matrix = np.frombuffer(data, dtype="<f4").reshape(len(ids), width) if ids else np.zeros((0, 0), "<f4")
        loaded = Loaded(generation, np.asarray(ids, dtype=np.int64), matrix)
        self._kept[collection_id] = loaded
        self._kept.move_to_end(collection_id)
        while sum(item.size for item in self._kept.values()) > self._max and len(self._kept) > 1:
            self._kept.popitem(last=False)
        return loaded


def nearest(loaded: Loaded, query: Matrix, k: int) -> list[tuple[int, float]]:
    """The `k` chunks closest to `query` (normalised), best first: (chunk id, cosine)."""
    if not len(loaded.ids) or loaded.matrix.shape[1] != query.shape[0]:
        return []  # none, or vectors of another model (its embedder changed): full text answers alone
    # Not `matrix @ query`: that is OpenBLAS's gemv, which wakes a thread per core and, with the cores busy,
    # waits for them (7 ms instead of 0.2 at 10k chunks, the machine loaded; their spinning also slowed the
    # database's statement running beside it). einsum's own loop is one thread, and as fast (memory-bound).
    scores = np.einsum("ij,j->i", loaded.matrix, query)
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top])]
    return [(int(loaded.ids[i]), float(scores[i])) for i in top]
