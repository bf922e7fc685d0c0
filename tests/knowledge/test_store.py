"""The knowledge base's storage on its own, on SQLite and PostgreSQL alike: what a caller's sight admits is
all they reach, documents come and go as a sync or an upload says, full text finds words by their stems
whatever a caller types, and vectors stay only as long as the embedding that made them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from tests.support.stores import ALICE, a_run, finished
from yao_agent.errors import Conflict, NotFound, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, Cited
from yao_agent.store import SqlStore, engine, open_engine, store_url
from yao_agent.store.knowledge import DEEPER, ChunkIn, DocumentRecord, Sight
from yao_agent.store.tx import Tx

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ACME = Sight("acme", ())
BETA = Sight("beta", ())
APP = Sight("", ("handbook",))  # a caller without a team whom the handbook's access admits
EVERYONE = Sight("acme", ("handbook", "faq"))


def vec(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def doc(doc_id: str, *, source: str = "", content_hash: str = "", meta: dict[str, str] | None = None) -> DocumentRecord:
    return DocumentRecord(doc_id, "", f"Title {doc_id}", source, content_hash or f"h-{doc_id}", meta or {}, 0, 0, 0)


def chunks(*texts: str, vectors: tuple[bytes | None, ...] = ()) -> list[ChunkIn]:
    given = vectors or (None,) * len(texts)
    return [ChunkIn(i, f"part {i}", t, f"d-{t[:20]}", v) for i, (t, v) in enumerate(zip(texts, given, strict=True))]


async def seeded(store: SqlStore) -> None:
    """The app's handbook, and one collection each for teams acme and beta, each with a document."""
    await store.kb_declare([("handbook", "Company handbook", ""), ("faq", "FAQ", "")])
    await store.kb_create("acme", "policies", "")
    await store.kb_create("beta", "notes", "")
    await store.kb_put(APP, "handbook", doc("h1"), chunks("holidays are booked in the portal"))
    await store.kb_put(ACME, "acme:policies", doc("a1", meta={"lang": "en"}, source="p.md"),
                       chunks("acme travel policy: trains first", vectors=(vec(1, 0),)))  # fmt: skip
    await store.kb_put(BETA, "beta:notes", doc("b1"), chunks("beta secret travel plans", vectors=(vec(0, 1),)))


async def test_a_team_reaches_nothing_of_another_team(store: SqlStore) -> None:
    await seeded(store)
    before = await store.kb_collection(ACME, "acme:policies")
    [acme_chunk] = await store.kb_fulltext(ACME, ["acme:policies"], "travel", 5, {})

    assert [c.id for c in await store.kb_collections(BETA)] == ["beta:notes"]
    assert await store.kb_collection(BETA, "acme:policies") is None
    assert await store.kb_documents(BETA, "acme:policies") == []
    assert await store.kb_same_content(BETA, "acme:policies", "h-a1") is None
    assert await store.kb_known_vectors(BETA, "acme:policies", ["d-acme travel policy: t"]) == {}
    assert await store.kb_unembedded(BETA, "acme:policies", 10) == []
    # Asking for acme's collection among its own finds only its own: the search is never widened.
    found = await store.kb_fulltext(BETA, ["acme:policies", "beta:notes"], "travel policy", 5, {})
    assert [h.collection_id for h in found] == ["beta:notes"]
    assert await store.kb_chunks(BETA, [acme_chunk.chunk_id], {}) == []
    for write in (
        store.kb_put(BETA, "acme:policies", doc("x"), chunks("planted")),
        store.kb_delete(BETA, "acme:policies", "a1"),
        store.kb_delete_missing(BETA, "acme:policies", []),
        store.kb_vectors(BETA, "acme:policies"),
        store.kb_set_vectors(BETA, "acme:policies", "", {acme_chunk.chunk_id: vec(0, 0)}),
    ):
        with pytest.raises(NotFound, match="no knowledge collection 'acme:policies'"):
            await write
    assert await store.kb_collection(ACME, "acme:policies") == before  # nothing of it changed
    assert (await store.kb_vectors(ACME, "acme:policies"))[2] == vec(1, 0)


