"""The console's usage data at a million rows: what the rollups cost the usage log's writes, and how fast the
console's queries answer, on SQLite and PostgreSQL.

For each engine, a fresh database (a temp-dir SQLite file; a PostgreSQL database of its own, dropped after):

1. write cost: `--cost-rows` rows through `UsageStore.append` in the usage log's batches of 500 (COPY on
   PostgreSQL, executemany on SQLite), once with the rollup trigger of migration 0016 and once with it dropped
   (a second database): rows/s each way, and the difference per row;
2. `--rows` rows (default 1,000,000) spread over `--days` days (20 models, 5 providers, 200 keys, 50
   accounts, 10% failures, tags), written the same way, timed;
3. the console's queries, each `--repeat` times (median and worst reported): series by hour over a day and a
   week and by day over the whole range, grouped and not; totals over the range; the request log's first page
   without a filter and with each filter, a page 20 pages deep by cursor, one request's detail, the recent
   upstream errors; and, for comparison, the same usage-by-model-and-day a plain GROUP BY over the usage table
   answers (what the rollups replace).

The rollups' answers are checked against that plain aggregation (requests and cost per model over the range).

    python bench/console_usage.py                      # both engines, 1,000,000 rows (about 10 minutes)
    python bench/console_usage.py --rows 100000 --engines sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import func, select, text

from inferplex.store import tables as t
from inferplex.store.backend import Database
from inferplex.store.engine import open_database
from inferplex.store.request_log import RequestFilter, RequestLog
from inferplex.store.rollups import RollupFilter, Rollups
from inferplex.store.usage import UsageStore

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BATCH = 500
NOW = 1_764_201_600.0  # a fixed "now" (2025-11-27 00:00 UTC): the data ends here


def make_rows(seed: int, count: int, start: float, span_s: float, *, scattered: bool = False) -> list[dict[str, Any]]:
    """`count` rows in time order over [start, start + span_s), as the usage log appends them. Traffic as a
    gateway sees it: 200 keys, a few busy and most quiet (weights 1/rank), each key on its account (50)
    and mostly on one of its three models (20 in all), each model served by one of 5 providers. `scattered`:
    the rollups' worst case instead, 20,000 keys drawn evenly, so nearly every row starts a rollup row."""
    rng = random.Random(seed)
    tags = ["prod", "staging", "batch", "eval", "night"]
    keys = 20_000 if scattered else 200
    weights = [1.0] * keys if scattered else [1 / (k + 1) for k in range(keys)]
    picks = rng.choices(range(keys), weights, k=count)
    step = span_s / count
    rows = []
    for i in range(count):
        failed = rng.random() < 0.1
        attempts = [{"deployment": "dep-a", "model": "m", "outcome": "error", "status": 500, "error": "boom",
                     "latency_ms": 12.5}] if failed and rng.random() < 0.5 else []  # fmt: skip
        k = picks[i]
        model = rng.choices((k % 20, (k * 7 + 3) % 20, (k * 13 + 5) % 20), (0.7, 0.2, 0.1))[0]
        rows.append(
            {
                "request_id": f"req_{seed}_{i}",
                "created_at": start + (i + rng.random()) * step,
                "key_id": f"key_{k:04d}",
                "account_id": f"acc_{k % 50:03d}",
                "model": f"model-{model:02d}",
                "provider": f"provider-{model % 5}",
                "deployment": "dep-a",
                "status": rng.choice([429, 500, 502]) if failed else 200,
                "prompt_tokens": rng.randrange(10, 4000),
                "completion_tokens": rng.randrange(0, 1000),
                "cached_tokens": 0,
                "estimated": 0,
                "cost_micros": rng.randrange(0, 50_000),
                "total_ms": rng.expovariate(1 / 900),
                "upstream_ms": None,
                "ttft_ms": None,
                "queued_ms": 0.0,
                "tags": [tags[rng.randrange(5)]],
                "end_user": None,
                "request_body": None,
                "response_body": None,
                "route": "/v1/chat/completions",
                "operation": "chat",
                "error_type": "provider.upstream_error" if failed else None,
                "attempts": attempts,
                "attempt_errors": len(attempts),
            }
        )
    return rows


