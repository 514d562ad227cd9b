"""The usage page (`/ui/usage`) and its CSV (`/ui/usage.csv`): requests, tokens, cost, errors and latency
over time, grouped by model, key, account or provider.

Both read the hourly and daily rollups (store/rollups.py), never the usage table, and the page draws at most
`MAX_LINES` groups, read alone when there are many (`read_usage`): its cost grows with the buckets it shows,
not with the requests behind them (bench/console_pages.py: well under a second at a million rows, on SQLite
and PostgreSQL, for a month by the hour by 200 keys). The selection (range,
grain, grouping, filters) is the URL's query string, so a view can be bookmarked, and the CSV link is the
same query: the export is exactly what the page shows, bucket by bucket and group by group.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.wiring import AccountServices
from inferplex.console import query, render, session
from inferplex.console.query import BadQuery, TimeRange
from inferplex.store.rollups import MAX_BUCKETS, SECONDS, RollupFilter, Rollups, bucket_starts, series_csv

GRAINS = ("auto", "hour", "day")
GROUPS = ("model", "key", "account", "provider", "none")
AUTO_HOURLY_S = 3 * 86_400  # a range up to three days is drawn by the hour, a longer one by the day
MAX_LINES = 8  # groups drawn as lines of their own; the rest are summed into one "other" line
MAX_GROUPED_ROWS = 5_000  # past this many (bucket, group) rows, the drawn groups' series are read one by one
MAX_TABLE = 500  # groups listed in the totals table (the CSV has every one)
FILTERS = (("model", "model"), ("key_id", "key"), ("account_id", "account"), ("provider", "provider"))
NO_GROUP = {"model": "(no model)", "key": "(master key)", "account": "(no account)", "provider": "(none)"}


@dataclass(frozen=True, slots=True)
class Selection:
    """What the page shows: a time range, the bucket width, a grouping and filters."""

    range: TimeRange
    grain: str  # "hour" or "day": what is read
    grain_asked: str  # as the form chose it ("auto" too)
    group: str  # one of GROUPS ("none": one line)
    filters: RollupFilter

    @property
    def group_by(self) -> str | None:
        return None if self.group == "none" else self.group

    def params(self, **changed: str) -> dict[str, str]:
        """The query string that asks for this selection again (with `changed` values replaced)."""
        out = {**self.range.params(), "group": self.group, "grain": self.grain_asked}
        for field, name in FILTERS:
            value = getattr(self.filters, field)
            if value is not None:
                out[name] = value
        return {**out, **changed}

    def query(self, **changed: str) -> str:
        return urlencode(self.params(**changed))


def selection(params: Mapping[str, str], now: float) -> Selection:
    """The selection a query string asks for; `BadQuery` naming the first bad parameter."""
    time_range = query.time_range(params, now, "24h")
    grain_asked = query.choice(params, "grain", GRAINS, "auto")
    grain = grain_asked if grain_asked != "auto" else ("hour" if time_range.span <= AUTO_HOURLY_S else "day")
    if time_range.span / SECONDS[grain] > MAX_BUCKETS:
        raise BadQuery("grain", f"That range holds more than {MAX_BUCKETS} {grain}s: choose days or a shorter range.")
    group = query.choice(params, "group", GROUPS, "model")
    filters = RollupFilter(**{field: query.text(params, name) for field, name in FILTERS})
    return Selection(time_range, grain, grain_asked, group, filters)


@dataclass(slots=True)
class Usage:
    """What the rollups say about a selection."""

    totals: list[dict[str, Any]]  # by group over the whole range, largest cost first
    total: dict[str, Any]  # everything in the range
    overall: list[dict[str, Any]]  # by bucket, all groups together (latency percentiles do not add up)
    lines: list[tuple[Any, list[dict[str, Any]]]]  # (group, its rows by bucket) for each group drawn
    other: list[dict[str, Any]]  # by bucket, the groups not drawn summed (empty: none)
    series: list[dict[str, Any]] | None = None  # by bucket and every group: the CSV's rows


_BY_FIELD = {"model": "model", "key": "key_id", "account": "account_id", "provider": "provider"}


def _drawn(totals: list[dict[str, Any]]) -> list[Any]:
    """The groups drawn as lines of their own: the most requests first."""
    ranked = sorted(totals, key=lambda r: (-r["requests"], r["group"] is None, r["group"] or ""))
    return [r["group"] for r in ranked[:MAX_LINES]]


def _minus(overall: list[dict[str, Any]], lines: list[tuple[Any, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per bucket, what the drawn groups leave of the whole: the "other" line."""
    left = {row["bucket"]: {"bucket": row["bucket"], **{k: row[k] for k in _SUMMED}} for row in overall}
    for _, rows in lines:
        for row in rows:
            acc = left[row["bucket"]]
            for name in _SUMMED:
                acc[name] -= row[name]
    return [row for _, row in sorted(left.items()) if any(row[k] for k in _SUMMED)]