async def test_app_collections_only_when_admitted_and_team_ones_only_with_that_team(store: SqlStore) -> None:
    await seeded(store)
    assert [c.id for c in await store.kb_collections(APP)] == ["handbook"]
    assert [c.id for c in await store.kb_collections(ACME)] == ["acme:policies"]
    assert [c.id for c in await store.kb_collections(EVERYONE)] == ["acme:policies", "faq", "handbook"]
    assert await store.kb_collections(Sight("", ())) == []
    # A team collection's id among the app ids does not admit it: only its own team does.
    assert await store.kb_collections(Sight("", ("acme:policies", "beta:notes"))) == []
    assert await store.kb_fulltext(Sight("", ("acme:policies",)), ["acme:policies"], "travel", 5, {}) == []
    assert await store.kb_fulltext(ACME, ["handbook"], "holidays", 5, {}) == []
    assert [h.document_id for h in await store.kb_fulltext(APP, ["handbook"], "holidays", 5, {})] == ["h1"]
    acme = await store.kb_collection(EVERYONE, "acme:policies")
    assert acme is not None and (acme.origin, acme.team_id, acme.documents, acme.chunks) == ("team", "acme", 1, 1)


async def test_collections_are_created_once_and_app_ids_are_the_apps(store: SqlStore) -> None:
    created = await store.kb_create("acme", "policies", "use::embedding")
    assert (created.id, created.name, created.embedding, created.generation) == ("acme:policies", "policies",
                                                                                 "use::embedding", 0)  # fmt: skip
    assert await store.kb_collection(ACME, "acme:policies") == created
    with pytest.raises(Conflict, match="already has a knowledge collection named 'policies'"):
        await store.kb_create("acme", "policies", "")
    with pytest.raises(UsageError, match="needs a team"):
        await store.kb_create("", "policies", "")
    for name in ("", "a/b", "our policies", "-x", "x?y"):  # its id is one segment of a URL, as it is
        with pytest.raises(UsageError, match="collection name"):
            await store.kb_create("acme", name, "")
    with pytest.raises(UsageError, match="no ':'"):
        await store.kb_declare([("acme:policies", "Taken over", "")])
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_declare([("handbook", "The handbook", "")])  # renamed: nothing to search changed
    handbook = await store.kb_collection(APP, "handbook")
    assert handbook is not None and (handbook.name, handbook.origin, handbook.generation) == ("The handbook", "app", 0)


async def test_documents_are_put_replaced_by_source_and_deleted(store: SqlStore) -> None:
    await store.kb_create("acme", "docs", "")
    cid = "acme:docs"
    generations: list[int] = []

    async def generation() -> int:
        found = await store.kb_collection(ACME, cid)
        assert found is not None
        generations.append(found.generation)
        return found.generation

    await generation()
    put = await store.kb_put(ACME, cid, doc("d1", source="guide.md", meta={"k": "v"}), chunks("one", "two"))
    assert (put.collection_id, put.chunk_count, put.metadata) == (cid, 2, {"k": "v"}) and put.created_at > 0
    await store.kb_put(ACME, cid, doc("u1"), chunks("an upload"))
    await store.kb_put(ACME, cid, doc("u2"), chunks("another upload"))  # uploads never replace each other
    await generation()
    # The same file synced again: its new version replaces the old, chunks and all.
    await store.kb_put(ACME, cid, doc("d2", source="guide.md", content_hash="h-new"), chunks("three"))
    await generation()
    assert [d.id for d in await store.kb_documents(ACME, cid)] == ["u1", "u2", "d2"]
    assert await store.kb_fulltext(ACME, [cid], "one two", 5, {}) == []
    assert [h.text for h in await store.kb_fulltext(ACME, [cid], "three", 5, {})] == ["three"]
    same = await store.kb_same_content(ACME, cid, "h-new")
    assert same is not None and same.id == "d2" and await store.kb_same_content(ACME, cid, "h-d1") is None

    await store.kb_put(ACME, cid, doc("d3", source="old/notes.md"), chunks("notes"))
    assert await store.kb_delete_missing(ACME, cid, ["guide.md"]) == 1  # notes.md is gone; uploads stay
    await generation()
    assert [d.id for d in await store.kb_documents(ACME, cid)] == ["u1", "u2", "d2"]
    assert await store.kb_delete_missing(ACME, cid, ["guide.md"]) == 0
    assert await store.kb_delete(ACME, cid, "u1") and not await store.kb_delete(ACME, cid, "u1")
    await generation()
    assert generations == [0, 3, 4, 6, 7]  # each change once: three puts, a replacing put, a put and a sync, a delete
    assert [h.document_id for h in await store.kb_fulltext(ACME, [cid], "upload", 5, {})] == ["u2"]  # u1's: gone
    collection = await store.kb_collection(ACME, cid)
    assert collection is not None and (collection.documents, collection.chunks) == (2, 2)


