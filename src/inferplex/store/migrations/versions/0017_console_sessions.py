"""Placeholder (issue 24, helper E1: the console's sessions): filled by its owner.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
