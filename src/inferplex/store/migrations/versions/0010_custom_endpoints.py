"""Unify's custom endpoints (issue 21): each account's custom provider keys, stored sealed
(custom_endpoints/sealing.py: the database never holds a key in the clear), and its custom endpoints, each
naming its key by row id. A name is unique within its account, not across accounts.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.create_table(
        "custom_api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("sealed", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("account_id", "name", name="uq_custom_api_keys_account_name"),
    )
    op.create_table(
        "custom_endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("model_arg", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("account_id", "name", name="uq_custom_endpoints_account_name"),
    )


def downgrade() -> None:
    op.drop_table("custom_endpoints")
    op.drop_table("custom_api_keys")
