"""Summaries: a `summary` message names the first and last message it covers (CONTRACT §4 item 5, §6),
and a partial index finds a chat's latest summary.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("summarises", sa.JSON(), nullable=True))
    summary = sa.text("role = 'summary'")
    op.create_index("ix_messages_summaries", "messages", ["chat_id", "seq"], sqlite_where=summary,
                    postgresql_where=summary)  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_messages_summaries", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("summarises")
