"""Stored responses and background responses (issue 23): filled in by the Responses API's work.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
