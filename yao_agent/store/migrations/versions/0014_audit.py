"""The audit log (CONTRACT §9.3): one hash-chained row per change of tokens, role mappings, budgets,
knowledge, approval decisions and app reloads, and the chain's head (its last row's number and hash).

The head's one row is made here: appending locks it, so it must exist before the first append.

Revision ID: 0014
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor_user_id", sa.String(128), nullable=True),
        sa.Column("actor_team_id", sa.String(128), nullable=True),
        sa.Column("actor_kind", sa.String(16), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("after", sa.JSON, nullable=True),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_team", "audit", ["team_id", "at"])
    op.create_index("ix_audit_actor_team", "audit", ["actor_team_id", "at"])
    head = op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.bulk_insert(head, [{"id": 1, "seq": 0, "hash": ""}])


def downgrade() -> None:
    op.drop_table("audit_head")
    op.drop_index("ix_audit_actor_team", table_name="audit")
    op.drop_index("ix_audit_team", table_name="audit")
    op.drop_index("ix_audit_at", table_name="audit")
    op.drop_table("audit")
