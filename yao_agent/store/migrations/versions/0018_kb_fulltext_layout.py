"""The full-text index of the knowledge base's chunks (PostgreSQL's GIN index on `kb_chunks.fts`) takes
each new chunk's words at once rather than into a pending list, and a chunk's `tsvector` stays in its row.

With the pending list (GIN's `fastupdate`, on by default) the words of every chunk written since the
last VACUUM are kept unsorted and read in full by every search, and the planner, counting them, judges
the index dearer than reading every chunk of the collection: after a sync of 10k chunks a search read
all 10k `tsvector`s (22k buffers, 26-45 ms) where the index, merged, finds its 307 matches in 31
buffers (docs/performance.md). A write pays instead: each chunk's words go into the index's tree as it
is stored.

And a chunk's `tsvector` is kept in its row (storage MAIN): a chunk's row (text, `tsvector`, vector: some
3 KB) is over the 2 KB a row may hold before PostgreSQL moves its largest values out to the TOAST table,
and the largest was the `tsvector`, which ranking each match reads, so each match cost a TOAST look-up
too; now the vector, read only when a collection's vectors are loaded, goes out instead. Half the
buffers of a search at 10k chunks (1.8k to 0.9k, median of the bench's questions). Rows written before
keep their layout until they are written again (a `kb sync` of their document).

SQLite's FTS5 index has neither: nothing changes there.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX ix_kb_chunks_fts SET (fastupdate = off)")
        # Words already pending go into the tree now, not at the next VACUUM.
        op.execute("SELECT gin_clean_pending_list('ix_kb_chunks_fts'::regclass)")
        op.execute("ALTER TABLE kb_chunks ALTER COLUMN fts SET STORAGE MAIN")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE kb_chunks ALTER COLUMN fts SET STORAGE EXTENDED")
        op.execute("ALTER INDEX ix_kb_chunks_fts RESET (fastupdate)")
