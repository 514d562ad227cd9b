"""Media jobs (issue 22): one durable row per asynchronous media job (a video), so a job outlives the request
that made it and the replica that polls it (jobs/rows.py). `next_poll_at` is when a replica should next look
at it (NULL: nothing left to do), `claimed_by`/`claimed_until` the lease of the replica looking; the
reservation the job holds (`request_id`, `reserved_micros`) is settled once (`settled`).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.create_table(
        "media_jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(40)),
        sa.Column("key_id", sa.String(40)),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("deployment", sa.String(400), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("progress", sa.Integer, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("seconds", sa.String(8), nullable=False),
        sa.Column("size", sa.String(16), nullable=False),
        sa.Column("end_user", sa.String(256)),
        sa.Column("remixed_from", sa.String(40)),
        sa.Column("upstream_id", sa.Text),
        sa.Column("upstream_state", sa.Text),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("reserved_micros", sa.BigInteger, nullable=False),
        sa.Column("cost_micros", sa.BigInteger),
        sa.Column("settled", sa.Boolean, nullable=False),
        sa.Column("files", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("completed_at", sa.Float),
        sa.Column("expires_at", sa.Float),
        sa.Column("deleted_at", sa.Float),
        sa.Column("next_poll_at", sa.Float),
        sa.Column("polls", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
    )
    op.create_index("ix_media_jobs_owner_created", "media_jobs", ["owner", "created_at"])
    op.create_index("ix_media_jobs_next_poll_at", "media_jobs", ["next_poll_at"])
    op.create_index("ix_media_jobs_account_status", "media_jobs", ["account_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_media_jobs_account_status", table_name="media_jobs")
    op.drop_index("ix_media_jobs_next_poll_at", table_name="media_jobs")
    op.drop_index("ix_media_jobs_owner_created", table_name="media_jobs")
    op.drop_table("media_jobs")
