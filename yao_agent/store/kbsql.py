"""The knowledge base's statements (store/knowledge.py runs them), each spelled for both databases.

What a caller may see is decided in every statement, never after it: a collection is visible to a
`Sight` when it is an app collection among `apps`, or a team collection of `team` (a caller without a
team, `team` '', sees none). Lists of values (the app ids, the collections searched, chunk ids, digests,
sources kept) are one JSON-list parameter each, read back as rows by the database (SQLite `json_each`,
PostgreSQL `jsonb_array_elements_text`), so each statement compiles to one text (tx.py) however many
values it is given. Documents' metadata filters are one JSON object parameter likewise: every key must
hold its value.

Full text is each database's own (migration 0012): SQLite's FTS5 table `kb_fts` ranked by bm25 (lower
is better, so its score is negated), PostgreSQL's generated `fts` column ranked by ts_rank_cd.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    BindParameter,
    ColumnElement,
    Float,
    Integer,
    Select,
    String,
    bindparam,
    cast,
    column,
    delete,
    func,
    literal_column,
    select,
    table,
    union_all,
    update,
)
from sqlalchemy.sql import ClauseElement

from yao_agent.store.schema import kb_chunks, kb_collections, kb_documents
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql

_C, _D, _K = kb_collections.c, kb_documents.c, kb_chunks.c
_EMPTY = literal_column("''", String)
_LIMIT = bindparam("limit", type_=Integer)


_JSON_PARAMS: dict[tuple[str, str], BindParameter[Any]] = {}


def _jsonb() -> Any:
    from sqlalchemy.dialects.postgresql import JSONB  # (built with PostgreSQL's statements alone: spelled.py)

    return JSONB


def _json(dialect: str, name: str) -> BindParameter[Any]:
    """The JSON parameter `name`, one object wherever a statement uses it: two would each be encoded (tx.py),
    the second time the first's text."""
    key = (dialect, name)
    if key not in _JSON_PARAMS:
        _JSON_PARAMS[key] = bindparam(name, type_=JSON if dialect == "sqlite" else _jsonb())
    return _JSON_PARAMS[key]


def _each(dialect: str, name: str, *, numbers: bool = False) -> Select[Any]:
    """The values of the JSON list parameter `name`, as rows of one column."""
    if dialect == "sqlite":
        return select(literal_column("value", String)).select_from(func.json_each(_json(dialect, name)))
    values = func.jsonb_array_elements_text(_json(dialect, name))
    return select(cast(values, BigInteger) if numbers else values)


def visible(dialect: str) -> ColumnElement[bool]:
    """The collections a sight admits (parameters `apps`, a JSON list, and `team`)."""
    team = bindparam("team", type_=String)
    apps = (_C.origin == literal_column("'app'", String)) & _C.id.in_(_each(dialect, "apps"))
    return apps | ((_C.origin == literal_column("'team'", String)) & (_C.team_id == team) & (team != _EMPTY))


