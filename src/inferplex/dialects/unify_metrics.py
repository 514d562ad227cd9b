"""The numbers behind Unify's `GET /v0/metrics` and `GET /v0/endpoint-metrics`, computed from usage rows.

Pure functions of the rows (`UsageStore.measures`), so they are tested as tables. What is measured is what
the gateway saw of real traffic:

- generation time: the upstream part of a request (`upstream_ms`), in seconds;
- tokens per second: completion tokens over that time;
- time to first token: from the request's arrival to its first streamed token (`ttft_ms`: streams only,
  since a buffered answer has no first token before its last), in milliseconds;
- inter-token latency: the time after the first token over the tokens after it, in milliseconds.

Percentiles are nearest-rank (the smallest value with at least p% of the values at or below it), so every
number reported is one a request really had.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from inferplex.dialects.unify_wire import iso

HOUR_S = 3600


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _generation(rows: Iterable[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(generation seconds, tokens per second) of the rows that were timed."""
    seconds, speeds = [], []
    for r in rows:
        upstream = r["upstream_ms"]
        if upstream:
            seconds.append(upstream / 1000)
            if r["completion_tokens"]:
                speeds.append(r["completion_tokens"] * 1000 / upstream)
    return seconds, speeds


def intervals(rows: list[dict[str, Any]], since: float, interval: int, user: str | None) -> list[dict[str, Any]]:
    """One item per `interval` seconds from `since` that had requests, oldest first."""
    buckets: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        buckets.setdefault(int((r["created_at"] - since) // interval), []).append(r)
    out = []
    for index in sorted(buckets):
        group = buckets[index]
        seconds, speeds = _generation(group)
        start = since + index * interval
        out.append(
            {
                "start_time": iso(start),
                "end_time": iso(start + interval),
                "user_id": user,
                "request_count": len(group),
                "prompt_tokens": sum(r["prompt_tokens"] for r in group),
                "completion_tokens": sum(r["completion_tokens"] for r in group),
                "generation_time_p50": _rounded(percentile(seconds, 50)),
                "generation_time_p95": _rounded(percentile(seconds, 95)),
                "tokens_per_second_p50": _rounded(percentile(speeds, 50)),
                "tokens_per_second_p95": _rounded(percentile(speeds, 95)),
            }
        )
    return out


def _latencies(rows: Iterable[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(time to first token, inter-token latency), in ms, of the streamed rows."""
    first, between = [], []
    for r in rows:
        ttft = r["ttft_ms"]
        if not ttft:
            continue
        first.append(ttft)
        if r["completion_tokens"] > 1 and r["total_ms"] and r["total_ms"] > ttft:
            between.append((r["total_ms"] - ttft) / (r["completion_tokens"] - 1))
    return first, between


def endpoint_metrics(rows: list[dict[str, Any]], input_cost: float, output_cost: float) -> list[dict[str, Any]]:
    """One measurement per UTC hour with traffic, oldest first: the medians of that hour, the endpoint's
    prices (USD per million tokens), and when the hour's last request was made."""
    hours: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        hours.setdefault(int(r["created_at"] // HOUR_S), []).append(r)
    out = []
    for hour in sorted(hours):
        group = hours[hour]
        first, between = _latencies(group)
        out.append(
            {
                "time_to_first_token": _rounded(percentile(first, 50)),
                "inter_token_latency": _rounded(percentile(between, 50)),
                "input_cost": input_cost,
                "output_cost": output_cost,
                "measured_at": iso(max(r["created_at"] for r in group)),
                "requests": len(group),
            }
        )
    return out
