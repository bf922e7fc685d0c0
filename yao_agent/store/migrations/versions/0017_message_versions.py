"""Answer versions: a message an edit or a regeneration replaced names the run that replaced it. It is
kept (nothing is deleted) and browsable, but no longer part of the chat a model is sent.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("replaced_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("replaced_by")