def _filtered(dialect: str) -> ColumnElement[bool]:
    """Documents whose metadata holds every key of the JSON object parameter `filter` with its value."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import JSONB

        return cast(_D.meta, JSONB).op("@>")(_json(dialect, "filter"))
    wanted = func.json_each(_json(dialect, "filter")).table_valued("key", "value").alias("wanted")
    held = func.json_each(_D.meta).table_valued("key", "value").alias("held")
    holds = select(literal_column("1", Integer)).select_from(held).where(held.c.key == wanted.c.key,
                                                                held.c.value == wanted.c.value)  # fmt: skip
    return ~select(literal_column("1", Integer)).select_from(wanted).where(~holds.exists()).exists()


def _both(build: Callable[[str], ClauseElement], columns: tuple[str, ...] = ()) -> Sql:
    return Sql(Spelled(build), columns=columns)


# --- collections ------------------------------------------------------------------------------------

_DOCUMENTS = select(func.count()).where(_D.collection_id == _C.id).scalar_subquery()
_CHUNKS = select(func.coalesce(func.sum(_D.chunk_count), 0)).where(_D.collection_id == _C.id).scalar_subquery()
# In `CollectionRecord`'s order.
_COLLECTION = (_C.id, _C.team_id, _C.origin, _C.name, _C.embedding, _C.generation, _DOCUMENTS.label("documents"),
               _CHUNKS.label("chunks"), _C.created_at, _C.updated_at)  # fmt: skip
LIST_COLLECTIONS = _both(lambda d: select(*_COLLECTION).where(visible(d)).order_by(_C.id))
ONE_COLLECTION = _both(lambda d: select(*_COLLECTION).where(visible(d), _C.id == bindparam("cid")))
# A write's first statement: the collection, if visible, locked until the write commits (PostgreSQL;
# SQLite's write lock covers it), so two writes to one collection (say two puts of one source) queue.
_SEEN = (_C.id, _C.generation, _C.embedding)
LOCK_COLLECTION = _both(lambda d: select(*_SEEN).where(visible(d), _C.id == bindparam("cid")).with_for_update())
SEEN_COLLECTION = _both(lambda d: select(*_SEEN).where(visible(d), _C.id == bindparam("cid")))
DECLARED = Sql(select(_C.origin, _C.name, _C.embedding).where(_C.id == bindparam("cid")).with_for_update())
INSERT_COLLECTION = Sql(kb_collections.insert())


def _create(dialect: str) -> ClauseElement:
    return conflict_insert(dialect, kb_collections).on_conflict_do_nothing(index_elements=["id"])


CREATE_COLLECTION = _both(_create, tuple(c.key for c in kb_collections.c))  # no row changed: it exists
RENAME_COLLECTION = Sql(update(kb_collections).where(_C.id == bindparam("cid")), columns=("name", "updated_at"))
_CHANGED = update(kb_collections).where(_C.id == bindparam("cid")).values(generation=_C.generation + 1)
CHANGED = Sql(_CHANGED, columns=("updated_at",))  # a document or vector changed: caches must be rebuilt
REEMBED = Sql(_CHANGED, columns=("name", "embedding", "updated_at"))
CLEAR_VECTORS = Sql(update(kb_chunks).where(_K.collection_id == bindparam("cid")).values(vector=None))

# --- documents --------------------------------------------------------------------------------------

_VISIBLE_DOCS = select(kb_documents).join(kb_collections, _C.id == _D.collection_id)
LIST_DOCUMENTS = _both(
    lambda d: _VISIBLE_DOCS.where(visible(d), _D.collection_id == bindparam("cid")).order_by(_D.created_at, _D.id)
)
SAME_CONTENT = _both(
    lambda d: _VISIBLE_DOCS.where(visible(d), _D.collection_id == bindparam("cid"),
                                  _D.content_hash == bindparam("hash")).order_by(_D.created_at, _D.id).limit(1)
)  # fmt: skip
OF_SOURCE = Sql(select(_D.id).where(_D.collection_id == bindparam("cid"), _D.source == bindparam("source")))
GONE_SOURCES = _both(
    lambda d: select(_D.id).where(_D.collection_id == bindparam("cid"), _D.source != _EMPTY,
                                  _D.source.not_in(_each(d, "keep")))
)  # fmt: skip
INSERT_DOCUMENT = Sql(kb_documents.insert())
# Chunks first: deleting them fires the trigger that takes them out of SQLite's full-text index.
DELETE_CHUNKS = Sql(delete(kb_chunks).where(_K.document_id == bindparam("doc")))
SUMMARY = Sql(  # what an audit row says of a document (store/audit.py)
    select(_D.title, _D.source, _D.content_hash, _D.chunk_count, _D.meta)
    .where(_D.id == bindparam("doc"), _D.collection_id == bindparam("cid"))
)  # fmt: skip
DELETE_DOCUMENT = Sql(delete(kb_documents).where(_D.id == bindparam("doc"), _D.collection_id == bindparam("cid")))

# --- chunks -----------------------------------------------------------------------------------------

INSERT_CHUNK = Sql(kb_chunks.insert(), columns=tuple(c.key for c in kb_chunks.c if c.key != "id"))
KNOWN_VECTORS = _both(
    lambda d: (
        select(_K.digest, _K.vector)
        .join(kb_collections, _C.id == _K.collection_id)
        .where(
            visible(d), _K.collection_id == bindparam("cid"), _K.vector.is_not(None), _K.digest.in_(_each(d, "digests"))
        )
    )
)
VECTORS = Sql(
    select(_K.id, _K.vector).where(_K.collection_id == bindparam("cid"), _K.vector.is_not(None)).order_by(_K.id)
)
UNEMBEDDED = _both(
    lambda d: (
        select(_K.id, _K.heading, _K.text)
        .join(kb_collections, _C.id == _K.collection_id)
        .where(visible(d), _K.collection_id == bindparam("cid"), _K.vector.is_(None))
        .order_by(_K.id)
        .limit(_LIMIT)
    )
)
SET_VECTOR = Sql(
    update(kb_chunks).where(_K.id == bindparam("chunk"), _K.collection_id == bindparam("cid")), columns=("vector",)
)

# What a hit is made of, in `ChunkHit`'s order less its score.
_HIT = (_K.id, _K.collection_id, _K.document_id, _D.title, _K.heading, _K.text, _K.seq, _D.meta)


def _with_document(chunks: Any) -> Any:
    """Chunks (or what they are joined to) with their document and collection."""
    return chunks.join(kb_documents, _D.id == _K.document_id).join(kb_collections, _C.id == _K.collection_id)


_HIT_FROM = _with_document(kb_chunks)


def _asked(dialect: str, name: str) -> ColumnElement[bool]:
    """The chunks of the JSON list parameter `name`. On PostgreSQL an array made of it, not a row set: the
    planner guesses a few elements for an array (so looks each id up in the primary key) but 100 rows for
    a set-returning function, and, before it has statistics of a fresh collection, prefers reading every
    chunk of the collection (2.2k buffers at 10k chunks, against 0.1k)."""
    if dialect == "sqlite":
        return _K.id.in_(_each(dialect, name))
    return _K.id == func.any(func.array(_each(dialect, name, numbers=True).scalar_subquery()))


def _by_id(dialect: str, name: str, filtered: bool) -> Any:
    """The visible chunks of the JSON list parameter `name`, score 0; only of documents whose metadata holds
    `filter` when `filtered`."""
    where = [_asked(dialect, name), visible(dialect)] + ([_filtered(dialect)] if filtered else [])
    return select(*_HIT, literal_column("0.0", Float).label("score")).select_from(_HIT_FROM).where(*where)


CHUNKS_BY_ID = _both(lambda d: _by_id(d, "ids", True))
_FTS = table("kb_fts", column("rowid"))  # SQLite's full-text index (migration 0012)


def _searched(dialect: str) -> ColumnElement[bool]:
    """Chunks of the collections `ids` that the sight admits: their ids, a few, listed once by a subquery.
    On PostgreSQL the chunk's `collection_id` is compared as an expression, which its index does not
    serve: before it has statistics of a fresh collection (a sync's 10k chunks, until autovacuum's next
    ANALYZE) the planner guesses a collection holds 87 chunks and reads them all through that index
    (24k buffers, 27 ms at 10k chunks; at 100k, even beside the GIN index, 100k index entries and 5.5
    ms), rather than ask the GIN index for the matches alone (docs/performance.md)."""
    chosen = select(_C.id).where(visible(dialect), _C.id.in_(_each(dialect, "ids")))
    return (_K.collection_id if dialect == "sqlite" else _K.collection_id.concat(_EMPTY)).in_(chosen)


def _of_filtered_document(dialect: str) -> ColumnElement[bool]:
    return select(literal_column("1", Integer)).where(_D.id == _K.document_id, _filtered(dialect)).exists()


def _ranked(dialect: str, filtered: bool) -> Any:
    """The ids and scores of the `limit` best matches of `q`: the chunks alone, each match's document (its
    title, its metadata) read only when `filter` has keys to test. Every match is ranked (bm25 in FTS5,
    ts_rank_cd of its `tsvector` on PostgreSQL); joining each to its document and collection as well was
    60% of SQLite's statement and, on PostgreSQL, two buffers a match (docs/performance.md)."""
    if dialect == "sqlite":
        chunk_id, score = _FTS.c.rowid, (-func.bm25(literal_column("kb_fts"))).label("score")
        matched = literal_column("kb_fts").op("MATCH")(bindparam("q", type_=String))
        source: Any = _FTS.join(kb_chunks, _K.id == _FTS.c.rowid)
    else:
        from sqlalchemy.dialects.postgresql import TSVECTOR

        query = func.to_tsquery(literal_column("'english'"), bindparam("q", type_=String))
        fts = literal_column("kb_chunks.fts", TSVECTOR)
        chunk_id, score, source = _K.id, func.ts_rank_cd(fts, query).label("score"), kb_chunks
        matched = fts.op("@@")(query)
    where = [matched, _searched(dialect)] + ([_of_filtered_document(dialect)] if filtered else [])
    return (
        select(chunk_id.label("id"), score).select_from(source).where(*where)
        .order_by(score.desc(), chunk_id).limit(_LIMIT).subquery("best")
    )  # fmt: skip


