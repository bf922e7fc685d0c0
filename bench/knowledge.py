"""The knowledge base: ingest throughput, search latency, what the search step adds to a run, and
retrieval quality (bench/retrieval.py), on SQLite and PostgreSQL.

    .venv/bin/python bench/knowledge.py [--docs 500] [--big 10000,100000] [--pg-big 10000,100000] [--runs 100]
                                        [--pg postgresql://postgres@127.0.0.1:5432/postgres]

- Ingest: made-up Markdown documents of 1-2 KB (bench/kb_corpus.py) added one after another through
  `Library.add`, as `kb sync` and uploads do: read, cut (200 tokens, 30 overlapping), embedded when the
  collection has an embedder (wordllama-256, in this process), stored. Documents and chunks a second.
- Search: `Library.search` (hybrid: full text and vectors, fused) of English questions over collections
  of 10k and 100k chunks. Those chunks are stored directly (`kb_put`, made-up text, random unit
  vectors), as ingesting 10⁵ chunks one document at a time would take the benchmark's whole budget;
  the query's vector is wordllama's, so each search pays for its embedding, measured also on its own.
- The search step: a plain run of an in-process scripted model (no provider), beside the same run of an
  assistant that searches a collection of ~1k chunks first (the ingest's), alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import retrieval
from bench.common import Row, alternate, median_ms, percentile, print_table
from bench.flush import PG, drop, pg_database
from bench.kb_corpus import Writer, stored_documents, vocabulary
from yao_agent.identity import OPERATOR, Identity
from yao_agent.knowledge.ingest import Upload
from yao_agent.knowledge.search import Ask
from yao_agent.knowledge.vectors import VectorCache, nearest
from yao_agent.pipeline import RunRequest
from yao_agent.service.runs import Runs

CHUNKING = "chunk: {max_tokens: 200, overlap_tokens: 30}\n"
APP = {
    "app.yml": "roles:\n  default: bench.chat\n",
    # In-process and instant: what a run costs beside the search step is the pipeline's own work.
    "connectors/bench/chat.yml": "type: scripted\nchunk_size: 40\nrules:\n"
    "  - reply: The same short answer, whatever the references say, so that both runs stream alike.\n",
    "connectors/bench/embedder.yml": "type: local\nmodel: wordllama-256\n",
    "knowledge/text.yml": "name: Full text\n" + CHUNKING,
    "knowledge/hybrid.yml": "name: Hybrid\nembedding: bench.embedder\n" + CHUNKING,
    "knowledge/big.yml": "name: Big\nembedding: bench.embedder\n" + CHUNKING,
    "knowledge/qtext.yml": "name: Quality, full text\n" + CHUNKING,
    "knowledge/qhybrid.yml": "name: Quality, hybrid\nembedding: bench.embedder\n" + CHUNKING,
    "assistants/plain/assistant.yml": "name: Plain\n",
    "assistants/kb/assistant.yml": "name: Searching\nsearch: {knowledge: [hybrid]}\n",
}
# Targets. Ingest: a `kb sync` of a 1,000-document handbook within 10 s on SQLite, 20 s on PostgreSQL,
# with or without the local embedder. Search: the 5 ms median at 10k chunks on SQLite.
INGEST_MIN = {"SQLite": 100.0, "PostgreSQL": 50.0}
SEARCH_P50_MAX = {10_000: 5.0, 100_000: 30.0}
SEARCH_P99_MAX = {10_000: 15.0, 100_000: 60.0}
PG_SEARCH_FACTOR = 2.0  # PostgreSQL's targets: SQLite's this many times (a round trip per statement)
EMBED_MAX_MS = 1.0
ADDED_MAX_MS = 5.0
PER_DOCUMENT = 500  # chunks of each document stored directly


def write_app(root: Path) -> Path:
    for rel, text in APP.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def questions() -> list[str]:
    return [q.question for q in retrieval.questions()]


# --- ingest -------------------------------------------------------------------------------------------


async def ingest(runs: Runs, collection: str, docs: int, seed: int) -> tuple[float, int]:
    """Seconds to add `docs` made-up documents one after another, and the chunks they made. One document
    added first is not counted: it loads the embedder's table (0.1-0.2 s, once per process)."""
    writer = Writer(seed)
    uploads = [Upload(f"d{seed}-{n}.md", writer.markdown(), source=f"upload:d{seed}-{n}.md") for n in range(docs + 1)]
    library = runs.rt.knowledge
    await library.add(OPERATOR, collection, uploads[0])
    chunks = 0
    start = time.perf_counter()
    for upload in uploads[1:]:
        chunks += (await library.add(OPERATOR, collection, upload)).document.chunk_count
    return time.perf_counter() - start, chunks


