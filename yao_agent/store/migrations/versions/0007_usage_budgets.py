"""Operating for many teams (CONTRACT §8.2): the usage ledger, budgets per scope, admitted runs for rate
limits, and admin tokens.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "usage_ledger",
        sa.Column("step_id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("assistant_id", sa.String(256), nullable=False),
        sa.Column("connector", sa.String(256), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_usage_team", "usage_ledger", ["team_id", "at"])
    op.create_index("ix_usage_user", "usage_ledger", ["user_id", "team_id", "at"])
    op.create_table(
        "spend_days",
        sa.Column("scope_kind", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(260), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("cost_usd", sa.Float(), nullable=False),
    )
    op.create_table(
        "budgets",
        sa.Column("scope_kind", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(260), primary_key=True),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "rate_events",
        sa.Column("scope_kind", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(260), primary_key=True),
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_rate_events_scope", "rate_events", ["scope_kind", "scope_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_rate_events_scope", table_name="rate_events")
    op.drop_table("rate_events")
    op.drop_table("budgets")
    op.drop_table("spend_days")
    op.drop_index("ix_usage_user", table_name="usage_ledger")
    op.drop_index("ix_usage_team", table_name="usage_ledger")
    op.drop_table("usage_ledger")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("admin")
