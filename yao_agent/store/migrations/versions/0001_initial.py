"""The first schema: role settings, chats, messages, runs, steps, memory, tokens.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "role_settings",
        sa.Column("scope_kind", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(128), primary_key=True),
        sa.Column("role", sa.String(128), primary_key=True),
        sa.Column("connectors", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "chats",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("assistant_id", sa.String(256), nullable=False),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("last_status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("last_run_id", sa.String(64), nullable=True),
        sa.Column("message_count", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_chats_owner", "chats", ["user_id", "team_id", "updated_at"])
    op.create_table(
        "messages",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.JSON, nullable=True),
        sa.Column("tool_calls", sa.JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(128), nullable=True),
        sa.Column("reasoning", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ux_messages_chat_seq", "messages", ["chat_id", "seq"], unique=True)
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("assistant_id", sa.String(256), nullable=False),
        sa.Column("trace_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=True),
        sa.Column("error", sa.JSON, nullable=True),
        sa.Column("usage", sa.JSON, nullable=True),
        sa.Column("next", sa.JSON, nullable=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("resumed_from", sa.String(64), nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("duration_ms", sa.Integer, nullable=True),
    )
    op.create_index("ix_runs_chat", "runs", ["chat_id", "started_at"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "steps",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("input", sa.JSON, nullable=True),
        sa.Column("output", sa.JSON, nullable=True),
        sa.Column("error", sa.JSON, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
    )
    op.create_index("ix_steps_run", "steps", ["run_id", "seq"])
    op.create_table(
        "memory",
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("value", sa.JSON, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("hash", sa.String(128), primary_key=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )


def downgrade() -> None:
    for table in ("tokens", "memory", "steps", "runs", "messages", "chats", "role_settings"):
        op.drop_table(table)
