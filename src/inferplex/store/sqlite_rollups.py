"""The usage log's batches on SQLite, rolled up once per batch instead of once per row.

SQLite has no statement triggers, so migration 0016's trigger on `usage` upserts both rollups for every
row: about 34 µs of the writer thread per usage row, which the gateway's own core paid under load (the writer
shares it). For the usage log's batches (the one writer that matters for cost) the trigger is paused for the
batch's transaction (a row in `usage_rollup_pause`, which the trigger's WHEN tests; no other connection can
see it: SQLite has one writer, and it is deleted before the commit) and the batch is rolled up once, with the
same grouping PostgreSQL's statement trigger uses, over the ids the batch took. Every other writer (the
spool's replay, the CLI, SQL by hand) still goes through the row trigger, so each row is counted once.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

from inferplex.store.tables import LATENCY_BOUNDS_MS, LATENCY_COLUMNS

PAUSE_TABLE = "usage_rollup_pause"
_TABLES = (("usage_hourly", 3600), ("usage_daily", 86400))
_KEYS = ("model", "provider", "key_id", "account_id")
_SUMS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")
_MEASURES = ("requests", "errors", *_SUMS, "latency_ms_sum", *LATENCY_COLUMNS)


def _latency_tests() -> list[str]:
    edges: list[int | None] = [None, *LATENCY_BOUNDS_MS, None]
    out = []
    for low, high in itertools.pairwise(edges):
        tests = [f"total_ms >= {low}" if low is not None else "total_ms IS NOT NULL"]
        if high is not None:
            tests.append(f"total_ms < {high}")
        out.append(" AND ".join(tests))
    return out


def _upsert(table: str, seconds: int) -> str:
    """The rollup rows of the usage rows with id > ?, added into `table`."""
    values = [
        f"CAST(floor(created_at / {seconds}) AS INTEGER) * {seconds}",
        *(f"coalesce({k}, '')" for k in _KEYS),
        "count(*)",
        "sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END)",
        *(f"coalesce(sum({s}), 0)" for s in _SUMS),
        "coalesce(sum(total_ms), 0)",
        *(f"sum(CASE WHEN {test} THEN 1 ELSE 0 END)" for test in _latency_tests()),
    ]
    columns = ", ".join(("bucket", *_KEYS, *_MEASURES))
    added = ", ".join(f"{m} = {table}.{m} + excluded.{m}" for m in _MEASURES)
    # The WHERE also keeps SQLite from reading ON CONFLICT as a join's ON (its upsert-after-SELECT rule).
    return (
        f"INSERT INTO {table} ({columns}) SELECT {', '.join(values)} FROM usage WHERE id > ? "
        f"GROUP BY 1, 2, 3, 4, 5 ON CONFLICT (bucket, {', '.join(_KEYS)}) DO UPDATE SET {added}"
    )


_UPSERTS = tuple(_upsert(table, seconds) for table, seconds in _TABLES)


def append_rolled_up(conn: sqlite3.Connection, insert: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert `rows` into `usage` with `insert` and roll them up once, in the caller's transaction."""
    (last,) = conn.execute("SELECT coalesce(max(id), 0) FROM usage").fetchone()
    conn.execute(f"INSERT INTO {PAUSE_TABLE} (paused) VALUES (1)")
    conn.executemany(insert, rows)
    for upsert in _UPSERTS:
        conn.execute(upsert, (last,))
    conn.execute(f"DELETE FROM {PAUSE_TABLE}")
