"""Replicas' liveness leases (issue 25): one row per serving replica, renewed while it runs, so that when one
is lost (killed, its machine gone) the others release the reservations it held within the lease instead of
the orphan bound (store/liveness.py). Its id is the note of each reservation it makes.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("alive_until", sa.Float, nullable=False),
        sa.Column("from_id", sa.BigInteger, nullable=False),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
    )


def downgrade() -> None:
    op.drop_table("replicas")