async def ingest_rows(runs: Runs, database: str, docs: int) -> list[Row]:
    rows: list[Row] = []
    for collection, embedded in (("text", False), ("hybrid", True)):
        seconds, chunks = await ingest(runs, collection, docs, seed=1 if embedded else 2)
        how = "full text + wordllama" if embedded else "full text"
        rows.append(Row(f"ingest 1-2 KB docs, {how}, {database}", docs / seconds, "doc/s", "min", INGEST_MIN[database],
                        note=f"{docs} docs → {chunks} chunks in {seconds:.2f} s: {chunks / seconds:.0f} chunks/s, "
                             f"{1000 * seconds / docs:.1f} ms a document"))  # fmt: skip
    return rows


# --- search latency -----------------------------------------------------------------------------------


async def fill(runs: Runs, chunks: int, first_document: int, writer: Writer) -> float:
    """Store `chunks` more chunks in collection `big` directly; the seconds it took."""
    store, sight = runs.rt.store, runs.rt.knowledge.sight(OPERATOR)
    await runs.rt.knowledge.declare()
    start = time.perf_counter()
    for record, rows in stored_documents(writer, first_document, chunks // PER_DOCUMENT, PER_DOCUMENT):
        await store.kb_put(sight, "big", record, rows)
    return time.perf_counter() - start


async def latencies(runs: Runs, queries: list[str], samples: int) -> tuple[list[float], float]:
    """Milliseconds of each search of `big` (hybrid, top 6), and of the first one (it reads the vectors)."""
    library = runs.rt.knowledge

    async def search(query: str) -> float:
        start = time.perf_counter()
        found = await library.search(OPERATOR, ["big"], Ask(query))
        if not found:
            raise SystemExit(f"a search of 'big' found nothing for {query!r}")
        return (time.perf_counter() - start) * 1000

    cold = await search(queries[0])
    for query in queries[:10]:  # warm-up
        await search(query)
    return [await search(queries[n % len(queries)]) for n in range(samples)], cold


async def vectors_ms(runs: Runs, queries: list[str]) -> float:
    """The median of the exact vector search alone (the matrix product and the top k, in NumPy) over `big`'s
    vectors held in memory, for the questions' wordllama vectors."""
    from yao_agent.connectors.local_engine import shared_model

    _, ids, data = await runs.rt.store.kb_vectors(runs.rt.knowledge.sight(OPERATOR), "big")
    loaded, model = VectorCache().put("big", 0, ids, data), shared_model("wordllama-256")
    taken: list[float] = []
    for query in queries:
        vector = np.asarray(model.embed([query])[0][0], dtype="<f4")
        start = time.perf_counter()
        nearest(loaded, vector, Ask(query).depth)
        taken.append((time.perf_counter() - start) * 1000)
    return statistics.median(taken)


async def fulltext_ms(runs: Runs, queries: list[str]) -> float:
    """The median of the full-text statement alone, as a search of `big` makes it."""
    store, sight, taken = runs.rt.store, runs.rt.knowledge.sight(OPERATOR), list[float]()
    for query in queries:
        start = time.perf_counter()
        await store.kb_fulltext(sight, ["big"], query, Ask(query).depth, {})
        taken.append((time.perf_counter() - start) * 1000)
    return statistics.median(taken)


async def search_rows(runs: Runs, database: str, sizes: tuple[int, ...], samples: int) -> list[Row]:
    rows: list[Row] = []
    writer, queries, stored = Writer(3), questions(), 0
    factor = PG_SEARCH_FACTOR if database == "PostgreSQL" else 1.0
    for size in sizes:
        seconds = await fill(runs, size - stored, stored // PER_DOCUMENT, writer)
        put = f"{size - stored} chunks stored directly in {seconds:.1f} s ({(size - stored) / seconds:.0f}/s)"
        stored = size
        taken, cold = await latencies(runs, queries, samples)
        p50, p99 = statistics.median(taken), percentile(taken, 0.99)
        label = f"{size // 1000}k chunks"
        text, vectors = await fulltext_ms(runs, queries), await vectors_ms(runs, queries)
        note = (f"p99 {p99:.1f} ms; alone, the full-text statement {text:.1f} ms, the vectors' product and top k "
                f"{vectors:.2f} ms; first search {cold:.0f} ms (reads the vectors); {put}")  # fmt: skip
        rows.append(Row(f"search p50, hybrid, {label}, {database}", p50, "ms", "max",
                        SEARCH_P50_MAX.get(size, 30.0) * factor, note=note))  # fmt: skip
        rows.append(Row(f"search p99, hybrid, {label}, {database}", p99, "ms", "max",
                        SEARCH_P99_MAX.get(size, 60.0) * factor))  # fmt: skip
    return rows


async def embed_row(runs: Runs) -> Row:
    """One question's vector from wordllama, as a search asks for it (the connector resolved, a thread)."""
    library = runs.rt.knowledge
    [collection] = [c for c in await library.collections(OPERATOR) if c.id == "hybrid"]
    taken: list[float] = []
    for n, query in enumerate(questions() * 4):
        start = time.perf_counter()
        await library.embedders.for_collection(collection, [query])
        if n >= 10:
            taken.append((time.perf_counter() - start) * 1000)
    direct = await asyncio.to_thread(_direct_embed_ms)
    note = f"of which the model itself {direct:.3f} ms; the rest: the connector resolved, a thread"
    return Row("query embedding (wordllama-256, one question)", statistics.median(taken), "ms", "max", EMBED_MAX_MS,
               note=note)  # fmt: skip


def _direct_embed_ms() -> float:
    from yao_agent.connectors.local_engine import shared_model

    model, queries = shared_model("wordllama-256"), questions()
    start = time.perf_counter()
    for query in queries:
        model.embed([query])
    return (time.perf_counter() - start) * 1000 / len(queries)


# --- the search step in a run -------------------------------------------------------------------------


def run_of(runs: Runs, assistant: str) -> Callable[[], Awaitable[None]]:
    who, asked = Identity("bench"), [{"role": "user", "content": "How many days of annual leave do I get?"}]

    async def call() -> None:
        async for event in runs.stream(RunRequest(assistant, who, asked)):
            if event.type == "stream_end" and event.status != "completed":
                raise SystemExit(f"{assistant}: the run ended {event.status} ({event.reason}): {event.error}")

    return call


async def step_rows(runs: Runs, samples: int) -> list[Row]:
    chunks = next(c.chunks for c in await runs.rt.knowledge.collections(OPERATOR) if c.id == "hybrid")
    taken = await alternate({"search": run_of(runs, "kb"), "plain": run_of(runs, "plain")}, samples)
    cpu = [median_ms(taken[way]) for way in ("search", "plain")]
    wall = [median_ms(taken[way], 1) for way in ("search", "plain")]
    what = f"run with a search step ({chunks} chunks, hybrid)"
    return [
        Row(f"{what} vs none, CPU", cpu[0], "ms", "added", ADDED_MAX_MS, cpu[1],
            note=f"scripted model in process; medians of {samples} runs each, alternated"),
        Row(f"{what} vs none, wall", wall[0], "ms", "added", ADDED_MAX_MS, wall[1]),
    ]  # fmt: skip


# --- all of it ----------------------------------------------------------------------------------------


async def on_database(url: str, database: str, docs: int, sizes: tuple[int, ...], samples: int, runs_n: int) -> list[
    Row
]:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        runs = await Runs.open(write_app(Path(tmp)), db=url.replace("{tmp}", tmp))
        try:
            rows = await ingest_rows(runs, database, docs)
            if database == "SQLite":
                rows.append(await embed_row(runs))
                rows += await step_rows(runs, runs_n)
            if sizes:
                rows += await search_rows(runs, database, sizes, samples)
            return rows
        finally:
            await runs.aclose()


async def quality_rows() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        runs = await Runs.open(write_app(Path(tmp)), db=f"sqlite:///{tmp}/quality.db")
        try:
            return await retrieval.measure(runs.rt, "qtext", "qhybrid")
        finally:
            await runs.aclose()


async def measure(
    docs: int, sizes: tuple[int, ...], pg: str | None, pg_sizes: tuple[int, ...], samples: int = 300,
    runs: int = 100,
) -> list[Row]:  # fmt: skip
    vocabulary()  # read once before any clock starts (it is cached)
    rows = await on_database("sqlite:///{tmp}/kb.db", "SQLite", docs, sizes, samples, runs)
    if pg:
        url, name = pg_database(pg)
        try:
            rows += await on_database(url, "PostgreSQL", docs, pg_sizes, samples, runs)
        finally:
            drop(pg, name)
    return rows + await quality_rows()


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=500, help="documents ingested into each collection")
    parser.add_argument("--big", type=_sizes, default=(10_000, 100_000), help="chunks searched, SQLite")
    parser.add_argument("--pg-big", type=_sizes, default=(10_000, 100_000), help="chunks searched, PostgreSQL")
    parser.add_argument("--samples", type=int, default=300, help="searches timed at each size")
    parser.add_argument("--runs", type=int, default=100, help="runs of each assistant, alternated")
    parser.add_argument("--pg", default=os.environ.get("YAO_AGENT_BENCH_PG", PG), help="'' to skip PostgreSQL")
    parser.add_argument("--json", action="store_true", help="the rows as JSON, not a table")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.docs, args.big, args.pg or None, args.pg_big, args.samples, args.runs))
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=1))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