async def test_full_text_finds_words_by_their_stem_best_match_first(store: SqlStore) -> None:
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_put(APP, "handbook", doc("h1"), [
        ChunkIn(0, "Morning routine", "The office opens at nine and the runner runs every morning.", "a", None),
        ChunkIn(1, "Running", "Running shoes are provided; running clubs meet after running practice.", "b", None),
        ChunkIn(2, "Parking", "Cars park in the basement.", "c", None),
    ])  # fmt: skip
    found = await store.kb_fulltext(APP, ["handbook"], "Running", 5, {})
    assert [h.seq for h in found] == [1, 0]  # "runs" is found by its stem; more matches rank higher
    assert found[0].score > found[1].score
    assert (found[0].title, found[0].heading, found[0].document_id) == ("Title h1", "Running", "h1")
    assert [h.seq for h in await store.kb_fulltext(APP, ["handbook"], "PARKED cars", 5, {})] == [2]
    assert len(await store.kb_fulltext(APP, ["handbook"], "running basement", 1, {})) == 1  # the limit
    assert await store.kb_fulltext(APP, ["handbook"], "submarine", 5, {}) == []
    assert await store.kb_fulltext(APP, [], "running", 5, {}) == []


async def test_the_limit_counts_only_the_chunks_a_caller_sees_and_the_filter_keeps(store: SqlStore) -> None:
    """The best matches are chosen among the admitted chunks, then read whole (SQLite ranks first and
    reads the texts after): better matches elsewhere never take a place."""
    await seeded(store)
    await store.kb_put(BETA, "beta:notes", doc("b2"), chunks("travel travel travel policy policy"))
    await store.kb_put(ACME, "acme:policies", doc("a2", meta={"lang": "fr"}), chunks("travel travel policy policy"))
    [best] = await store.kb_fulltext(ACME, ["acme:policies", "beta:notes"], "travel policy", 1, {"lang": "en"})
    assert (best.document_id, best.text, best.metadata) == ("a1", "acme travel policy: trains first", {"lang": "en"})
    found = await store.kb_fulltext(ACME, ["acme:policies"], "travel policy", 5, {})
    assert [h.document_id for h in found] == ["a2", "a1"]
    assert found[0].score > found[1].score > 0


async def test_the_full_text_index_keeps_no_pending_list_and_tsvectors_stay_in_their_rows(store: SqlStore) -> None:
    """Migration 0018 (PostgreSQL): a GIN index's pending list is read whole by every search until a VACUUM
    merges it, and makes the planner pass the index by; a `tsvector` moved out of its row costs each match
    a TOAST look-up when it is ranked (docs/performance.md)."""
    if store.db.dialect != "postgresql":
        pytest.skip("PostgreSQL's settings")
    options = "SELECT reloptions FROM pg_class WHERE relname = 'ix_kb_chunks_fts'"
    storage = "SELECT attstorage FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass AND attname = 'fts'"
    found = await store.db.read_tx(lambda tx: [tx.tuples(text(sql), {})[0][0] for sql in (options, storage)])
    assert found == [["fastupdate=off"], "m"]


