"""Media files (issue 22): the metadata of every file the gateway stores (generated images, speech, video, and
uploads), one row each; the bytes live in the configured backend (`backend`: disk or s3) under `location`.
`expires_at` is indexed for the retention sweep (media_store/store.py), which deletes rows past it with their
bytes.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "media_files",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("content_type", sa.String(200), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("purpose", sa.String(40), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
    )
    op.create_index("ix_media_files_expires_at", "media_files", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_media_files_expires_at", table_name="media_files")
    op.drop_table("media_files")
