"""Batches and their lines (issue 23): filled in by the batch work.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
