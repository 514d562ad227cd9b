"""Accounts, API keys, the credit ledger and the usage log.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True)


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("balance_micros", sa.BigInteger, nullable=False),
        sa.Column("rpm", sa.Integer),
        sa.Column("tpm", sa.Integer),
        sa.Column("max_concurrent", sa.Integer),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(40)),
        sa.Column("scopes", sa.JSON, nullable=False),
        sa.Column("allowed_models", sa.JSON, nullable=False),
        sa.Column("allowed_ips", sa.JSON, nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("rpm", sa.Integer),
        sa.Column("tpm", sa.Integer),
        sa.Column("max_concurrent", sa.Integer),
        sa.Column("expires_at", sa.Float),
        sa.Column("revoked_at", sa.Float),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_api_keys_account_id", "api_keys", ["account_id"])
    op.create_table(
        "ledger",
        _id(),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("amount_micros", sa.BigInteger, nullable=False),
        sa.Column("request_id", sa.String(64)),
        sa.Column("key_id", sa.String(40)),
        sa.Column("note", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_ledger_account_id", "ledger", ["account_id", "id"])
    op.create_table(
        "usage",
        _id(),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("key_id", sa.String(40)),
        sa.Column("account_id", sa.String(40)),
        sa.Column("model", sa.String(200)),
        sa.Column("provider", sa.String(200)),
        sa.Column("deployment", sa.String(200)),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("cached_tokens", sa.Integer, nullable=False),
        sa.Column("estimated", sa.Integer, nullable=False),
        sa.Column("cost_micros", sa.BigInteger, nullable=False),
        sa.Column("total_ms", sa.Float),
        sa.Column("upstream_ms", sa.Float),
        sa.Column("ttft_ms", sa.Float),
        sa.Column("queued_ms", sa.Float),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("end_user", sa.String(200)),
        sa.Column("request_body", sa.JSON),
        sa.Column("response_body", sa.JSON),
    )
    op.create_index("ix_usage_key_time", "usage", ["key_id", "created_at"])
    op.create_index("ix_usage_model_time", "usage", ["model", "created_at"])
    op.create_index("ix_usage_account_time", "usage", ["account_id", "created_at"])
    op.create_index("ix_usage_time", "usage", ["created_at"])
