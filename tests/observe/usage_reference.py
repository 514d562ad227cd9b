"""The plain answers the rollups must equal: every usage row read and aggregated here, in Python, with the same
bucket rule as the triggers (floor of created_at over the bucket width) and the same latency buckets."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select

from inferplex.store import tables as t
from inferplex.store.engine import open_database
from inferplex.store.rollups import percentile

GROUP_COLUMN = {None: None, "model": "model", "key": "key_id", "account": "account_id", "provider": "provider"}
SUMS = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")


def usage_rows(url: str) -> list[dict[str, Any]]:
    """Every row of the usage table, read on a connection of our own."""

    async def read() -> list[dict[str, Any]]:
        db = open_database(url)
        try:
            found = await db.read(lambda conn: conn.execute(select(t.usage)).all())
            return [dict(r._mapping) for r in found]
        finally:
            await db.aclose()

    return asyncio.run(read())


def latency_bucket(ms: float) -> int:
    for i, bound in enumerate(t.LATENCY_BOUNDS_MS):
        if ms < bound:
            return i
    return len(t.LATENCY_BOUNDS_MS)


def aggregate(rows: Iterable[dict[str, Any]], seconds: int | None, group_by: str | None) -> list[dict[str, Any]]:
    """Rows summed per bucket of `seconds` (None: one bucket) and group, shaped as `Rollups.series` answers."""
    column = GROUP_COLUMN[group_by]
    out: dict[tuple[int | None, Any], dict[str, Any]] = {}
    for row in rows:
        bucket = math.floor(row["created_at"] / seconds) * seconds if seconds else None
        group = row[column] if column else None
        acc = out.setdefault(
            (bucket, group),
            {"group": group, **dict.fromkeys(SUMS, 0), "_sum": 0.0, "_hist": [0] * len(t.LATENCY_COLUMNS)},
        )
        acc["requests"] += 1
        acc["errors"] += row["status"] >= 400
        for name in SUMS[2:]:
            acc[name] += row[name]
        if row["total_ms"] is not None:
            acc["_sum"] += row["total_ms"]
            acc["_hist"][latency_bucket(row["total_ms"])] += 1
    answers = []
    for (bucket, _), acc in sorted(out.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or "")):
        hist, total = acc.pop("_hist"), acc.pop("_sum")
        timed = sum(hist)
        acc["avg_ms"] = total / timed if timed else None
        acc["p50_ms"], acc["p95_ms"], acc["p99_ms"] = (percentile(hist, q) for q in (0.5, 0.95, 0.99))
        answers.append({"bucket": bucket, **acc} if seconds else acc)
    return answers


def same(found: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Equal, the integers exactly and the latencies to a millionth of a millisecond (float sums' order)."""
    assert len(found) == len(expected), (found, expected)
    for got, want in zip(found, expected, strict=True):
        assert got.keys() == want.keys()
        for name, value in want.items():
            if name in ("avg_ms", "p50_ms", "p95_ms", "p99_ms") and value is not None:
                assert got[name] is not None and math.isclose(got[name], value, rel_tol=1e-9, abs_tol=1e-6), name
            else:
                assert got[name] == value, (name, got, want)


def random_rows(seed: int, count: int, start: float, days: int) -> list[dict[str, Any]]:
    """Usage rows as the guard writes them, spread over `days` from `start`, with NULL keys, failures and
    rows without a latency among them."""
    rng = random.Random(seed)
    models, providers = ["m-a", "m-b", "m-c", None], ["p-1", "p-2", None]
    keys, accounts = [f"key_{i}" for i in range(6)] + [None], ["acc_1", "acc_2", None]
    rows = []
    for i in range(count):
        rows.append(
            {
                "request_id": f"req_{seed}_{i}",
                "created_at": start + rng.random() * days * 86400,
                "key_id": rng.choice(keys),
                "account_id": rng.choice(accounts),
                "model": rng.choice(models),
                "provider": rng.choice(providers),
                "deployment": "dep",
                "status": rng.choice([200, 200, 200, 200, 400, 429, 502]),
                "prompt_tokens": rng.randrange(0, 5000),
                "completion_tokens": rng.randrange(0, 2000),
                "cached_tokens": rng.randrange(0, 100),
                "estimated": 0,
                "cost_micros": rng.randrange(0, 10**9),
                "total_ms": None if rng.random() < 0.05 else rng.expovariate(1 / 800),
                "upstream_ms": None,
                "ttft_ms": None,
                "queued_ms": 0.0,
                "tags": rng.sample(["red", "green", "blue"], rng.randrange(0, 3)),
                "end_user": None,
                "request_body": None,
                "response_body": None,
                "route": "/v1/chat/completions",
                "operation": "chat",
                "error_type": None,
                "attempts": [],
                "attempt_errors": 0,
                "cache": rng.choice([None, "hit", "miss"]),  # migration 0020
            }
        )
    return rows
