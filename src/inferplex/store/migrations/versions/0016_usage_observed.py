"""Usage rows say more (route, operation, error type, attempts), and hourly and daily rollups of them (issue
24: the console's usage charts at a million rows).

On PostgreSQL the rollups (`usage_hourly`, `usage_daily`) are written by the database itself on every insert
into `usage`, so every writer (the usage log's COPY, the spool's replay, SQL by hand) is counted once, in the
transaction of its insert: a statement trigger over a transition table, so a COPY of 500 rows is grouped once
and upserts one row per (bucket, model, provider, key, account) it touches, not 500. SQLite has only row
triggers, and any AFTER trigger on `usage` slows every insert into it, so there the gateway rolls up what it
writes, in the same transaction (store/sqlite_rollups.py); rows written into SQLite by hand are not rolled
up. Deleting usage rows (pruning the log) leaves the rollups as they were: they are the history.

The rows already in `usage` are rolled up here, once. The latency buckets are copied from
`store/tables.LATENCY_BOUNDS_MS` as they were when this was written (a migration is history).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import itertools

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"

_BOUNDS = (10, 25, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10_000, 15_000,
           20_000, 30_000, 60_000, 120_000, 300_000)  # fmt: skip
_LAT = [f"lat_{i:02d}" for i in range(len(_BOUNDS) + 1)]
_TABLES = (("usage_hourly", 3600), ("usage_daily", 86400))
_KEYS = ("model", "provider", "key_id", "account_id")
_SUMS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")
_MEASURES = ("requests", "errors", *_SUMS, "latency_ms_sum", *_LAT)
_COLUMNS = ", ".join(("bucket", *_KEYS, *_MEASURES))


def _added(table: str) -> str:
    return ", ".join(f"{m} = {table}.{m} + excluded.{m}" for m in _MEASURES)


def _latency_buckets(ms: str) -> list[str]:
    """One 0/1 test per histogram bucket of the latency `ms` (NULL: in none)."""
    edges = [None, *_BOUNDS, None]
    out = []
    for low, high in itertools.pairwise(edges):
        tests = ([f"{ms} >= {low}"] if low is not None else [f"{ms} IS NOT NULL"]) + (
            [f"{ms} < {high}"] if high is not None else []
        )
        out.append(" AND ".join(tests))
    return out


def _grouped(source: str, seconds: int, bucket: str) -> str:
    """The rollup rows of the usage rows in `source`, grouped into buckets of `seconds`."""
    keys = [f"coalesce({k}, '')" for k in _KEYS]
    sums = [f"coalesce(sum({s}), 0)" for s in _SUMS]
    lat = [f"sum(CASE WHEN {test} THEN 1 ELSE 0 END)" for test in _latency_buckets("total_ms")]
    values = [
        bucket.format(seconds=seconds),
        *keys,
        "count(*)",
        "sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END)",
        *sums,
        "coalesce(sum(total_ms), 0)",
        *lat,
    ]
    return f"SELECT {', '.join(values)} FROM {source} GROUP BY 1, 2, 3, 4, 5"


_PG_BUCKET = "(floor(created_at / {seconds}) * {seconds})::bigint"
_SQLITE_BUCKET = "CAST(floor(created_at / {seconds}) AS INTEGER) * {seconds}"


def _pg_function() -> str:
    upserts = "\n".join(
        f"INSERT INTO {table} AS r ({_COLUMNS}) {_grouped('inferplex_new_usage', s, _PG_BUCKET)} "
        "ORDER BY 1, 2, 3, 4, 5 "
        f"ON CONFLICT (bucket, {', '.join(_KEYS)}) DO UPDATE SET {_added('r')};"
        for table, s in _TABLES
    )
    # ORDER BY: two replicas' batches lock the rollup rows they share in the same order, so cannot deadlock.
    return (
        "CREATE OR REPLACE FUNCTION inferplex_usage_rollup() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{upserts}\nRETURN NULL;\nEND $$"
    )


_PG_TRIGGER = (
    "CREATE TRIGGER inferplex_usage_rollup AFTER INSERT ON usage REFERENCING NEW TABLE AS inferplex_new_usage "
    "FOR EACH STATEMENT EXECUTE FUNCTION inferplex_usage_rollup()"
)


def upgrade() -> None:
    op.add_column("usage", sa.Column("route", sa.String(200)))
    op.add_column("usage", sa.Column("operation", sa.String(40)))
    op.add_column("usage", sa.Column("error_type", sa.String(40)))
    op.add_column("usage", sa.Column("attempts", sa.JSON))
    op.add_column("usage", sa.Column("attempt_errors", sa.Integer, nullable=False, server_default="0"))
    where = sa.text("attempt_errors > 0")
    op.create_index("ix_usage_attempt_errors", "usage", ["created_at"], sqlite_where=where, postgresql_where=where)
    for table, _ in _TABLES:
        op.create_table(
            table,
            sa.Column("bucket", sa.BigInteger, primary_key=True),
            sa.Column("model", sa.String(200), primary_key=True),
            sa.Column("provider", sa.String(200), primary_key=True),
            sa.Column("key_id", sa.String(40), primary_key=True),
            sa.Column("account_id", sa.String(40), primary_key=True),
            sa.Column("requests", sa.BigInteger, nullable=False),
            sa.Column("errors", sa.BigInteger, nullable=False),
            *(sa.Column(c, sa.BigInteger, nullable=False) for c in _SUMS),
            sa.Column("latency_ms_sum", sa.Float, nullable=False),
            *(sa.Column(c, sa.BigInteger, nullable=False) for c in _LAT),
            sqlite_with_rowid=False,  # the primary key is the table: one B-tree for the trigger's upsert
        )
    sqlite = op.get_bind().dialect.name == "sqlite"
    bucket = _SQLITE_BUCKET if sqlite else _PG_BUCKET
    for table, seconds in _TABLES:  # what is already logged, before the trigger counts what comes
        op.execute(f"INSERT INTO {table} ({_COLUMNS}) {_grouped('usage', seconds, bucket)}")
    if not sqlite:  # SQLite: the gateway rolls up what it writes (store/sqlite_rollups.py)
        op.execute(_pg_function())
        op.execute(_PG_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP TRIGGER IF EXISTS inferplex_usage_rollup ON usage")
        op.execute("DROP FUNCTION IF EXISTS inferplex_usage_rollup()")
    for table, _ in reversed(_TABLES):
        op.drop_table(table)
    op.drop_index("ix_usage_attempt_errors", "usage")
    for column in ("attempt_errors", "attempts", "error_type", "operation", "route"):
        op.drop_column("usage", column)
