"""What each MCP server offered when it was last listed: a replay offers a model these tools without
starting the server.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_catalogs",
        sa.Column("server_id", sa.String(128), primary_key=True),
        sa.Column("tools", sa.JSON, nullable=False),
        sa.Column("listed_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tool_catalogs")
