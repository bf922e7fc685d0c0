"""The knowledge base's storage (CONTRACT §9.1): collections, their documents, and the chunks searched by
full text and by vectors. The service decides what a caller may see (a `Sight`); every statement here
enforces it in SQL (store/kbsql.py), and a collection a sight does not admit behaves as one that does
not exist: reads find nothing in it, writes raise `NotFound`.

A collection's `generation` goes up with every change to its documents or vectors, so what is cached of
it (its vectors, in memory) is keyed on it and rebuilt when it moves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from yao_agent.errors import Conflict, NotFound, PermissionDenied, UsageError
from yao_agent.store import audit, kbsql
from yao_agent.store.audit import CLI, Actor
from yao_agent.store.engine import Database
from yao_agent.store.runlog import plain_text
from yao_agent.store.tx import Tx

GONE = {"why": "its source file is gone"}  # what a sync's audit row says of a document it deleted
ID_MAX = 300  # kb_collections.id's size (schema.py)
TEAM_MAX = 128
MAX_WORDS = 32  # a full-text query's words beyond these are dropped: a search, not a document
# A query's words: letters and digits only, so nothing a caller types is ever read as full-text syntax.
_WORD = re.compile(r"[^\W_]+")
# A team collection's name: its id `<team>:<name>` is one segment of the collections' URLs as it is.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class Sight:
    """What one caller may see, decided by the service; the SQL enforces it."""

    team_id: str  # '' = no team: sees no team collection
    app_ids: tuple[str, ...]  # the app collections the caller's access admits


@dataclass(frozen=True, slots=True)
class CollectionRecord:
    id: str
    team_id: str
    origin: Literal["app", "team"]
    name: str
    embedding: str  # '': full text only; else a connector id or `use::role`
    generation: int
    documents: int
    chunks: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    id: str
    collection_id: str
    title: str
    source: str  # '': an upload; else a synced file's path relative to the app
    content_hash: str
    metadata: Mapping[str, str]
    chunk_count: int
    created_at: float  # 0: the store's clock when put
    updated_at: float


@dataclass(frozen=True, slots=True)
class ChunkIn:
    seq: int
    heading: str
    text: str
    digest: str
    vector: bytes | None  # float32 little-endian, normalised; None: not embedded


@dataclass(frozen=True, slots=True)
class ChunkHit:
    chunk_id: int
    collection_id: str
    document_id: str
    title: str
    heading: str
    text: str
    seq: int
    metadata: Mapping[str, str]
    score: float  # full text: higher is better; 0 for chunks asked for by id


def _seen(sight: Sight, **more: Any) -> dict[str, Any]:
    """A statement's parameters for this sight (a new dict each time: `Tx` takes the one it is given)."""
    if not isinstance(sight, Sight):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise PermissionDenied("a sight is required for this knowledge store call")
    return {"team": sight.team_id, "apps": list(sight.app_ids), **more}


# English function words: in a question they match nearly every chunk, and the database would rank every
# match (measured: 32.7 ms at 10k chunks with them, 1.7 ms without: docs/performance.md). Left out of a
# query, unless they are all it has.
_FUNCTION_WORDS = """
a about above after again all also am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here
hers him his how i if in into is it its just me more most my no nor not now of off on once only or other our
out over own same she should so some such than that the their them then there these they this those through
to too under until up very was we were what when where which while who whom why will with would you your
"""
STOP_WORDS = frozenset(_FUNCTION_WORDS.split())


def fulltext_words(query: str) -> list[str]:
    """The words a full-text search looks for (any of them), lower-cased, each once, in order; function words
    only when there is nothing else."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:MAX_WORDS]


def _match(dialect: str, words: Sequence[str]) -> str:
    """The words as the database's full-text query: any of them (each a quoted string for FTS5)."""
    return " OR ".join(f'"{w}"' for w in words) if dialect == "sqlite" else " | ".join(words)


def _text(value: str) -> str:
    return plain_text(value) or ""


def _metadata(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in cast(Mapping[Any, Any], value).items()} if isinstance(value, Mapping) else {}


def _collection(row: Sequence[Any]) -> CollectionRecord:
    cid, team, origin, name, embedding, generation, documents, chunks, created_at, updated_at = row
    return CollectionRecord(cid, team, origin, name, embedding, int(generation), int(documents), int(chunks),
                            created_at, updated_at)  # fmt: skip


def _document(row: Any) -> DocumentRecord:
    return DocumentRecord(row.id, row.collection_id, row.title, row.source, row.content_hash, _metadata(row.meta),
                          row.chunk_count, row.created_at, row.updated_at)  # fmt: skip