HOSTILE = [
    '"', "'", '"running', "run*", "*", "heading:running", ":", "NEAR(running parking)", "running NEAR parking",
    "a & b | !c", "!!", "(", ")", "running AND NOT parking", "'; DROP TABLE kb_chunks; --", "%", "_", "\\",
    "running' OR '1'='1", "<->", "running:*", "^running", "-running", "+", "\x00", "  ", "", "😀", "NOT",
]  # fmt: skip


@pytest.mark.parametrize("filter_", [{}, {"k": "v"}])
async def test_hostile_query_text_is_only_ever_words(store: SqlStore, filter_: dict[str, str]) -> None:
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_put(APP, "handbook", doc("h1", meta={"k": "v"}), chunks("running shoes", "parking spaces"))
    for query in HOSTILE:
        found = await store.kb_fulltext(APP, ["handbook"], query, 5, filter_)
        assert {h.text for h in found} <= {"running shoes", "parking spaces"}, query
    found = await store.kb_fulltext(APP, ["handbook"], "running' OR 'x'='x", 5, filter_)
    assert [h.text for h in found] == ["running shoes"]  # its words, as words
    assert len(await store.kb_documents(APP, "handbook")) == 1


async def test_a_filter_keeps_documents_whose_metadata_holds_every_pair(store: SqlStore) -> None:
    await store.kb_declare([("handbook", "Handbook", "")])
    await store.kb_put(APP, "handbook", doc("en", meta={"lang": "en", "team": "ops"}), chunks("travel in english"))
    await store.kb_put(APP, "handbook", doc("fr", meta={"lang": "fr", "team": "ops"}), chunks("travel en français"))
    await store.kb_put(APP, "handbook", doc("odd", meta={'la"ng.$': "x'y"}), chunks("travel oddly"))

    async def docs(**wanted: str) -> list[str]:
        return sorted(h.document_id for h in await store.kb_fulltext(APP, ["handbook"], "travel", 9, wanted))

    assert await docs() == ["en", "fr", "odd"]
    assert await docs(lang="fr") == ["fr"]
    assert await docs(team="ops") == ["en", "fr"]
    assert await docs(team="ops", lang="en") == ["en"]
    assert await docs(team="ops", lang="de") == []
    assert await docs(missing="x") == []
    assert await docs(**{'la"ng.$': "x'y"}) == ["odd"]
    ids = [h.chunk_id for h in await store.kb_fulltext(APP, ["handbook"], "travel", 9, {})]
    kept = await store.kb_chunks(APP, list(reversed(ids)), {"lang": "en"})
    assert [(h.document_id, h.score, h.metadata) for h in kept] == [("en", 0.0, {"lang": "en", "team": "ops"})]
    assert [h.chunk_id for h in await store.kb_chunks(APP, list(reversed(ids)), {})] == list(reversed(ids))