async def read_usage(accounts: AccountServices, sel: Selection, *, every_group: bool = False) -> Usage:
    """The selection's totals, and its series as the charts draw them (`every_group`: also every group's
    series, the CSV's rows).

    Latency percentiles cannot be added up, so the whole's series is read apart from the groups'. When the
    groups' series would be long (hours of a month by each of many keys: a row per bucket and group), only
    the drawn groups' series are read, one filtered read each, and "other" is the whole minus them: the page
    costs the buckets times `MAX_LINES`, however many groups there are."""
    await accounts.usage_log.flush()  # rows still queued in memory: the page shows the request just made
    rollups = Rollups(accounts.usage.db)
    since, until, grain, group_by, where = sel.range.since, sel.range.until, sel.grain, sel.group_by, sel.filters
    try:
        overall = await rollups.series(grain, since, until, None, where)
        total = (await rollups.totals(since, until, None, where))[0]
        if group_by is None:
            return Usage([total], total, overall, [(None, overall)], [], overall if every_group else None)
        totals = await rollups.totals(since, until, group_by, where)
        drawn = _drawn(totals)
        buckets = len(bucket_starts(grain, since, until))
        series = None
        if every_group or len(totals) <= MAX_LINES or buckets * len(totals) <= MAX_GROUPED_ROWS:
            series = await rollups.series(grain, since, until, group_by, where)
            per_group: dict[Any, list[dict[str, Any]]] = {g: [] for g in drawn}
            for row in series:
                if row["group"] in per_group:
                    per_group[row["group"]].append(row)
            lines = list(per_group.items())
        else:
            field = _BY_FIELD[group_by]
            # a group that is NULL in the usage rows is '' in the rollups (their key columns are NOT NULL)
            lines = [
                (g, await rollups.series(grain, since, until, None, replace(where, **{field: g or ""}))) for g in drawn
            ]
    except ValueError as exc:  # what the rollups refuse (a range past their limits): the form says why
        raise BadQuery("from", str(exc)) from None
    other = _minus(overall, lines) if len(totals) > len(drawn) else []
    return Usage(totals, total, overall, lines, other, series)


def label(group: str | None, group_by: str | None) -> str:
    if group_by is None:
        return "all"
    return group if group is not None else NO_GROUP[group_by]


def _line(x: list[int], rows: list[dict[str, Any]], value: Any, *, gaps: bool = False) -> list[float | None]:
    """One chart line: `value(row)` per bucket of `x`, zero (or a gap) where the bucket has no row."""
    at = {row["bucket"]: i for i, row in enumerate(rows)}
    return [value(rows[at[b]]) if b in at else (None if gaps else 0) for b in x]


def chart_data(sel: Selection, usage: Usage, known: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The charts' numbers for charts.js: the bucket starts and, per chart, one line per drawn group (and
    "other"), or for latency the percentiles of everything. A key or account line is labelled with its name
    too (`known`)."""
    x = bucket_starts(sel.grain, sel.range.since, sel.range.until)
    known = known or {}

    def named(group: str | None) -> str:
        shown = label(group, sel.group_by)
        return f"{known[group]} ({shown})" if group is not None and group in known else shown

    lines = [(named(g), rows) for g, rows in usage.lines]
    if usage.other:
        lines.append((f"other ({len(usage.totals) - len(usage.lines)})", usage.other))

    def chart(key: str, title: str, unit: str, value: Any) -> dict[str, Any]:
        return {"key": key, "title": title, "unit": unit,
                "series": [{"label": name, "values": _line(x, rows, value)} for name, rows in lines]}  # fmt: skip

    charts = [
        chart("requests", "Requests", "count", lambda r: r["requests"]),
        chart("tokens", "Tokens (input + output)", "count", lambda r: r["prompt_tokens"] + r["completion_tokens"]),
        chart("cost", "Cost (USD)", "usd", lambda r: r["cost_micros"] / 1_000_000),
        chart("errors", "Errors (status 400 and above)", "count", lambda r: r["errors"]),
    ]
    latency = [
        {"label": name, "values": _line(x, usage.overall, lambda r, k=k: r[k], gaps=True)}
        for name, k in (("p50", "p50_ms"), ("p95", "p95_ms"), ("p99", "p99_ms"))
    ]
    charts.append({"key": "latency", "title": "Latency (all requests)", "unit": "ms", "series": latency})
    return {"x": x, "grain": sel.grain, "charts": charts}


_SUMMED = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")


async def names(accounts: AccountServices, group_by: str | None) -> dict[str, str]:
    """Keys' and accounts' names by id, for a grouping by key or account (ids alone say little)."""
    if group_by == "key":
        return {k.id: k.name for k in await accounts.keys.list()}
    if group_by == "account":
        return {a.id: a.name for a in await accounts.ledger.accounts()}
    return {}


def _href(group: str | None, group_by: str | None, sel: Selection) -> str:
    """Where a group's row leads: its key or account, or the request log of its model or provider."""
    if group is None or group_by is None:
        return ""
    if group_by in ("key", "account"):
        return f"/ui/{group_by}s/{quote(group, safe='')}"
    return "/ui/requests?" + urlencode({**sel.range.params(), group_by: group})