async def _pg(statement: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


class Engine:
    """A fresh database of one engine, migrated; `drop()` removes it."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.name = "inferplex_bench_" + secrets.token_hex(5)
        self.url = (
            f"sqlite:///{tmp / (self.name + '.db')}"
            if kind == "sqlite"
            else f"postgresql+asyncpg://postgres@127.0.0.1:5432/{self.name}"
        )
        self.db: Database | None = None

    async def open(self, *, trigger: bool = True) -> Database:
        if self.kind == "postgresql":
            await _pg(f'CREATE DATABASE "{self.name}"')
        self.db = open_database(self.url)
        await self.db.migrate()
        if not trigger:
            drop = (
                "DROP TRIGGER inferplex_usage_rollup"
                if self.kind == "sqlite"
                else "DROP TRIGGER inferplex_usage_rollup ON usage"
            )
            await self.db.write(lambda conn: conn.execute(text(drop)))
        return self.db

    async def drop(self) -> None:
        if self.db is not None:
            await self.db.aclose()
        if self.kind == "postgresql":
            await _pg(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


async def write(db: Database, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Seconds to write `rows` as the usage log does (batches of 500, one after another), and this process's
    CPU seconds meanwhile: on SQLite the database's own work (the trigger's too) runs in this process, on a
    machine whose other load makes the wall time noisy."""
    store = UsageStore(db)
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(rows), BATCH):
        await store.append(rows[i : i + BATCH])
    return time.perf_counter() - started, time.process_time() - cpu


async def timed(repeat: int, run: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    """Median and worst milliseconds of `repeat` runs (after one warm-up), and the last answer."""
    answer = await run()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = await run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times), answer


async def bench_engine(kind: str, args: argparse.Namespace, tmp: Path, out: list[str]) -> None:
    out.append(f"\n### {kind}\n")
    for scattered in (False, True):
        cost_rows = make_rows(2, args.cost_rows, NOW - 86400, 86400, scattered=scattered)
        for trigger in (False, True):
            engine = Engine(kind, tmp)
            try:
                db = await engine.open(trigger=trigger)
                seconds, cpu = await write(db, cost_rows)
                rolled = await db.read(lambda conn: conn.execute(text("SELECT count(*) FROM usage_hourly")).scalar())
            finally:
                await engine.drop()
            label = "with the rollup trigger" if trigger else "without a trigger (migration 0015's cost)"
            traffic = "worst case: 20,000 keys evenly" if scattered else "200 keys, skewed"
            per_row, cpu_row = seconds / len(cost_rows) * 1e6, cpu / len(cost_rows) * 1e6
            out.append(f"- write {len(cost_rows):,} rows of one day ({traffic}) in batches of {BATCH} {label}: "
                       f"{seconds:.2f} s, {len(cost_rows) / seconds:,.0f} rows/s, {per_row:.1f} µs/row wall, "
                       f"{cpu_row:.1f} µs/row CPU of this process; {rolled:,} hourly rollup rows")  # fmt: skip
            print(out[-1], flush=True)

    engine = Engine(kind, tmp)
    try:
        db = await engine.open()
        total = 0.0
        span = args.days * 86400
        for part in range(0, args.rows, 100_000):  # generated in parts: a million dicts at once is 2 GB
            count = min(100_000, args.rows - part)
            start = NOW - span + span * part / args.rows
            total += (await write(db, make_rows(1000 + part, count, start, span * count / args.rows)))[0]
        out.append(f"- wrote {args.rows:,} rows over {args.days} days: {total:.1f} s ({args.rows / total:,.0f} rows/s)")
        print(out[-1], flush=True)
        if kind == "postgresql":
            await db.write(lambda conn: conn.execute(text("ANALYZE")))
        await queries(db, args, out)
    finally:
        await engine.drop()


