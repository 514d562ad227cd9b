"""Reserved for the monthly spending caps per account and per key (issue 21, Inferada's 402): no change yet.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