def _row_view(row: dict[str, Any], name: str, title: str = "", href: str = "") -> dict[str, Any]:
    requests = row["requests"]
    return {
        "group": name,
        "title": title,
        "href": href,
        "requests": requests,
        "errors": row["errors"],
        "error_rate": f"{100 * row['errors'] / requests:.1f}%" if requests else "",
        "prompt_tokens": row["prompt_tokens"],
        "completion_tokens": row["completion_tokens"],
        "cached_tokens": row["cached_tokens"],
        "cost": query.usd(row["cost_micros"]),
        "cost_micros": row["cost_micros"],
        "avg": query.ms(row["avg_ms"]),
        "p50": query.ms(row["p50_ms"]),
        "p95": query.ms(row["p95_ms"]),
        "p99": query.ms(row["p99_ms"]),
    }


def _form(params: Mapping[str, str], sel: Selection | None) -> dict[str, Any]:
    """The form's fields as the page shows them: the selection's, or as typed when it could not be read."""
    keys = ("from", "to", "range", "group", "grain", *(name for _, name in FILTERS))
    if sel is None:
        return {k: params.get(k, "") for k in keys}
    return dict.fromkeys(keys, "") | sel.params() | {"range": sel.range.preset or ""}


def _presets(sel: Selection | None) -> list[dict[str, Any]]:
    out = []
    for preset in query.PRESETS:
        rest = sel.params() if sel is not None else {}
        rest = {k: v for k, v in rest.items() if k not in ("from", "to")} | {"range": preset}
        out.append({"name": preset, "href": "/ui/usage?" + urlencode(rest),
                    "current": sel is not None and sel.range.preset == preset})  # fmt: skip
    return out


async def usage_page(request: Request) -> Response:
    await session.signed_in(request)
    params = request.query_params
    context: dict[str, Any] = {"groups": GROUPS, "grains": GRAINS, "error": None, "data": None}
    try:
        sel = selection(params, time.time())
        usage = await read_usage(request.app.state.accounts, sel)
    except BadQuery as bad:
        context |= {"form": _form(params, None), "presets": _presets(None), "error": bad}
        return render.page(request, "usage.html", context, 400)
    group_by = sel.group_by
    known = await names(request.app.state.accounts, group_by)
    context |= {
        "form": _form(params, sel),
        "presets": _presets(sel),
        "shown": f"{query.utc(sel.range.since, seconds=False)} to {query.utc(sel.range.until, seconds=False)}, "
        f"by the {sel.grain}",
        "group_title": "All requests" if group_by is None else group_by.capitalize(),
        "rows": [
            _row_view(r, label(r["group"], group_by), known.get(r["group"] or "", ""), _href(r["group"], group_by, sel))
            for r in usage.totals[:MAX_TABLE]
        ],
        "more_groups": max(len(usage.totals) - MAX_TABLE, 0),
        "total": _row_view(usage.total, "total"),
        "grouped": group_by is not None,
        "data": chart_data(sel, usage, known),
        "csv_href": "/ui/usage.csv?" + sel.query(),
    }
    return render.page(request, "usage.html", context)


async def usage_csv(request: Request) -> Response:
    """The selection's series as CSV, every bucket and every group (store/rollups.series_csv's columns)."""
    await session.signed_in(request)
    try:
        sel = selection(request.query_params, time.time())
        usage = await read_usage(request.app.state.accounts, sel, every_group=True)
    except BadQuery as bad:
        return render.problem(request, bad.as_error())
    assert usage.series is not None
    start = sel.range.params().get("range") or f"{sel.range.start or 'start'}_{sel.range.end or 'now'}"
    name = f"usage-{sel.group}-{sel.grain}-{start}.csv".replace(":", "")
    headers = {**render.HEADERS, "content-disposition": f'attachment; filename="{name}"'}
    return Response(series_csv(usage.series), 200, headers=headers, media_type="text/csv; charset=utf-8")


ROUTES: list[Route] = [
    Route("/ui/usage", render.guarded(usage_page), methods=["GET"]),
    Route("/ui/usage.csv", render.guarded(usage_csv), methods=["GET"]),
]