def _fulltext(dialect: str, filtered: bool) -> Any:
    """Chunks of the collections `ids` (among the visible) whose text matches `q`, best first: the best
    `limit` ranked by id and score alone, then only those read whole."""
    best = _ranked(dialect, filtered)
    chosen = best.join(kb_chunks, _K.id == best.c.id).join(kb_documents, _D.id == _K.document_id)
    return select(*_HIT, best.c.score).select_from(chosen).order_by(best.c.score.desc(), best.c.id)


FULLTEXT = _both(lambda d: _fulltext(d, False))
FULLTEXT_FILTERED = _both(lambda d: _fulltext(d, True))  # only documents whose metadata holds `filter`


def _hits(dialect: str, filtered: bool) -> ClauseElement:
    """FULLTEXT's rows (`listed` 1) and those of the chunks `chunks` (a vector search's, `listed` 2) in one
    statement: a search's one round trip to the database once it has its vectors' hits, not two."""
    text = _fulltext(dialect, filtered).subquery("text")
    asked = _by_id(dialect, "chunks", filtered).subquery("asked")
    listed = (literal_column("1", Integer).label("listed"), literal_column("2", Integer).label("listed"))
    text_rows: Any = select(*text.c, listed[0])
    asked_rows: Any = select(*asked.c, listed[1])
    return union_all(text_rows, asked_rows)


