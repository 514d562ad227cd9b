"""The schema, as SQLAlchemy Core tables. Migrations (store/migrations) create exactly this, plus what
only the migrations touch: on SQLite the `key_changes` counter, on PostgreSQL a function, and on both the
triggers that signal key changes (migration 0003).

Money columns are BIGINT micro-USD, and limits (`rpm`, `tpm`, `max_concurrent`) BIGINT too (migration 0005;
on SQLite, whose INTEGER holds 64 bits, their declared type stays INTEGER). The admin API validates every
integer against these bounds (admin/models.py). Times are float UNIX seconds: one representation on every
engine, and cheap to compare. JSON columns hold lists and small mappings (scopes, patterns, tags, metadata).
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Float, Index, Integer, MetaData, String, Table, Text, text

metadata = MetaData()

# The upper bounds (ms, exclusive) of the rollups' latency histogram buckets; a last bucket holds the rest.
# Fixed by migration 0016 (one column each, `lat_00` ...): changing them is a migration.
LATENCY_BOUNDS_MS = (10, 25, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10_000,
                     15_000, 20_000, 30_000, 60_000, 120_000, 300_000)  # fmt: skip
LATENCY_COLUMNS = tuple(f"lat_{i:02d}" for i in range(len(LATENCY_BOUNDS_MS) + 1))

accounts = Table(
    "accounts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("balance_micros", BigInteger, nullable=False, default=0),
    Column("rpm", BigInteger),
    Column("tpm", BigInteger),
    Column("max_concurrent", BigInteger),
    Column("created_at", Float, nullable=False),
    Column("limit_rules", JSON, nullable=False, server_default="[]"),  # migration 0009
    # Monthly spending cap and the month's figures (migration 0008, store/moves.py)
    Column("monthly_cap_micros", BigInteger),
    Column("spend_month", Integer, nullable=False, server_default="0"),
    Column("month_spent_micros", BigInteger, nullable=False, server_default="0"),
    Column("month_reserved_micros", BigInteger, nullable=False, server_default="0"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("name", String(200), nullable=False),
    Column("account_id", String(40), index=True),
    Column("scopes", JSON, nullable=False),
    Column("allowed_models", JSON, nullable=False),
    Column("allowed_ips", JSON, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("default_processors", JSON, nullable=False, server_default="[]"),
    Column("enforced_processors", JSON, nullable=False, server_default="[]"),
    Column("rpm", BigInteger),
    Column("tpm", BigInteger),
    Column("max_concurrent", BigInteger),
    Column("expires_at", Float),
    Column("revoked_at", Float),
    Column("created_at", Float, nullable=False),
    Column("limit_rules", JSON, nullable=False, server_default="[]"),  # migration 0009
    Column("user_limit_rules", JSON, nullable=False, server_default="[]"),
    Column("monthly_cap_micros", BigInteger),  # migration 0008
)

# A key's month (migration 0008): written only under its account's row lock, by the ledger's batch.
key_spend = Table(
    "key_spend",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("spend_month", Integer, nullable=False),
    Column("month_spent_micros", BigInteger, nullable=False),
    Column("month_reserved_micros", BigInteger, nullable=False),
)

ledger = Table(
    "ledger",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("account_id", String(40), nullable=False),
    Column("kind", String(16), nullable=False),  # reserve | settle | topup | refund
    Column("amount_micros", BigInteger, nullable=False),  # signed: what the row adds to the balance
    Column("request_id", String(64)),
    Column("key_id", String(40)),
    Column("note", Text),
    Column("created_at", Float, nullable=False),
    Index("ix_ledger_account_id", "account_id", "id"),
)

usage = Table(
    "usage",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("request_id", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("key_id", String(40)),
    Column("account_id", String(40)),
    Column("model", String(200)),
    Column("provider", String(200)),
    Column("deployment", String(200)),
    Column("status", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("cached_tokens", Integer, nullable=False, default=0),
    Column("estimated", Integer, nullable=False, default=0),  # 1 when tokens were estimated (cut stream)
    Column("cost_micros", BigInteger, nullable=False, default=0),
    Column("total_ms", Float),
    Column("upstream_ms", Float),
    Column("ttft_ms", Float),
    Column("queued_ms", Float),
    Column("tags", JSON, nullable=False),
    Column("end_user", String(200)),
    Column("request_body", JSON),
    Column("response_body", JSON),
    # migration 0016: what the console's request log shows (observe/faults.py for `error_type`)
    Column("route", String(200)),  # the declared route template, e.g. /v1/chat/completions
    Column("operation", String(40)),  # the endpoint family: chat, embedding, image...
    Column("error_type", String(40)),
    Column("attempts", JSON),  # [{deployment, model, outcome, status, error, latency_ms}, ...]
    Column("attempt_errors", Integer, nullable=False, server_default="0"),  # attempts that did not succeed
    # migration 0020: what the response cache did (cache/base.py `Status`): hit, semantic-hit, miss, bypass;
    # NULL where caching did not apply
    Column("cache", String(16)),
    Index("ix_usage_key_time", "key_id", "created_at"),
    Index("ix_usage_model_time", "model", "created_at"),
    Index("ix_usage_account_time", "account_id", "created_at"),
    Index("ix_usage_time", "created_at"),
    Index("ix_usage_request_id", "request_id"),  # migration 0006
    # the recent upstream failures (store/request_log.py), a small index beside the table
    Index(
        "ix_usage_attempt_errors",
        "created_at",
        sqlite_where=text("attempt_errors > 0"),
        postgresql_where=text("attempt_errors > 0"),
    ),
)


def _rollup(name: str) -> Table:
    """An hourly or daily rollup of `usage` (migration 0016), written only by the triggers on `usage`'s
    inserts, so every writer is counted once. A NULL in the usage row is '' here (a key column must be
    comparable for the upsert; PostgreSQL's unique index treats NULLs as distinct)."""
    return Table(
        name,
        metadata,
        Column("bucket", BigInteger, primary_key=True),  # start, UNIX seconds (UTC)
        Column("model", String(200), primary_key=True),
        Column("provider", String(200), primary_key=True),
        Column("key_id", String(40), primary_key=True),
        Column("account_id", String(40), primary_key=True),
        Column("requests", BigInteger, nullable=False),
        Column("errors", BigInteger, nullable=False),  # status >= 400
        Column("prompt_tokens", BigInteger, nullable=False),
        Column("completion_tokens", BigInteger, nullable=False),
        Column("cached_tokens", BigInteger, nullable=False),
        Column("cost_micros", BigInteger, nullable=False),
        Column("latency_ms_sum", Float, nullable=False),  # total_ms, over the rows that have one
        *(Column(c, BigInteger, nullable=False) for c in LATENCY_COLUMNS),
        sqlite_with_rowid=False,
    )


usage_hourly = _rollup("usage_hourly")
usage_daily = _rollup("usage_daily")
