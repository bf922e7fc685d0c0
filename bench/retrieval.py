"""Retrieval quality on a labelled set from documents nobody here wrote (bench/data/retrieval/README.md):
recall@5 and MRR@10 of our full-text search, of our hybrid search (full text + wordllama vectors, fused),
and of a plain BM25 (bm25s, English stop words, no stemming) over the same chunks.

A chunk is relevant to a question when its text holds the question's labelled phrase (whitespace aside);
every phrase is checked to be in some chunk of its own document and in none of another, so a label that
the chunking cut in two, or that two documents share, stops the benchmark instead of skewing it.
Run through bench/knowledge.py (it opens the store); the vectors are the local embedder's, never the fake
provider's hashed ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import bm25s
from sqlalchemy import select

from bench.common import Row
from yao_agent.identity import OPERATOR
from yao_agent.knowledge.ingest import Upload
from yao_agent.knowledge.search import Ask
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.store.schema import kb_chunks, kb_documents

DATA = Path(__file__).resolve().parent / "data" / "retrieval"
RECALL_AT, MRR_AT = 5, 10


@dataclass(frozen=True, slots=True)
class Question:
    question: str
    document: str  # the file under bench/data/retrieval that answers it
    phrase: str  # text of the answering passage: a chunk holding it answers the question


def questions() -> list[Question]:
    return [Question(**item) for item in json.loads((DATA / "questions.json").read_text())]


def documents() -> list[tuple[str, bytes]]:
    """(upload name, bytes) of each document; reStructuredText is read as plain text."""
    found = sorted(p for p in DATA.iterdir() if p.suffix in (".md", ".rst") and p.name != "README.md")
    return [(p.name if p.suffix == ".md" else p.stem + ".txt", p.read_bytes()) for p in found]


def normal(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class Scores:
    recall: float  # share of the questions with a relevant chunk in the first RECALL_AT
    mrr: float  # mean of 1/rank of the first relevant chunk in the first MRR_AT (0 when none)


def score(ranked: Sequence[Sequence[str]], asked: Sequence[Question]) -> Scores:
    """`ranked[i]`: the texts found for question i, best first."""
    recall = mrr = 0.0
    for texts, question in zip(ranked, asked, strict=True):
        hits = [n for n, text in enumerate(texts[:MRR_AT], start=1) if normal(question.phrase) in normal(text)]
        recall += bool(hits) and hits[0] <= RECALL_AT
        mrr += 1.0 / hits[0] if hits else 0.0
    return Scores(recall / len(asked), mrr / len(asked))


async def stored_chunks(store: SqlStore, collection_id: str) -> list[tuple[str, str, str]]:
    """(document source, heading, text) of the collection's chunks, in the order they were stored."""
    query = (
        select(kb_documents.c.source, kb_chunks.c.heading, kb_chunks.c.text)
        .join(kb_documents, kb_documents.c.id == kb_chunks.c.document_id)
        .where(kb_chunks.c.collection_id == collection_id)
        .order_by(kb_chunks.c.id)
    )
    return [(row[0], row[1], row[2]) for row in await store.db.read_tx(lambda tx: tx.all(query))]


def check_labels(chunks: Sequence[tuple[str, str, str]], asked: Sequence[Question]) -> None:
    names = {Path(name).stem: name for name in (q.document for q in asked)}
    for question in asked:
        holders = {Path(source.removeprefix("upload:")).stem for source, _, text in chunks
                   if normal(question.phrase) in normal(text)}  # fmt: skip
        if holders != {Path(names[Path(question.document).stem]).stem}:
            raise SystemExit(f"label {question.phrase!r} ({question.document}) is in the chunks of {sorted(holders)}")


def bm25_ranked(chunks: Sequence[tuple[str, str, str]], asked: Sequence[Question]) -> list[list[str]]:
    """Plain BM25 over the chunks' heading and text, the text our full text and embedder index too."""
    corpus = [f"{heading}\n{text}" for _, heading, text in chunks]
    bm25: Any = bm25s  # the package's annotations leave parts unknown
    retriever = bm25.BM25()
    retriever.index(bm25.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25.tokenize([q.question for q in asked], stopwords="en", show_progress=False)
    found = retriever.retrieve(tokens, k=MRR_AT, show_progress=False)
    return [[chunks[int(i)][2] for i in row] for row in found[0]]


async def our_ranked(rt: Runtime, collection_id: str, asked: Sequence[Question]) -> list[list[str]]:
    found: list[list[str]] = []
    for question in asked:
        references = await rt.knowledge.search(OPERATOR, [collection_id], Ask(question.question, top_k=MRR_AT))
        found.append([r.text for r in references])
    return found


async def measure(rt: Runtime, text_id: str, hybrid_id: str) -> list[Row]:
    """Ingest the documents into both collections (chunks of 200 tokens, 30 overlapping, as their YAML
    says), then rank every question three ways."""
    for name, data in documents():
        for collection in (text_id, hybrid_id):
            await rt.knowledge.add(OPERATOR, collection, Upload(name, data, source=f"upload:{name}"))
    asked = questions()
    chunks = await stored_chunks(cast(SqlStore, rt.store), hybrid_id)
    if [c[1:] for c in chunks] != [c[1:] for c in await stored_chunks(cast(SqlStore, rt.store), text_id)]:
        raise SystemExit("the two collections were cut differently")
    check_labels(chunks, asked)
    text, hybrid = (
        score(await our_ranked(rt, text_id, asked), asked),
        score(await our_ranked(rt, hybrid_id, asked), asked),
    )
    bm25 = score(bm25_ranked(chunks, asked), asked)
    note = (f"{len(asked)} questions, {len(chunks)} chunks of {len(documents())} documents; recall@{RECALL_AT} / "
            f"MRR@{MRR_AT}: full text {text.recall:.2f} / {text.mrr:.2f}, hybrid {hybrid.recall:.2f} / "
            f"{hybrid.mrr:.2f}, BM25 {bm25.recall:.2f} / {bm25.mrr:.2f}")  # fmt: skip
    return [
        Row(f"retrieval recall@{RECALL_AT}, hybrid (wordllama) vs plain BM25", hybrid.recall, "", "min", 1.0,
            bm25.recall, note=note),
        Row(f"retrieval recall@{RECALL_AT}, full text only vs plain BM25", text.recall, "", "min", 1.0, bm25.recall),
    ]  # fmt: skip