async def test_one_statement_answers_as_full_text_and_the_chunks_asked_for_would(store: SqlStore) -> None:
    """A search's rows in one round trip (`kb_hits`): full text's best, and the vectors' chunks in the order
    asked, each as its own call finds them: the sight, the filter and the limit alike."""
    await seeded(store)
    await store.kb_put(ACME, "acme:policies", doc("a2", meta={"lang": "fr"}), chunks("travel travel policy policy"))
    wanted = ["acme:policies", "beta:notes"]
    theirs = [h.chunk_id for h in await store.kb_fulltext(BETA, ["beta:notes"], "travel", 5, {})]
    for filter_ in ({}, {"lang": "en"}, {"lang": "de"}):
        text = await store.kb_fulltext(ACME, wanted, "travel policy", 5, filter_)
        asked = [*reversed([h.chunk_id for h in text]), *theirs, 999_999]  # another team's and none are dropped
        found = await store.kb_hits(ACME, wanted, "travel policy", 5, filter_, asked)
        assert found == (text, await store.kb_chunks(ACME, asked, filter_))
        assert [h.chunk_id for h in found[1]] == [h.chunk_id for h in reversed(text)]
    assert [h.document_id for h in (await store.kb_hits(ACME, wanted, "travel policy", 1, {}, theirs))[0]] == ["a2"]
    assert await store.kb_hits(ACME, [], "travel", 5, {}, []) == ([], [])


async def test_full_text_finds_a_collections_matches_below_many_better_ones_of_another(store: SqlStore) -> None:
    """SQLite looks among FTS5's own best matches first (DEEPER times the limit); when another collection's
    fill them, the whole ranking is read: the answer never depends on which way it was found."""
    await seeded(store)
    many = [f"travel travel travel plans {n}" for n in range(2 * DEEPER + 1)]
    await store.kb_put(BETA, "beta:notes", doc("b2"), chunks(*many))
    [found] = await store.kb_fulltext(ACME, ["acme:policies"], "travel", 1, {})
    assert found.text == "acme travel policy: trains first"
    assert len(await store.kb_fulltext(BETA, ["beta:notes"], "travel", 3, {})) == 3  # (theirs: the first look)


async def test_vectors_known_by_digest_and_read_in_id_order(store: SqlStore) -> None:
    await store.kb_declare([("handbook", "Handbook", "use::embedding")])
    put = await store.kb_put(APP, "handbook", doc("h1"), [
        ChunkIn(0, "", "alpha", "da", vec(1, 0)), ChunkIn(1, "", "beta", "db", None),
        ChunkIn(2, "", "gamma", "dc", vec(0, 1)),
    ])  # fmt: skip
    assert put.chunk_count == 3
    assert await store.kb_known_vectors(APP, "handbook", ["da", "db", "dx", "da"]) == {"da": vec(1, 0)}
    generation, ids, vectors = await store.kb_vectors(APP, "handbook")
    assert len(ids) == 2 and ids == sorted(ids) and vectors == vec(1, 0) + vec(0, 1)
    collection = await store.kb_collection(APP, "handbook")
    assert collection is not None and generation == collection.generation
    assert [t for _, _, t in await store.kb_unembedded(APP, "handbook", 10)] == ["beta"]


async def test_a_new_embedding_clears_the_vectors_until_they_are_made_again(store: SqlStore) -> None:
    await store.kb_declare([("handbook", "Handbook", "use::embedding")])
    await store.kb_put(APP, "handbook", doc("h1"), chunks("alpha", "beta", vectors=(vec(1, 0), vec(0, 1))))
    generation, ids, _ = await store.kb_vectors(APP, "handbook")
    await store.kb_declare([("handbook", "Handbook", "use::embedding")])  # unchanged: vectors stay
    assert await store.kb_vectors(APP, "handbook") == (generation, ids, vec(1, 0) + vec(0, 1))

    await store.kb_declare([("handbook", "Handbook", "use::bigger")])
    assert await store.kb_vectors(APP, "handbook") == (generation + 1, [], b"")
    assert await store.kb_known_vectors(APP, "handbook", ["d-alpha"]) == {}
    todo = await store.kb_unembedded(APP, "handbook", 10)
    assert [(i, t) for i, _, t in todo] == [(ids[0], "alpha"), (ids[1], "beta")]
    assert len(await store.kb_unembedded(APP, "handbook", 1)) == 1
    # Vectors made with the embedding before are refused; the new one's are kept.
    assert await store.kb_set_vectors(APP, "handbook", "use::embedding", {ids[0]: vec(1, 1, 1)}) == 0
    assert await store.kb_set_vectors(APP, "handbook", "use::bigger", {ids[0]: vec(1, 1, 1), 999_999: vec(0)}) == 1
    assert await store.kb_vectors(APP, "handbook") == (generation + 2, [ids[0]], vec(1, 1, 1))
    assert await store.kb_fulltext(APP, ["handbook"], "alpha", 5, {})  # full text never depended on them


