"""Stored responses (issue 23): one row per stored `/v1/responses` answer (responses_api/store.py), and the
stream events of background ones, one row each (`response_events`), so a response outlives the request and the
replica that made it.

`history` is what a follow-up (`previous_response_id`) sends upstream before its own input: the previous
row's history, then this request's input items, then its output items, written in the same statement as the
answer, before the caller receives it. `claimed_by`/`claimed_until` are a background run's lease;
`expires_at` is indexed for the retention sweep.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(40)),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("scopes", sa.Text),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("background", sa.Boolean, nullable=False),
        sa.Column("previous_response_id", sa.String(64)),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("input_items", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=False),
        sa.Column("history", sa.Text),
        sa.Column("request_id", sa.String(64)),
        sa.Column("cost_micros", sa.BigInteger),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("completed_at", sa.Float),
        sa.Column("expires_at", sa.Float),
        sa.Column("next_run_at", sa.Float),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
    )
    op.create_index("ix_responses_expires_at", "responses", ["expires_at"])
    op.create_index("ix_responses_next_run_at", "responses", ["next_run_at"])
    op.create_table(
        "response_events",
        sa.Column("response_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("data", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("response_events")
    op.drop_index("ix_responses_next_run_at", table_name="responses")
    op.drop_index("ix_responses_expires_at", table_name="responses")
    op.drop_table("responses")
