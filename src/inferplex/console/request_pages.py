"""The request log (`/ui/requests`) and one request (`/ui/requests/{request_id}`).

Both read the usage table through store/request_log.py: newest first, filtered by time, model, key,
account, deployment, status, fault, cost, latency and tag, a page at a time by cursor (the last row's
place, so a page never repeats or skips a row while new requests arrive). "More" fetches the next page's
rows with htmx and appends them; without JavaScript it is a plain link to the next page. A request's page
shows what its usage row holds: its attempts (every deployment tried, and why each failed), timings,
tokens, cost and the credit moves it made, and its bodies when logging them was on for it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.wiring import AccountServices
from inferplex.console import query, render, session
from inferplex.console.query import BadQuery
from inferplex.errors import NotFound
from inferplex.observe.faults import ERROR_TYPES, FAULTS
from inferplex.store.request_log import CACHE_OUTCOMES, STATUS_CLASSES, RequestFilter, RequestLog, RequestPage

PAGE = 50
RANGES = ("", *query.PRESETS)  # "": any time
TEXT_FILTERS = (
    ("model", "model"),
    ("key_id", "key"),
    ("account_id", "account"),
    ("deployment", "deployment"),
    ("tag", "tag"),
)
NUMBER_FILTERS = ("min_cost", "max_cost", "min_ms", "max_ms")
FIELDS = ("from", "to", "range", *(name for _, name in TEXT_FILTERS), "status", "error_type", "cache", *NUMBER_FILTERS)
CACHE_CHOICES = ("", *CACHE_OUTCOMES, "hits")  # "": any
MAX_REQUEST_ID = 64  # the usage table's request_id column


def _status(params: Mapping[str, str]) -> str | None:
    value = params.get("status", "").strip()
    if not value:
        return None
    if value in STATUS_CLASSES or (len(value) == 3 and value.isdigit() and 100 <= int(value) <= 599):
        return value
    raise BadQuery("status", f"`status` must be one of {', '.join(STATUS_CLASSES)} or an HTTP status code.")


def _error_type(params: Mapping[str, str]) -> str | None:
    value = params.get("error_type", "").strip()
    if not value:
        return None
    if value in FAULTS or value in ERROR_TYPES:
        return value
    raise BadQuery("error_type", "`error_type` must be a fault (caller, policy, provider, gateway) or an error type.")


class Deployments:
    """Deployment names as the pages show them, and as the usage table keeps them.

    The providers page, a request's attempts and the metrics name a deployment by its key (`Target.key`: its
    `id`, else `provider/model[@region]`); the usage row keeps its `id`, else its upstream model, beside the
    provider. This translates both ways, so the log shows and filters by the same name as everywhere else."""

    def __init__(self, catalog: Any) -> None:
        self.by_key: dict[str, tuple[str, str]] = {}
        self.by_row: dict[tuple[str, str], str] = {}
        for model in catalog.models:
            for target in catalog.targets(model):
                stored = (target.provider.name, target.deployment.id or target.upstream_model)
                self.by_key.setdefault(target.key, stored)
                self.by_row.setdefault(stored, target.key)

    def shown(self, provider: str | None, stored: str | None) -> str:
        if stored is None:
            return ""
        return self.by_row.get((provider or "", stored), stored)


def _deployments(request: Request) -> Deployments:
    return Deployments(request.app.state.services.pipeline.catalog)


def filters(params: Mapping[str, str], now: float, deployments: Deployments | None = None) -> RequestFilter:
    """The filter a query string asks for; `BadQuery` naming the first bad parameter. Without `from`, `to`
    or `range`, any time. A deployment may be named by its key (as the providers page shows it) or as the
    usage row keeps it."""
    since = until = None
    if any(params.get(k, "").strip() for k in ("from", "to", "range")):
        picked = query.time_range(params, now, query.choice(params, "range", RANGES, "") or "24h")
        since, until = picked.since, picked.until
    min_ms, max_ms = query.number(params, "min_ms"), query.number(params, "max_ms")
    named = {field: query.text(params, name) for field, name in TEXT_FILTERS}
    key = named["deployment"]
    if deployments is not None and key is not None and key in deployments.by_key:
        named["provider"], named["deployment"] = deployments.by_key[key]
    return RequestFilter(
        since=since,
        until=until,
        **named,
        status=_status(params),
        error_type=_error_type(params),
        min_cost_micros=query.usd_micros(params, "min_cost"),
        max_cost_micros=query.usd_micros(params, "max_cost"),
        min_latency_ms=min_ms,
        max_latency_ms=max_ms,
        cache=query.choice(params, "cache", CACHE_CHOICES, "") or None,
    )


def _before(params: Mapping[str, str]) -> str | None:
    value = params.get("before", "").strip()
    if not value:
        return None
    if len(value) > 64:
        raise BadQuery("before", "`before` is not a cursor this page gave out.")
    return value


def status_class(status: int) -> str:
    return f"s{status // 100}xx" if 200 <= status < 600 else ""


def row_view(row: dict[str, Any], deployments: Deployments) -> dict[str, Any]:
    """A log row as the table shows it."""
    return {
        "request_id": row["request_id"],
        "when": query.utc(row["created_at"]),
        "short_when": query.short(row["created_at"]),
        "model": row["model"] or "",
        "deployment": deployments.shown(row.get("provider"), row.get("deployment")),
        "key_id": row["key_id"] or "",
        "status": row["status"],
        "status_class": status_class(row["status"]),
        "error_type": row.get("error_type") or "",
        "prompt_tokens": row["prompt_tokens"],
        "completion_tokens": row["completion_tokens"],
        "estimated": bool(row.get("estimated")),
        "cost": query.usd(row["cost_micros"]),
        "cost_micros": row["cost_micros"],
        "total": query.ms(row["total_ms"]),
        "retried": row.get("attempt_errors") or 0,
        "cache": row.get("cache") or "",  # the response cache's outcome (migration 0020)
    }


async def read_page(accounts: AccountServices, where: RequestFilter, before: str | None) -> RequestPage:
    await accounts.usage_log.flush()  # rows still queued in memory: the log shows the request just made
    try:
        return await RequestLog(accounts.usage.db).page(where, before, PAGE)
    except ValueError as exc:  # a cursor the log did not give out
        raise BadQuery("before", str(exc)) from None


def _form(params: Mapping[str, str]) -> dict[str, str]:
    return {name: params.get(name, "") for name in FIELDS}


async def requests_page(request: Request) -> Response:
    await session.signed_in(request)
    params = request.query_params
    fragment = params.get("fragment") == "rows"
    form = _form(params)
    context: dict[str, Any] = {
        "form": form,
        "ranges": RANGES,
        "statuses": STATUS_CLASSES,
        "faults": FAULTS,
        "cache_choices": CACHE_CHOICES,
        "error": None,
        "rows": [],
        "more_href": None,
        "more_fragment": None,
    }
    try:
        deployments = _deployments(request)
        where = filters(params, time.time(), deployments)
        found = await read_page(request.app.state.accounts, where, _before(params))
    except BadQuery as bad:
        if fragment:
            return render.problem(request, bad.as_error())
        return render.page(request, "requests.html", context | {"error": bad}, 400)
    if found.before is not None:
        kept = {k: v for k, v in form.items() if v}
        context["more_href"] = "/ui/requests?" + urlencode(kept | {"before": found.before})
        context["more_fragment"] = "/ui/requests?" + urlencode(kept | {"before": found.before, "fragment": "rows"})
    context["rows"] = [row_view(r, deployments) for r in found.rows]
    context["paged"] = bool(params.get("before"))
    return render.page(request, "request_rows.html" if fragment else "requests.html", context)


def _pretty(body: Any) -> str | None:
    if body is None:
        return None
    try:
        return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return str(body)


async def _detail(accounts: AccountServices, request_id: str) -> dict[str, Any] | None:
    await accounts.usage_log.flush()
    return await RequestLog(accounts.usage.db).detail(request_id)


async def request_page(request: Request) -> Response:
    await session.signed_in(request)
    request_id = request.path_params["request_id"]
    found = None
    if len(request_id) <= MAX_REQUEST_ID:
        found = await _detail(request.app.state.accounts, request_id)
    if found is None:
        raise NotFound(f"No request {request_id!r} in the log.", param="request_id", code="request_not_found")
    attempts = [
        {
            "deployment": a.get("deployment") or "",
            "model": a.get("model") or "",
            "outcome": a.get("outcome") or "",
            "status": a.get("status"),
            "status_class": status_class(a["status"]) if isinstance(a.get("status"), int) else "",
            "error": a.get("error") or "",
            "latency": query.ms(a.get("latency_ms")),
        }
        for a in found["attempts"]
        if isinstance(a, dict)
    ]
    ledger = [
        {
            "kind": e.get("kind") or "",
            "amount": query.usd(e.get("amount_micros")),
            "account_id": e.get("account_id") or "",
            "note": e.get("note") or "",
            "when": query.utc(e.get("created_at")),
        }
        for e in found["ledger"]
    ]
    context = {
        "r": row_view(found, _deployments(request)),
        "row": found,
        "timings": [
            (name, query.ms(found.get(key)))
            for name, key in (
                ("total", "total_ms"),
                ("upstream", "upstream_ms"),
                ("first token", "ttft_ms"),
                ("queued", "queued_ms"),
            )
            if found.get(key) is not None
        ],
        "tags": found.get("tags") or [],
        "attempts": attempts,
        "ledger": ledger,
        "request_body": _pretty(found.get("request_body")),
        "response_body": _pretty(found.get("response_body")),
    }
    return render.page(request, "request.html", context)


ROUTES: list[Route] = [
    Route("/ui/requests", render.guarded(requests_page), methods=["GET"]),
    Route("/ui/requests/{request_id}", render.guarded(request_page), methods=["GET"]),
]