HITS = _both(lambda d: _hits(d, False))
HITS_FILTERED = _both(lambda d: _hits(d, True))


def _fts5_first(filtered: bool) -> ClauseElement:
    """SQLite's full text, cheaply when it can be: FTS5's own best `deep` matches (ranked without reading
    a chunk), then the best `limit` of them that are of the collections `ids` and the sight. When as many
    as `limit` are, they are FULLTEXT's answer exactly (every match they passed ranks below them); when
    not, the caller asks FULLTEXT. Reading each match's chunk for its collection was a third of the
    statement at 100k chunks (docs/performance.md)."""
    score = (-func.bm25(literal_column("kb_fts"))).label("score")
    matched = literal_column("kb_fts").op("MATCH")(bindparam("q", type_=String))
    deep = bindparam("deep", type_=Integer)
    top = select(_FTS.c.rowid.label("id"), score).where(matched).order_by(score.desc(), _FTS.c.rowid).limit(deep)
    best = top.subquery("top")
    chosen = best.join(kb_chunks, _K.id == best.c.id).join(kb_documents, _D.id == _K.document_id)
    where = [_searched("sqlite")] + ([_filtered("sqlite")] if filtered else [])
    return (
        select(*_HIT, best.c.score).select_from(chosen).where(*where)
        .order_by(best.c.score.desc(), best.c.id).limit(_LIMIT)
    )  # fmt: skip


FTS5_FIRST = Sql(_fts5_first(False))
FTS5_FIRST_FILTERED = Sql(_fts5_first(True))
