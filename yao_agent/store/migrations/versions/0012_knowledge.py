"""The knowledge base (CONTRACT §9.1): collections, their documents and the chunks searched, with a
full-text index of the chunks; and the references and citations of an assistant's message.

The full-text index is each database's own, so it is made here in its SQL rather than declared in
schema.py: on SQLite an FTS5 table over kb_chunks (its rows are the chunks' ids, its text read from
kb_chunks) kept in step by triggers; on PostgreSQL a generated tsvector column with a GIN index.
A database is only ever brought to HEAD by the migrations, so this is where a new one gets them too.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# `porter unicode61`: words are folded to lower case and stemmed ("running" finds "runs").
SQLITE_FTS = (
    "CREATE VIRTUAL TABLE kb_fts USING fts5(heading, text, content='kb_chunks', content_rowid='id', "
    "tokenize='porter unicode61')",
    "CREATE TRIGGER kb_chunks_fts_insert AFTER INSERT ON kb_chunks BEGIN "
    "INSERT INTO kb_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text); END",
    # An external-content index forgets a row when told the values it indexed for it.
    "CREATE TRIGGER kb_chunks_fts_delete AFTER DELETE ON kb_chunks BEGIN "
    "INSERT INTO kb_fts(kb_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text); END",
    "CREATE TRIGGER kb_chunks_fts_update AFTER UPDATE OF heading, text ON kb_chunks BEGIN "
    "INSERT INTO kb_fts(kb_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text); "
    "INSERT INTO kb_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text); END",
)
POSTGRES_FTS = (
    "ALTER TABLE kb_chunks ADD COLUMN fts tsvector GENERATED ALWAYS AS "
    "(to_tsvector('english', coalesce(heading, '') || ' ' || text)) STORED",
    "CREATE INDEX ix_kb_chunks_fts ON kb_chunks USING GIN (fts)",
)


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("citations", sa.JSON, nullable=True))
    op.create_table(
        "kb_collections",
        sa.Column("id", sa.String(300), primary_key=True),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("origin", sa.String(8), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("embedding", sa.String(300), nullable=False, server_default=""),
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "kb_documents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "collection_id", sa.String(300), sa.ForeignKey("kb_collections.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False, server_default=""),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("meta", sa.JSON, nullable=False),
        sa.Column("chunk_count", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_kb_documents_source", "kb_documents", ["collection_id", "source"])
    op.create_index("ix_kb_documents_hash", "kb_documents", ["collection_id", "content_hash"])
    op.create_table(
        "kb_chunks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("document_id", sa.String(64), sa.ForeignKey("kb_documents.id", ondelete="CASCADE"), nullable=False),
        sa.Column("collection_id", sa.String(300), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("heading", sa.Text, nullable=False, server_default=""),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=True),
    )
    op.create_index("ix_kb_chunks_collection", "kb_chunks", ["collection_id"])
    op.create_index("ix_kb_chunks_document", "kb_chunks", ["document_id"])
    op.create_index("ix_kb_chunks_digest", "kb_chunks", ["collection_id", "digest"])
    for statement in SQLITE_FTS if op.get_bind().dialect.name == "sqlite" else POSTGRES_FTS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("kb_chunks_fts_insert", "kb_chunks_fts_delete", "kb_chunks_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS kb_fts")
    op.drop_table("kb_chunks")
    op.drop_table("kb_documents")
    op.drop_table("kb_collections")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("citations")
