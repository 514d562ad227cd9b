"""The Files API's list (issue 23) reads one owner's files in creation order: an index on (owner, created_at,
id), so a page is an index range however many files other owners keep (media_store/files.FileRows.page).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.create_index("ix_media_files_owner_created", "media_files", ["owner", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_media_files_owner_created", table_name="media_files")