def _hit(row: Sequence[Any]) -> ChunkHit:
    chunk_id, collection_id, document_id, title, heading, text, seq, meta, score = row
    return ChunkHit(chunk_id, collection_id, document_id, title, heading, text, seq, _metadata(meta), float(score))


def _checked_id(cid: str, what: str) -> str:
    if not cid or len(cid) > ID_MAX:
        raise UsageError(f"{what} '{cid[:40]}': expected 1-{ID_MAX} characters, got {len(cid)}")
    return cid


def _lock(tx: Tx, sight: Sight, cid: str) -> Any:
    """The visible collection a write changes, locked until it commits; NotFound for any other."""
    row = tx.first(kbsql.LOCK_COLLECTION, _seen(sight, cid=cid))
    if row is None:
        raise NotFound(f"no knowledge collection '{cid}'")
    return row


def _drop(tx: Tx, cid: str, document_id: str) -> dict[str, Any] | None:
    """Delete a document of the collection, its chunks first (their trigger unindexes them on SQLite);
    what it was (as an audit row says it), None if there was none."""
    found = tx.all(kbsql.SUMMARY, {"doc": document_id, "cid": cid})
    tx.execute(kbsql.DELETE_CHUNKS, {"doc": document_id, "cid": cid})
    if not found or not tx.execute(kbsql.DELETE_DOCUMENT, {"doc": document_id, "cid": cid}):
        return None
    return _summary(found[0]._asdict())


def _summary(document: Mapping[str, Any]) -> dict[str, Any]:
    return {"title": document["title"], "source": document["source"], "content_hash": document["content_hash"],
            "chunks": document["chunk_count"], "metadata": document["meta"]}  # fmt: skip


def _document_change(action: str, cid: str, document_id: str, before: Any, after: Any) -> audit.Change:
    return audit.Change(action, f"kb/{cid}/{document_id}", _team_of(cid), before, after)


def _team_of(cid: str) -> str:
    """The team whose a collection is: `<team>:<name>`; '' for an app collection."""
    team, colon, _ = cid.partition(":")
    return team if colon else ""


def _changed(tx: Tx, cid: str, now: float) -> None:
    tx.execute(kbsql.CHANGED, {"cid": cid, "updated_at": now})


