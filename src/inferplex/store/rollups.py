"""Usage over time, read from the hourly and daily rollups (migration 0016), not from the usage table.

A chart of a month at a million requests would otherwise group a million rows on every page view (a known
LiteLLM failure). The rollups are kept by triggers on `usage`'s inserts, so whoever writes a usage row, it is
counted once; a query here reads at most one row per bucket and (model, provider, key, account) in its
range. Counts, tokens and costs are exact; latency percentiles come from a fixed-bucket histogram of
`total_ms` (`tables.LATENCY_BOUNDS_MS`), interpolated within the bucket, as Prometheus does.

The console (console/usage_pages.py) and the admin API (`/admin/usage/series`, `/admin/usage/export`) read
through `Rollups`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func, literal_column, select

from inferplex.store import tables as t
from inferplex.store.backend import Database

GRAINS = ("hour", "day")
GROUPS = ("model", "key", "account", "provider")
SECONDS = {"hour": 3600, "day": 86400}
LATEST = 1e11  # the latest time a range may name (year 5138): bucket starts stay well within BIGINT
MAX_BUCKETS = 2300  # in one series: three months of hours, six years of days
_COLUMN = {"model": "model", "key": "key_id", "account": "account_id", "provider": "provider"}
_SUMS = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")
SERIES_COLUMNS = ("bucket", "time", "group", *_SUMS, "avg_ms", "p50_ms", "p95_ms", "p99_ms")


@dataclass(frozen=True, slots=True)
class RollupFilter:
    """Rows of one model, provider, key or account (each None: any)."""

    model: str | None = None
    key_id: str | None = None
    account_id: str | None = None
    provider: str | None = None

    def apply(self, query: Select[Any], table: Table) -> Select[Any]:
        """`query` narrowed to the filter's rows; ValueError for a value no store can hold (NUL)."""
        for name in ("model", "key_id", "account_id", "provider"):
            value = getattr(self, name)
            if value is not None and "\x00" in value:
                raise ValueError(f"`{name}` contains a NUL character.")
            if value is not None:
                query = query.where(table.c[name] == value)
        return query


def _check(grain: str | None, group_by: str | None, since: float, until: float) -> None:
    if grain is not None and grain not in GRAINS:
        raise ValueError(f"`grain` must be one of {', '.join(GRAINS)}, not {grain!r}.")
    if group_by is not None and group_by not in GROUPS:
        raise ValueError(f"`group_by` must be one of {', '.join(GROUPS)}, not {group_by!r}.")
    if not (0 <= since < until <= LATEST):
        raise ValueError(f"`since` must be before `until`, both UNIX seconds from 0 to {LATEST:.0f}.")


def floor_to(seconds: int, at: float) -> int:
    return math.floor(at / seconds) * seconds


def ceil_to(seconds: int, at: float) -> int:
    return math.ceil(at / seconds) * seconds


def bucket_starts(grain: str, since: float, until: float) -> list[int]:
    """Every bucket a series over [since, until) may hold, in order: a chart draws the empty ones as zero."""
    _check(grain, None, since, until)
    step = SECONDS[grain]
    return list(range(floor_to(step, since), ceil_to(step, until), step))


def percentile(histogram: Sequence[int], q: float) -> float | None:
    """The `q` quantile (0 < q < 1) of the latencies a histogram counts (`percentiles`)."""
    return percentiles(histogram, (q,))[0]


def percentiles(histogram: Sequence[int], qs: Sequence[float]) -> list[float | None]:
    """The quantiles `qs` (ascending, each 0 < q < 1) of the latencies a histogram counts, in one pass: the
    bucket holding each rank, interpolated linearly in it (the first bucket from 0; the open last bucket
    answers its lower bound). None each when it counts nothing."""
    total = sum(histogram)
    if total == 0:
        return [None] * len(qs)
    bounds = t.LATENCY_BOUNDS_MS
    out: list[float | None] = []
    seen, i = 0, 0
    for q in qs:
        rank = q * total
        while i < len(histogram) - 1 and (not histogram[i] or seen + histogram[i] < rank):
            seen += histogram[i]
            i += 1
        count = histogram[i]
        if i == len(bounds) or not count:
            out.append(float(bounds[-1]))
            continue
        low = 0.0 if i == 0 else float(bounds[i - 1])
        out.append(low + (bounds[i] - low) * (rank - seen) / count)
    return out


_QUANTILES = (0.5, 0.95, 0.99)


def _measures(table: Table) -> list[ColumnElement[Any]]:
    c = table.c
    return [
        *(func.sum(c[name]).label(name) for name in _SUMS),
        func.sum(c.latency_ms_sum).label("latency_ms_sum"),
        *(func.sum(c[name]).label(name) for name in t.LATENCY_COLUMNS),
    ]


def _finish(row: Sequence[Any], bucket: bool) -> dict[str, Any]:
    """A rollup sum as the API answers it: integers, '' back to None, the latency summarised; its histogram
    kept under `histogram` until the caller drops it. `row` is in `_read`'s column order (by position: a
    long series is tens of thousands of rows, and a lookup by name costs more than the rest)."""
    values = tuple(row[1:]) if bucket else tuple(row)
    histogram = [int(v or 0) for v in values[_LAT:]]
    timed = sum(histogram)
    out: dict[str, Any] = {"bucket": int(row[0])} if bucket else {}
    out["group"] = values[0] or None
    out.update(zip(_SUMS, (int(v or 0) for v in values[1 : 1 + len(_SUMS)]), strict=True))
    out["avg_ms"] = float(values[_LAT - 1]) / timed if timed else None
    out["p50_ms"], out["p95_ms"], out["p99_ms"] = percentiles(histogram, _QUANTILES)
    out["histogram"] = histogram
    return out


