"""Made-up text for the knowledge benchmarks, the same on every run: Markdown documents to ingest, chunks
to store directly by the hundred thousand, and their random unit vectors.

Words are drawn with Zipf-like weights (the n-th word 1/n as often as the first) from the vocabulary of the
retrieval set's documents widened by made-up rarer words. English function words keep the ranks they have
in those documents ("the" first); every other word is dealt a rank at random. So a question in English
matches nearly every chunk by its function words ("how", "do", "the") and a few by its other words, as
in a real collection, where the words of one question are seldom the collection's commonest. (Left in
the documents' order, the questions' words, taken from the same documents, would be among the
commonest of the made-up text: `SHUFFLED = False` measures that worse case.)
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from yao_agent.store.knowledge import ChunkIn, DocumentRecord

DATA = Path(__file__).resolve().parent / "data" / "retrieval"
SYLLABLES = ("ka", "lo", "mi", "re", "su", "ta", "ven", "dor", "pel", "quin", "bra", "sto", "nex", "fal", "gri")
MADE_UP = 20_000  # rare words added to the documents' own (each a few syllables)
DIMS = 256  # wordllama-256's width: the stored vectors must match its queries'
SHUFFLED = True  # the ranks of all but the function words dealt at random (see the docstring)
_FUNCTION = """a about after all also am an and any are as at be because been before being between both but by can
could did do does doing down each few for from had has have having he her here him his how i if in into is it its
just me more most my no nor not now of off on once only or other our out over own same she should so some such than
that the their them then there these they this those through to too under up very was we were what when where which
while who whom why will with would you your"""
FUNCTION_WORDS = frozenset(_FUNCTION.split())


@dataclass(frozen=True, slots=True)
class Vocabulary:
    words: list[str]
    cumulative: npt.NDArray[np.float64]  # of the words' weights, ending at 1


@functools.cache
def vocabulary() -> Vocabulary:
    texts = [p.read_text() for p in sorted(DATA.glob("*.*")) if p.suffix in (".md", ".rst") and p.name != "README.md"]
    prose = [re.sub(r"https?://\S+|<[^>]*>", " ", text).lower() for text in texts]  # words, not links or tags
    counts = Counter(w for text in prose for w in re.findall(r"[a-z]{2,}", text))
    real = [w for w, _ in counts.most_common()]
    made: list[list[int]] = np.random.default_rng(7).integers(0, len(SYLLABLES), size=(MADE_UP, 5)).tolist()
    invented = ["".join(SYLLABLES[i] for i in row[: 2 + row[4] % 4]) for row in made]
    words = list(dict.fromkeys(real + invented))
    if SHUFFLED:
        others = [w for w in words if w not in FUNCTION_WORDS]
        dealt = iter([others[i] for i in np.random.default_rng(11).permutation(len(others)).tolist()])
        words = [w if w in FUNCTION_WORDS else next(dealt) for w in words]
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = 1.0 / ranks
    cumulative = np.cumsum(weights / weights.sum())
    cumulative[-1] = 1.0
    return Vocabulary(words, cumulative)


class Writer:
    """Sentences, paragraphs and documents of the vocabulary, from one seeded generator."""

    def __init__(self, seed: int, vocab: Vocabulary | None = None) -> None:
        self.vocab = vocab or vocabulary()
        self.rng = np.random.default_rng(seed)

    def words(self, n: int) -> list[str]:
        picked = np.searchsorted(self.vocab.cumulative, self.rng.random(n), side="right")
        return [self.vocab.words[i] for i in picked.tolist()]

    def sentences(self, words: int) -> str:
        """About `words` words, as sentences of 6-18 words."""
        drawn, out = self.words(words), list[str]()
        lengths: list[int] = self.rng.integers(6, 19, size=words // 6 + 1).tolist()
        start = 0
        for length in lengths:
            if start >= len(drawn):
                break
            out.append(" ".join(drawn[start : start + length]).capitalize() + ".")
            start += length
        return " ".join(out)

    def paragraph(self, sentences: int) -> str:
        return self.sentences(sentences * 12)

    def title(self) -> str:
        return " ".join(self.words(3)).title()

    def markdown(self, low: int = 1000, high: int = 2000) -> bytes:
        """A Markdown document of about `low`..`high` bytes: a title, then sections of paragraphs."""
        size = int(self.rng.integers(low, high))
        parts = [f"# {self.title()}"]
        while sum(len(p) for p in parts) < size:
            if len(parts) == 1 or self.rng.random() < 0.3:
                parts.append(f"## {self.title()}")
            parts.append(self.paragraph(int(self.rng.integers(2, 6))))
        return ("\n\n".join(parts) + "\n").encode()

    def chunk_text(self) -> str:
        """One chunk's worth of text: 60-160 words (a chunk of at most 200 tokens, as the app's)."""
        return self.sentences(int(self.rng.integers(60, 161)))

    def vectors(self, n: int) -> npt.NDArray[np.float32]:
        """`n` random unit vectors of wordllama's width, as stored (float32, little-endian)."""
        matrix = self.rng.standard_normal((n, DIMS)).astype("<f4")
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def stored_documents(writer: Writer, first: int, count: int, per_document: int) -> Iterator[
    tuple[DocumentRecord, list[ChunkIn]]
]:  # fmt: skip
    """Documents numbered `first`.. of `per_document` chunks each, with their vectors, ready for kb_put."""
    for number in range(first, first + count):
        vectors = writer.vectors(per_document)
        chunks: list[ChunkIn] = []
        for seq in range(per_document):
            heading, text = writer.title(), writer.chunk_text()
            digest = hashlib.sha256(f"{heading}\n{text}".encode()).hexdigest()
            chunks.append(ChunkIn(seq, heading, text, digest, vectors[seq].astype("<f4").tobytes()))
        record = DocumentRecord(id=f"big{number}", collection_id="", title=writer.title(), source="",
                                content_hash=f"big{number}", metadata={}, chunk_count=len(chunks),
                                created_at=0.0, updated_at=0.0)  # fmt: skip
        yield record, chunks
