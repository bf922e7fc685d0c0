"""Who answered: an assistant message names the connector and model that wrote it (CONTRACT §6), so a
chat whose role maps to a fallback chain says which link answered each turn.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("connector", sa.String(256), nullable=True))
        batch.add_column(sa.Column("model", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("model")
        batch.drop_column("connector")
