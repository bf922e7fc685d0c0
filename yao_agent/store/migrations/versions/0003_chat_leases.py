"""Chat leases: one active run per chat across server processes.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_leases",
        sa.Column("chat_id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chat_leases")
