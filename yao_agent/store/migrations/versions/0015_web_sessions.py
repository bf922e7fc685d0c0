"""The web page's sign-in sessions (OIDC): kept in the store, so every worker knows them and signing out
ends one everywhere. Only a hash of a session's id is kept; the id itself lives in the browser's cookie.

Revision ID: 0015
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("hash", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("operator", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_web_sessions_expires", "web_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("web_sessions")