async def queries(db: Database, args: argparse.Namespace, out: list[str]) -> None:
    rollups, log = Rollups(db), RequestLog(db)
    day, since = 86400, NOW - args.days * 86400
    deep: dict[str, Any] = {}

    async def twenty_deep() -> Any:
        before = None
        for _ in range(20):
            page = await log.page(RequestFilter(), before, 50)
            before = page.before
        deep["cursor"] = before
        return page

    async def plain_by_model_and_day() -> Any:
        u = t.usage.c
        bucket = func.floor(u.created_at / day)
        q = (
            select(bucket, u.model, func.count(), func.sum(u.cost_micros))
            .where(u.created_at >= since, u.created_at < NOW)
            .group_by(bucket, u.model)
        )
        return await db.read(lambda conn: conn.execute(q).all())

    some = (await log.page(RequestFilter(), None, 1)).rows[0]["request_id"]
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("series: hour, last 24 h, all", lambda: rollups.series("hour", NOW - day, NOW)),
        ("series: hour, last 24 h, by model", lambda: rollups.series("hour", NOW - day, NOW, "model")),
        ("series: hour, last 7 days, by model", lambda: rollups.series("hour", NOW - 7 * day, NOW, "model")),
        ("series: hour, last 7 days, by key", lambda: rollups.series("hour", NOW - 7 * day, NOW, "key")),
        ("series: day, whole range, by model", lambda: rollups.series("day", since, NOW, "model")),
        ("series: day, whole range, by key", lambda: rollups.series("day", since, NOW, "key")),
        (
            "series: day, whole range, one key",
            lambda: rollups.series("day", since, NOW, None, RollupFilter(key_id="key_0007")),
        ),
        ("totals: whole range (odd hours), by account", lambda: rollups.totals(since + 5000, NOW - 5000, "account")),
        ("totals: whole range, all", lambda: rollups.totals(since, NOW)),
        ("request log: first page (50)", lambda: log.page(RequestFilter(), None, 50)),
        ("request log: page 20 deep by cursor", twenty_deep),
        ("request log: model filter", lambda: log.page(RequestFilter(model="model-07"), None, 50)),
        ("request log: key filter", lambda: log.page(RequestFilter(key_id="key_0042"), None, 50)),
        ("request log: status 5xx", lambda: log.page(RequestFilter(status="5xx"), None, 50)),
        ("request log: tag", lambda: log.page(RequestFilter(tag="night"), None, 50)),
        (
            "request log: min cost + latency",
            lambda: log.page(RequestFilter(min_cost_micros=49_000, min_latency_ms=3000), None, 50),
        ),
        (
            "request log: last day, errors only",
            lambda: log.page(RequestFilter(since=NOW - day, status="error"), None, 50),
        ),
        ("request detail", lambda: log.detail(some)),
        ("recent upstream errors (20)", lambda: log.recent_errors(None, 20)),
        ("recent upstream errors, unknown deployment", lambda: log.recent_errors("dep-z", 20)),
        ("(comparison) plain GROUP BY day, model over usage", plain_by_model_and_day),
    ]
    out.append("\n| query | median ms | worst ms | rows |\n| --- | ---: | ---: | ---: |")
    answers: dict[str, Any] = {}
    for name, run in cases:
        median, worst, answer = await timed(args.repeat, run)
        answers[name] = answer
        size = len(answer.rows) if hasattr(answer, "rows") else len(answer) if isinstance(answer, list) else 1
        out.append(f"| {name} | {median:.1f} | {worst:.1f} | {size} |")
        print(out[-1], flush=True)
    plain: dict[str, tuple[int, int]] = {}
    for _, model, requests, cost in answers["(comparison) plain GROUP BY day, model over usage"]:
        got = plain.get(model, (0, 0))
        plain[model] = (got[0] + requests, got[1] + int(cost))
    rolled = {r["group"]: (r["requests"], r["cost_micros"]) for r in await rollups.totals(since, NOW, "model")}
    assert rolled == plain, "the rollups disagree with the usage table"
    out.append(f"\nThe rollups' totals per model equal the plain GROUP BY over the usage table "
               f"({sum(v[0] for v in plain.values()):,} requests).")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--cost-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--engines", default="sqlite,postgresql")
    args = parser.parse_args()
    out = [f"rows: {args.rows:,} over {args.days} days; write-cost rows: {args.cost_rows:,}; repeat {args.repeat}"]
    with tempfile.TemporaryDirectory(prefix="ipx-bench-console-") as tmp:
        for kind in args.engines.split(","):
            await bench_engine(kind, args, Path(tmp), out)
    print("\n".join(out))


if __name__ == "__main__":
    asyncio.run(main())