async def test_an_assistant_message_keeps_its_references_and_citations(store: SqlStore) -> None:
    run = a_run()
    await store.start_run(ALICE, run, [ChatMessage("m1", "user", "holidays?", run_id=run.id)])
    reference = {"n": 1, "collection": "handbook", "document_id": "h1", "title": "Leave", "text": "Book in the portal",
                 "score": 1.5, "source": "kb", "metadata": {"lang": "en"}}  # fmt: skip
    cited = Cited((reference,), (1,), (7,))
    answer = ChatMessage("m2", "assistant", "Use the portal [1] [7].", run_id=run.id, cited=cited)
    await store.finish_run(ALICE, finished(run), [answer], [])
    history = await store.history(ALICE, "c1")
    assert history[0].cited is None and history[1].cited == cited
    shown = history[1].to_api()
    assert (shown.get("references"), shown.get("citations"), shown.get("unknown_citations")) == ([reference], [1], [7])
    assert "references" not in history[0].to_api()


def _alembic_to(url: str, revision: str) -> None:
    """Bring the database to `revision` (down from HEAD if it is there: the PostgreSQL database is shared)."""
    config = Config()
    config.set_main_option("script_location", str(Path(engine.__file__).parent / "migrations"))
    sync = create_engine(store_url(url, Path("/")))
    try:
        with sync.begin() as conn:
            config.attributes["connection"] = conn
            current = MigrationContext.configure(conn).get_current_revision()
            (command.downgrade if current is not None and current > revision else command.upgrade)(config, revision)
    finally:
        sync.dispose()


async def test_a_store_at_0011_is_migrated_keeping_its_data_and_searches_what_comes_after(
    store_raw_url: str, tmp_path: Path
) -> None:
    _alembic_to(store_raw_url, "0011")
    sync = create_engine(store_url(store_raw_url, tmp_path))
    with sync.begin() as conn:
        conn.execute(text("INSERT INTO chats (id, user_id, team_id, assistant_id, title, created_at, updated_at, "
                          "last_status, message_count) "
                          "VALUES ('c1', 'alice', 'acme', 'a', 'old', 1, 1, 'completed', 1)"))  # fmt: skip
        conn.execute(text("INSERT INTO messages (id, chat_id, seq, role, content, status, created_at) "
                          "VALUES ('m1', 'c1', 1, 'user', '\"kept\"', 'completed', 1)"))  # fmt: skip
    sync.dispose()

    store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))
    try:
        [kept] = await store.history(Identity("alice", "acme"), "c1")
        assert (kept.content, kept.cited) == ("kept", None)
        await store.kb_declare([("handbook", "Handbook", "")])
        await store.kb_put(APP, "handbook", doc("h1"), chunks("migrated stores search too"))
        assert [h.text for h in await store.kb_fulltext(APP, ["handbook"], "searching", 5, {})] == [
            "migrated stores search too"
        ]
        assert await store.db.read_tx(lambda tx: _revision(tx)) == engine.HEAD
    finally:
        await store.aclose()


def _revision(tx: Tx) -> str:
    return str(tx.scalar(text("SELECT version_num FROM alembic_version")))


def test_function_words_are_left_out_of_a_full_text_query_unless_they_are_all_it_has() -> None:
    from yao_agent.store.knowledge import fulltext_words

    assert fulltext_words("How many days of LEAVE do I get? Leave!") == ["many", "days", "leave", "get"]
    assert fulltext_words("what is it") == ["what", "is", "it"]  # nothing else to look for
