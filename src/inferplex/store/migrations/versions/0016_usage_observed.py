"""Placeholder (issue 24, helper D): usage columns and the hourly and daily rollups.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
