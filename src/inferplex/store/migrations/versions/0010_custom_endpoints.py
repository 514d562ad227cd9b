"""Reserved for Unify's custom endpoints (issue 21): no change yet.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
