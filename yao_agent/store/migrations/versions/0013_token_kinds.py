"""Token kinds, expiry and use (CONTRACT §9.3): each token gets a public id (random, nothing of its secret),
the operator's kind, an optional expiry and when it was last used.

Tokens made before this revision get an id of their own here; they never expire and are no operator's.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("operator", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("expires_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.Float, nullable=True))
    bind = op.get_bind()
    for (hashed,) in bind.execute(sa.text("SELECT hash FROM tokens")).all():
        # The same spelling as a new token's id (yao_agent/store/tokens.py), drawn afresh: not from the hash.
        made = "tok_" + secrets.token_urlsafe(12)
        bind.execute(sa.text("UPDATE tokens SET id = :id WHERE hash = :hash"), {"id": made, "hash": hashed})
    with op.batch_alter_table("tokens") as batch:
        batch.alter_column("id", existing_type=sa.String(40), nullable=False)
        batch.create_index("ux_tokens_id", ["id"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_index("ux_tokens_id")
        batch.drop_column("last_used_at")
        batch.drop_column("expires_at")
        batch.drop_column("operator")
        batch.drop_column("id")