class KnowledgeStore:
    """The knowledge half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    # --- collections ----------------------------------------------------------------------------

    async def kb_declare(self, collections: Sequence[tuple[str, str, str]]) -> None:
        """Create or update the app's collections, each (id, name, embedding). A new embedding makes the
        collection's vectors stale: they are cleared (to be made again) and its generation moves."""
        declared = [(_checked_id(cid, "collection"), name, embedding) for cid, name, embedding in collections]
        for cid, _name, _embedding in declared:
            if ":" in cid:
                raise UsageError(f"collection '{cid}': an app collection's id has no ':' (team collections' do)")
        now = self.clock()

        def work(tx: Tx) -> None:
            for cid, name, embedding in declared:
                change = _declare(tx, cid, _text(name), embedding, now)
                if change is not None:  # (the app's files say so: the deployment's change)
                    audit.append(tx, audit.DEPLOYMENT, change, now)

        await self.db.write_tx(work)

    async def kb_create(self, team_id: str, name: str, embedding: str, *, by: Actor = CLI) -> CollectionRecord:
        """A new collection of the team, id `<team>:<name>`; Conflict if the team has one by that name."""
        if not team_id or len(team_id) > TEAM_MAX:
            raise UsageError(f"a team collection needs a team (1-{TEAM_MAX} characters)")
        if not _NAME.fullmatch(name):
            raise UsageError(f"collection name {name[:40]!r}: expected letters, digits, '.', '_' and '-' "
                             "(starting with a letter or digit)")  # fmt: skip
        cid = _checked_id(f"{team_id}:{name}", "collection")
        now = self.clock()
        record = CollectionRecord(cid, team_id, "team", name, embedding, 0, 0, 0, now, now)
        values = {"id": cid, "team_id": team_id, "origin": "team", "name": name, "embedding": embedding,
                  "generation": 0, "created_at": now, "updated_at": now}  # fmt: skip
        after = {"name": name, "embedding": embedding}
        change = audit.Change("kb.collection.create", f"kb/{cid}", team_id, None, after)
        made = audit.logged(lambda tx: tx.execute(kbsql.CREATE_COLLECTION, dict(values)), by,
                            lambda _tx, count: [change] if count else [], now)  # fmt: skip
        if not await self.db.write_tx(made):
            raise Conflict(f"the team already has a knowledge collection named '{name}'")
        return record

    async def kb_collections(self, sight: Sight) -> list[CollectionRecord]:
        found = await self.db.read_tx(lambda tx: tx.tuples(kbsql.LIST_COLLECTIONS, _seen(sight)))
        return [_collection(row) for row in found]

    async def kb_collection(self, sight: Sight, collection_id: str) -> CollectionRecord | None:
        found = await self.db.read_tx(lambda tx: tx.tuples(kbsql.ONE_COLLECTION, _seen(sight, cid=collection_id)))
        return _collection(found[0]) if found else None

    # --- documents ------------------------------------------------------------------------------

    async def kb_documents(self, sight: Sight, collection_id: str) -> list[DocumentRecord]:
        """The collection's documents, oldest first."""
        found = await self.db.read_tx(lambda tx: tx.all(kbsql.LIST_DOCUMENTS, _seen(sight, cid=collection_id)))
        return [_document(row) for row in found]

    async def kb_same_content(self, sight: Sight, collection_id: str, content_hash: str) -> DocumentRecord | None:
        """A document of the collection with this content hash (adding it again would change nothing)."""
        found = await self.db.read_tx(
            lambda tx: tx.first(kbsql.SAME_CONTENT, _seen(sight, cid=collection_id, hash=content_hash))
        )
        return _document(found) if found is not None else None

    async def kb_put(
        self, sight: Sight, collection_id: str, document: DocumentRecord, chunks: Sequence[ChunkIn], *,
        by: Actor = CLI,
    ) -> DocumentRecord:  # fmt: skip
        """Store a document and its chunks in one transaction; a document of the collection from the same
        `source` (a synced file) is replaced. NotFound if the sight does not admit the collection."""
        now = self.clock()
        stored = replace(document, collection_id=collection_id, title=_text(document.title),
                         source=_text(document.source), metadata=_clean_metadata(document.metadata),
                         chunk_count=len(chunks), created_at=document.created_at or now,
                         updated_at=document.updated_at or now)  # fmt: skip

        def work(tx: Tx) -> DocumentRecord:
            _lock(tx, sight, collection_id)
            replaced: list[tuple[str, dict[str, Any] | None]] = []
            if stored.source:
                for (old,) in tx.tuples(kbsql.OF_SOURCE, {"cid": collection_id, "source": stored.source}):
                    replaced.append((old, _drop(tx, collection_id, old)))
            tx.execute(kbsql.INSERT_DOCUMENT, _document_row(stored))
            if chunks:
                tx.executemany(kbsql.INSERT_CHUNK, [_chunk_row(stored, c) for c in chunks])
            _changed(tx, collection_id, now)
            # One row: the document added, and what it replaced (a synced file's or an upload's earlier version).
            before: dict[str, Any] | None = None
            if replaced:
                before = {"replaced": [{"id": old, **(was or {})} for old, was in replaced]}
            after = _summary(_document_row(stored))
            audit.append(tx, by, _document_change("kb.document.add", collection_id, stored.id, before, after), now)
            return stored

        return await self.db.write_tx(work)

    async def kb_delete(self, sight: Sight, collection_id: str, document_id: str, *, by: Actor = CLI) -> bool:
        """Delete one document of the collection; False if it has none by that id."""
        now = self.clock()

        def work(tx: Tx) -> bool:
            _lock(tx, sight, collection_id)
            was = _drop(tx, collection_id, document_id)
            if was is None:
                return False
            _changed(tx, collection_id, now)
            audit.append(tx, by, _document_change("kb.document.delete", collection_id, document_id, was, None), now)
            return True

        return await self.db.write_tx(work)

    async def kb_delete_missing(
        self, sight: Sight, collection_id: str, keep_sources: Sequence[str], *, by: Actor = CLI
    ) -> int:
        """Delete the synced documents whose source is not among `keep_sources` (its file is gone);
        uploads (no source) stay. How many were deleted."""
        now = self.clock()

        def work(tx: Tx) -> int:
            _lock(tx, sight, collection_id)
            gone = tx.tuples(kbsql.GONE_SOURCES, {"cid": collection_id, "keep": list(keep_sources)})
            for (document_id,) in gone:
                was = _drop(tx, collection_id, document_id)
                change = _document_change("kb.document.delete", collection_id, document_id, was, GONE)
                audit.append(tx, by, change, now)
            if gone:
                _changed(tx, collection_id, now)
            return len(gone)

        return await self.db.write_tx(work)

    # --- vectors --------------------------------------------------------------------------------

    async def kb_known_vectors(self, sight: Sight, collection_id: str, digests: Sequence[str]) -> dict[str, bytes]:
        """The vectors the collection holds for chunks with these digests: an edited document's unchanged
        chunks need not be embedded again."""
        wanted = list(dict.fromkeys(digests))
        found = await self.db.read_tx(
            lambda tx: tx.tuples(kbsql.KNOWN_VECTORS, _seen(sight, cid=collection_id, digests=wanted))
        )
        return {digest: bytes(vector) for digest, vector in found}

    async def kb_vectors(self, sight: Sight, collection_id: str) -> tuple[int, list[int], bytes]:
        """(generation, chunk ids, their vectors end to end) of the collection's embedded chunks, in id
        order. The generation is read first: vectors newer than it only make a cache reload once more."""

        def work(tx: Tx) -> tuple[int, list[int], bytes]:
            row = tx.first(kbsql.SEEN_COLLECTION, _seen(sight, cid=collection_id))
            if row is None:
                raise NotFound(f"no knowledge collection '{collection_id}'")
            found = tx.tuples(kbsql.VECTORS, {"cid": collection_id})
            return int(row.generation), [r[0] for r in found], b"".join(bytes(r[1]) for r in found)

        return await self.db.read_tx(work)

    async def kb_unembedded(self, sight: Sight, collection_id: str, limit: int) -> list[tuple[int, str, str]]:
        """Up to `limit` chunks of the collection without a vector, as (chunk id, heading, text): what a
        new embedding (or one that failed) has still to embed."""
        found = await self.db.read_tx(
            lambda tx: tx.tuples(kbsql.UNEMBEDDED, _seen(sight, cid=collection_id, limit=limit))
        )
        return [(int(chunk_id), heading, text) for chunk_id, heading, text in found]

    async def kb_set_vectors(
        self, sight: Sight, collection_id: str, embedding: str, vectors: Mapping[int, bytes]
    ) -> int:
        """Store vectors made with `embedding` for chunks of the collection; none if its embedding has
        changed since (they would be another model's). How many chunks took one."""
        now = self.clock()

        def work(tx: Tx) -> int:
            row = _lock(tx, sight, collection_id)
            if row.embedding != embedding:
                return 0
            changed = sum(tx.execute(kbsql.SET_VECTOR, {"vector": v, "chunk": k, "cid": collection_id})
                          for k, v in vectors.items())  # fmt: skip
            if changed:
                _changed(tx, collection_id, now)
            return changed

        return await self.db.write_tx(work)

    # --- search ---------------------------------------------------------------------------------

    async def kb_fulltext(
        self, sight: Sight, collection_ids: Sequence[str], query: str, limit: int, filter: Mapping[str, str]
    ) -> list[ChunkHit]:
        """The chunks of the collections (those the sight admits) matching any word of `query`, best
        first; only of documents whose metadata holds every key of `filter` with its value."""
        return (await self.kb_hits(sight, collection_ids, query, limit, filter, []))[0]

    async def kb_chunks(self, sight: Sight, chunk_ids: Sequence[int], filter: Mapping[str, str]) -> list[ChunkHit]:
        """These chunks (a vector search's hits), in the order asked, less those the sight does not admit
        or whose document's metadata does not match `filter`; score 0."""
        return (await self.kb_hits(sight, [], "", 0, filter, chunk_ids))[1]

    async def kb_hits(
        self, sight: Sight, collection_ids: Sequence[str], query: str, limit: int, filter: Mapping[str, str],
        chunk_ids: Sequence[int],
    ) -> tuple[list[ChunkHit], list[ChunkHit]]:  # fmt: skip
        """`kb_fulltext`'s answer and `kb_chunks`'s in one transaction: on PostgreSQL one statement, a
        search's one round trip once it has its vectors' hits."""
        words = fulltext_words(query) if collection_ids and limit > 0 else []
        ids, wanted = list(dict.fromkeys(int(i) for i in chunk_ids)), _clean_metadata(filter)
        if not words and not ids:
            return [], []

        def work(tx: Tx) -> Hits:
            if not words:  # the chunks asked for alone
                return [], _asked(ids, tx.tuples(kbsql.CHUNKS_BY_ID, _seen(sight, ids=ids, filter=wanted)))
            params = _seen(sight, ids=list(collection_ids), q=_match(tx.dialect, words), limit=limit)
            if wanted:
                params["filter"] = wanted
            if tx.dialect == "sqlite":  # (run in process: a statement more costs no round trip)
                return _sqlite_hits(tx, params, ids, bool(wanted))
            if not ids:
                return [_hit(row) for row in tx.tuples(_text_statement(bool(wanted)), params)], []
            rows = tx.tuples(kbsql.HITS_FILTERED if wanted else kbsql.HITS, {**params, "chunks": ids})
            # Of a UNION ALL, in no order: full text's best first as its statement sorts them.
            text = sorted((_hit(row[:-1]) for row in rows if row[-1] == 1), key=lambda h: (-h.score, h.chunk_id))
            return text, _asked(ids, [row[:-1] for row in rows if row[-1] == 2])

        return await self.db.read_tx(work)


