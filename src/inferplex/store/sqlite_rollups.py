"""The rollups of the usage table on SQLite, written by the gateway as it inserts usage rows.

On PostgreSQL a statement trigger keeps `usage_hourly` and `usage_daily` (migration 0016). SQLite has only
row triggers, and any AFTER trigger on `usage` costs every insert (measured at 8-13 µs a row with the trigger
doing nothing, because the table's six index inserts then each seek again: the gateway's writer thread
shares the request path's core), on top of its two upserts per row (34 µs). So on SQLite the gateway rolls
up what it writes itself: a usage log batch once, with the grouping PostgreSQL's trigger uses, over the ids
the batch took (`append_rolled_up`); a row the spool replays, alone (`roll_up_from`), in the same
transaction as its insert. Rows written into a SQLite `usage` table by hand are not rolled up (documented in
docs/operate.md, with the statement that rebuilds the rollups).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from inferplex.store.tables import LATENCY_BOUNDS_MS, LATENCY_COLUMNS

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
    conn.executemany(insert, rows)
    for upsert in _UPSERTS:
        conn.execute(upsert, (last,))


def roll_up_from(conn: Connection, first_id: int) -> None:
    """Roll up the usage rows from id `first_id` on (SQLAlchemy's connection, in its transaction)."""
    for upsert in _UPSERTS:
        conn.exec_driver_sql(upsert, (first_id - 1,))
