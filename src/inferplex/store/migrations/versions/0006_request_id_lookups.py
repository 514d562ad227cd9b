"""Ledger and usage rows found by request id: what makes a late write idempotent (store/recovery.py).

A settlement or usage row whose write failed (the database unreachable, or silent past the store deadline)
is kept in the local spool (store/spool.py) and written again once the database is back. The failed write
may have committed before its connection broke, so the second write first looks for what the first left:
a `settle` ledger row, or a usage row, with the same request id. The orphan sweeper looks up settlements the
same way. Plain indexes, not unique ones: the hot path's writes stay as they were (a ledger batch, a COPY),
and only the rare replay checks, under the account's row lock, which serialises it with every other move
of that account.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_index("ix_ledger_request_id", "ledger", ["request_id"])
    op.create_index("ix_usage_request_id", "usage", ["request_id"])


def downgrade() -> None:
    op.drop_index("ix_usage_request_id", "usage")
    op.drop_index("ix_ledger_request_id", "ledger")
