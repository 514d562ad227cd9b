"""Per-key processors: the ones a key runs by default, and the ones it enforces.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    # Existing keys keep working unchanged: an empty list means no processors, as before.
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("default_processors", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("enforced_processors", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("enforced_processors")
        batch.drop_column("default_processors")
