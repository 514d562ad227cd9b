"""Placeholder (issue 24, helper C: alert deliveries and the thresholds already crossed): filled by its owner.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
