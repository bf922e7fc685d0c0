"""What a run decided, kept with it (CONTRACT §4 "A resume continues the same run's state"): the model
turns made, the loop detector's window, retries, continuations, `ctx.call` counts and what the Create
hook chose. Written with every journal commit, so a run killed at any step is resumed with all of it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("carry", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("carry")