Hits = tuple[list[ChunkHit], list[ChunkHit]]  # full text's, and those of the chunks asked for
DEEPER = 4  # SQLite: how far down FTS5's own ranking the `limit` best of the collections searched are sought


def _text_statement(filtered: bool) -> kbsql.Sql:
    return kbsql.FULLTEXT_FILTERED if filtered else kbsql.FULLTEXT


def _sqlite_hits(tx: Tx, params: dict[str, Any], ids: Sequence[int], filtered: bool) -> Hits:
    """Full text first among FTS5's own best (most often all of the collections searched), the whole
    statement only when too few of those were; then the chunks asked for."""
    limit = params["limit"]  # (each statement is given a dict of its own: `Tx` encodes its JSON values in it)
    rows = tx.tuples(kbsql.FTS5_FIRST_FILTERED if filtered else kbsql.FTS5_FIRST, {**params, "deep": DEEPER * limit})
    if len(rows) < limit:
        rows = tx.tuples(_text_statement(filtered), {**params})
    if not ids:
        return [_hit(row) for row in rows], []
    asked = tx.tuples(kbsql.CHUNKS_BY_ID, {**params, "ids": ids, "filter": params.get("filter", {})})
    return [_hit(row) for row in rows], _asked(ids, asked)


def _asked(ids: Sequence[int], rows: Sequence[tuple[Any, ...]]) -> list[ChunkHit]:
    """The chunks asked for that were found, in the order asked."""
    found = {hit.chunk_id: hit for hit in map(_hit, rows)}
    return [found[i] for i in ids if i in found]