_LAT = 2 + len(_SUMS)  # where the histogram starts in a row (after the group, the sums and the latency sum)
_NOTHING = ("", *[0] * (len(_SUMS) + 1 + len(t.LATENCY_COLUMNS)))


def _merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Totals read from both tables (whole days, edge hours) summed per group."""
    by: dict[Any, dict[str, Any]] = {}
    latency: dict[Any, float] = {}
    for row in rows:
        acc = by.get(row["group"])
        timed = sum(row["histogram"])
        spent = (row["avg_ms"] or 0.0) * timed
        if acc is None:
            by[row["group"]], latency[row["group"]] = dict(row), spent
            continue
        for name in _SUMS:
            acc[name] += row[name]
        acc["histogram"] = [a + b for a, b in zip(acc["histogram"], row["histogram"], strict=True)]
        latency[row["group"]] += spent
    for group, acc in by.items():
        timed = sum(acc["histogram"])
        acc["avg_ms"] = latency[group] / timed if timed else None
        acc["p50_ms"], acc["p95_ms"], acc["p99_ms"] = percentiles(acc["histogram"], _QUANTILES)
    return list(by.values())


class Rollups:
    """Series and totals over the rollups. Stateless: build one where needed."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def series(
        self,
        grain: str,
        since: float,
        until: float,
        group_by: str | None = None,
        filters: RollupFilter = RollupFilter(),
    ) -> list[dict[str, Any]]:
        """One row per bucket (and group) that has usage in [since, until), `since` rounded down and `until`
        up to the grain; sorted by bucket, then group (None first, then by code point). Raises ValueError on
        a bad argument."""
        _check(grain, group_by, since, until)
        step = SECONDS[grain]
        start, end = floor_to(step, since), ceil_to(step, until)
        if (end - start) // step > MAX_BUCKETS:
            raise ValueError(f"The range holds more than {MAX_BUCKETS} {grain}s: choose a shorter one or days.")
        table = t.usage_hourly if grain == "hour" else t.usage_daily
        rows = await self._read(table, start, end, group_by, filters, bucketed=True)
        out = [_finish(r, bucket=True) for r in rows]
        for row in out:
            del row["histogram"]
        out.sort(key=lambda r: (r["bucket"], r["group"] or ""))  # in Python: one order whatever the collation
        return out

    async def totals(
        self,
        since: float,
        until: float,
        group_by: str | None = None,
        filters: RollupFilter = RollupFilter(),
    ) -> list[dict[str, Any]]:
        """One row per group over [since, until) (rounded out to whole hours): whole UTC days from the daily
        table, the hours before the first and after the last from the hourly one. Sorted by cost, highest
        first, then group. Without `group_by`, exactly one row (zeros when nothing was used)."""
        _check(None, group_by, since, until)
        start, end = floor_to(3600, since), ceil_to(3600, until)
        first_day, last_day = ceil_to(86400, start), floor_to(86400, end)
        parts: list[tuple[Table, int, int]] = []
        if first_day < last_day:
            parts.append((t.usage_daily, first_day, last_day))
            parts += [(t.usage_hourly, start, first_day), (t.usage_hourly, last_day, end)]
        else:
            parts.append((t.usage_hourly, start, end))
        found: list[dict[str, Any]] = []
        for table, low, high in parts:
            if low < high:
                found += [_finish(r, False) for r in await self._read(table, low, high, group_by, filters)]
        out = _merged(found)
        if group_by is None and not out:
            out = [_finish(_NOTHING, bucket=False)]
        for row in out:
            del row["histogram"]
        out.sort(key=lambda r: (-r["cost_micros"], r["group"] is not None, r["group"] or ""))
        return out

    async def _read(
        self,
        table: Table,
        start: int,
        end: int,
        group_by: str | None,
        filters: RollupFilter,
        *,
        bucketed: bool = False,
    ) -> list[Any]:
        c = table.c
        group: ColumnElement[Any] = c[_COLUMN[group_by]] if group_by else literal_column("''")
        keys: list[ColumnElement[Any]] = [c.bucket] if bucketed else []
        query: Select[Any] = select(*keys, group.label("group"), *_measures(table))
        query = query.where(c.bucket >= start, c.bucket < end)
        query = filters.apply(query, table)
        grouping = [*keys, *([group] if group_by else [])]
        if grouping:
            query = query.group_by(*grouping)
        else:  # an aggregate over no rows is still one row (of NULLs): none, as with a group
            query = query.having(func.count() > 0)
        return list(await self.db.read(lambda conn: conn.execute(query).all()))


def series_csv(rows: list[dict[str, Any]]) -> str:
    """`rows` (a series, or totals) as CSV with a header (`SERIES_COLUMNS`): `time` is the bucket's start
    in ISO 8601 UTC, empty values where a row has none."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(SERIES_COLUMNS)
    for row in rows:
        bucket = row.get("bucket")
        when = dt.datetime.fromtimestamp(bucket, dt.UTC).isoformat().replace("+00:00", "Z") if bucket else ""
        values = {**row, "time": when}
        writer.writerow(["" if values.get(name) is None else _cell(values[name]) for name in SERIES_COLUMNS])
    return out.getvalue()


def _cell(value: Any) -> str:
    """A CSV cell; a text value that a spreadsheet would run as a formula is quoted with a leading `'`
    (model and key names come from configuration and callers)."""
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not isinstance(value, int) else text
