"""Batches (issue 23): one row per batch and one per line of it, so a batch outlives the request that made it
and the process that runs it (batches/rows.py). A line is `pending` until a worker claims it under a lease
(`claimed_by`/`claimed_until`), `running` while it is run, then ends `succeeded`, `errored`, `cancelled` or
`expired`, with its result, its cost and the reservation it holds (`request_id`, `reserved_micros`), which is
settled once (`settled`). The batch row keeps the line counts and the cost, updated with each line's end.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(48), primary_key=True),
        sa.Column("dialect", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(40)),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("scopes", sa.Text),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("input_file_id", sa.String(64)),
        sa.Column("completion_window", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("errors", sa.Text),
        sa.Column("metadata", sa.Text),
        sa.Column("output_file_id", sa.String(64)),
        sa.Column("error_file_id", sa.String(64)),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("completed", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("cancelled", sa.Integer, nullable=False),
        sa.Column("expired", sa.Integer, nullable=False),
        sa.Column("cost_micros", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("in_progress_at", sa.Float),
        sa.Column("finalizing_at", sa.Float),
        sa.Column("completed_at", sa.Float),
        sa.Column("failed_at", sa.Float),
        sa.Column("expired_at", sa.Float),
        sa.Column("cancelling_at", sa.Float),
        sa.Column("cancelled_at", sa.Float),
        sa.Column("deleted_at", sa.Float),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
    )
    op.create_index("ix_batches_owner_created", "batches", ["owner", "created_at"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(48), primary_key=True),
        sa.Column("line_no", sa.Integer, primary_key=True),
        sa.Column("custom_id", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
        sa.Column("request_id", sa.String(64)),
        sa.Column("status_code", sa.Integer),
        sa.Column("result", sa.Text),
        sa.Column("cost_micros", sa.BigInteger, nullable=False),
        sa.Column("reserved_micros", sa.BigInteger, nullable=False),
        sa.Column("settled", sa.Boolean, nullable=False),
        sa.Column("ended_at", sa.Float),
    )
    op.create_index("ix_batch_lines_status", "batch_lines", ["status", "claimed_until"])
    op.create_index("ix_batch_lines_batch_status", "batch_lines", ["batch_id", "status"])
    op.create_index("ix_batch_lines_settled", "batch_lines", ["settled"])


def downgrade() -> None:
    op.drop_index("ix_batch_lines_settled", table_name="batch_lines")
    op.drop_index("ix_batch_lines_batch_status", table_name="batch_lines")
    op.drop_index("ix_batch_lines_status", table_name="batch_lines")
    op.drop_table("batch_lines")
    op.drop_index("ix_batches_status", table_name="batches")
    op.drop_index("ix_batches_owner_created", table_name="batches")
    op.drop_table("batches")