def _declare(tx: Tx, cid: str, name: str, embedding: str, now: float) -> audit.Change | None:
    """Bring an app collection in line with its declaration; what changed, for the audit log (None: nothing)."""
    row = tx.first(kbsql.DECLARED, {"cid": cid})
    after = {"name": name, "embedding": embedding}
    if row is None:
        tx.execute(kbsql.INSERT_COLLECTION, {"id": cid, "team_id": "", "origin": "app", "name": name,
                                             "embedding": embedding, "generation": 0, "created_at": now,
                                             "updated_at": now})  # fmt: skip
        return audit.Change("kb.collection.declare", f"kb/{cid}", "", None, after)
    if row.origin != "app":
        raise Conflict(f"collection '{cid}' is a team's, not the app's")
    if row.embedding != embedding:
        tx.execute(kbsql.REEMBED, {"cid": cid, "name": name, "embedding": embedding, "updated_at": now})
        tx.execute(kbsql.CLEAR_VECTORS, {"cid": cid})
    elif row.name != name:
        tx.execute(kbsql.RENAME_COLLECTION, {"cid": cid, "name": name, "updated_at": now})
    else:
        return None
    return audit.Change("kb.collection.declare", f"kb/{cid}", "", {"name": row.name, "embedding": row.embedding}, after)


def _clean_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    return {_text(str(k)): _text(str(v)) for k, v in metadata.items()}


def _document_row(document: DocumentRecord) -> dict[str, Any]:
    return {"id": document.id, "collection_id": document.collection_id, "title": document.title,
            "source": document.source, "content_hash": document.content_hash, "meta": dict(document.metadata),
            "chunk_count": document.chunk_count, "created_at": document.created_at,
            "updated_at": document.updated_at}  # fmt: skip


def _chunk_row(document: DocumentRecord, chunk: ChunkIn) -> dict[str, Any]:
    return {"document_id": document.id, "collection_id": document.collection_id, "seq": chunk.seq,
            "heading": _text(chunk.heading), "text": _text(chunk.text), "digest": chunk.digest,
            "vector": chunk.vector}  # fmt: skip
