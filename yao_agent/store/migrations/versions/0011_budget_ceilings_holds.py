"""Budgets enforced before every model call (CONTRACT §8.2): the operator's ceilings kept apart from a team
admin's budgets (the lower binds), and the holds of model calls in flight, which reserve what each call may
still cost so that processes sharing the database do not spend past a budget together.

Budgets set before this revision stay as they were written, now read as a team admin's: each is held to
the operator's ceiling (app.yml's `budgets`, or `yao-agent budgets set`) from here on.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.add_column(sa.Column("ceilings", sa.JSON, nullable=True))
    op.create_table(
        "budget_holds",
        sa.Column("scope_kind", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(260), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_holds")
    with op.batch_alter_table("budgets") as batch:
        batch.drop_column("ceilings")
