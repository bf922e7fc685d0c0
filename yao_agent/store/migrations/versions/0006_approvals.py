"""Approvals: tool calls that wait for a person, and who decided them, when and why (CONTRACT §4.8).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tool_call_id", sa.String(128), primary_key=True),
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("server", sa.String(128), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=True),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.String(128), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_approvals_chat", "approvals", ["chat_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_approvals_chat", table_name="approvals")
    op.drop_table("approvals")
