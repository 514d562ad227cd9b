"""Alerts (issue 24): the webhook deliveries waiting to go out or already sent, every try at each, and the
alerts already raised that must not be raised twice (observe/alerts_outbox.py).

`alert_deliveries` is a durable outbox: one row per event and webhook, due at `next_attempt_at` (NULL once
delivered or given up), leased to one replica at a time (`claimed_by`/`claimed_until`, store/leasing.py), so a
replica that stops mid-delivery leaves the row to the next. `alert_attempts` keeps each try (status, error,
time taken). `alert_marks` holds one row per alert that fires at most once (a budget threshold of an
account or key in a month, say): the event is written only by the transaction whose insert of its mark
succeeds, so replicas that see the same crossing together raise it once.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("event_id", sa.String(40), nullable=False),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("hook", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("next_attempt_at", sa.Float),
        sa.Column("delivered_at", sa.Float),
        sa.Column("last_status", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("claimed_by", sa.String(40)),
        sa.Column("claimed_until", sa.Float),
    )
    op.create_index("ix_alert_deliveries_next_attempt_at", "alert_deliveries", ["next_attempt_at"])
    op.create_index("ix_alert_deliveries_created_at", "alert_deliveries", ["created_at"])
    op.create_table(
        "alert_attempts",
        sa.Column("delivery_id", sa.String(40), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("latency_ms", sa.Float, nullable=False),
    )
    op.create_table(
        "alert_marks",
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_alert_marks_created_at", "alert_marks", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_alert_marks_created_at", table_name="alert_marks")
    op.drop_table("alert_marks")
    op.drop_table("alert_attempts")
    op.drop_index("ix_alert_deliveries_created_at", table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_next_attempt_at", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
