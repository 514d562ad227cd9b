"""The admin console's sessions (issue 24, console/session.py): one row per signed-in browser. The row is
found by the SHA-256 of the cookie's random value (`id_hash`), so a copy of the table signs nobody in; it
names the key that signed in (`key_id`, "master" for the master key) and the fingerprint of that key's
secret at the time (`binding`), so a revoked, expired or rotated key ends its sessions. `csrf` is the
session's form token. Expired rows are deleted at the next sign-in (`expires_at` indexed).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("binding", sa.String(128), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_console_sessions_expires", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires", table_name="console_sessions")
    op.drop_table("console_sessions")
