"""The console's data pages in /openapi.json: usage (and its CSV), the request log and one request,
providers and deployments, models and prices. Each is a `page` (openapi/console.py): HTML, a 303 to the
sign-in page without a session, errors as HTML pages."""

from __future__ import annotations

from typing import Any

from inferplex.console.cache_page import WINDOWS as CACHE_WINDOWS
from inferplex.console.request_pages import CACHE_CHOICES, RANGES
from inferplex.console.usage_pages import GRAINS, GROUPS
from inferplex.openapi.console import page
from inferplex.openapi.spec import Operation, Param
from inferplex.store.request_log import STATUS_CLASSES

_DAY = "a UTC date (YYYY-MM-DD, the whole day) or date and time (YYYY-MM-DDTHH:MM)"


def _text(name: str, description: str) -> Param:
    return Param(name, {"type": "string", "maxLength": 200}, description=description)


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


_RANGE = (
    Param("from", description=f"start: {_DAY}"),
    Param("to", description=f"end, included: {_DAY}"),
)
_USAGE = (
    Param("range", _enum(("", "24h", "7d", "30d")), description="a preset range ending now (default 24h)"),
    *_RANGE,
    Param("group", _enum(GROUPS), description="one line and one table row per model, key, account or provider"),
    Param("grain", _enum(GRAINS), description="hourly or daily buckets (auto: hours up to three days)"),
    _text("model", "only this model"),
    _text("key", "only this key id"),
    _text("account", "only this account id"),
    _text("provider", "only this provider"),
)
_USD = {"type": "string", "description": "US dollars, e.g. 0.25"}
_REQUESTS = (
    Param("range", _enum(RANGES), description="a preset range ending now (default: any time)"),
    *_RANGE,
    _text("model", "only this model"),
    _text("key", "only this key id"),
    _text("account", "only this account id"),
    _text("deployment", "only requests served by this deployment"),
    _text("tag", "only requests with this tag"),
    Param("status", description=f"{', '.join(STATUS_CLASSES)}, or an HTTP status code"),
    Param("error_type", description="a fault (caller, policy, provider, gateway) or a closed error type"),
    Param("cache", _enum(CACHE_CHOICES), description="the response cache's outcome, hits (either kind) or none"),
    Param("min_cost", _USD),
    Param("max_cost", _USD),
    Param("min_ms", {"type": "number", "minimum": 0}, description="total latency at least this"),
    Param("max_ms", {"type": "number", "minimum": 0}, description="total latency at most this"),
    Param("before", description="the cursor of the next page (the page's `Older requests` link)"),
    Param("fragment", _enum(("rows",)), description="rows: only the table rows (htmx's `Older requests`)"),
)

OPERATIONS: list[Operation] = [
    page("get", "/ui/usage", "Usage over time: charts and totals by model, key, account or provider", params=_USAGE),
    page(
        "get",
        "/ui/usage.csv",
        "The usage page's selection as CSV (every bucket, every group)",
        params=_USAGE,
        ok_media="text/csv",
    ),
    page("get", "/ui/requests", "The request log, filtered, newest first, a page at a time", params=_REQUESTS),
    page("get", "/ui/requests/{request_id}", "One request: attempts, timings, tokens, cost, bodies where logged"),
    page(
        "get",
        "/ui/providers",
        "Deployments' health (breakers, in flight, latency) and recent upstream errors",
        params=(_text("deployment", "recent errors of this deployment only"),),
    ),
    page("get", "/ui/models", "Models, their deployments and prices"),
    page(
        "get",
        "/ui/cache",
        "The response cache: its size, its hit rate by model over a window, and the purge form",
        params=(
            Param("window", _enum(tuple(CACHE_WINDOWS)), description="the hit rate's window (default 24h)"),
            Param("purged", {"type": "integer", "minimum": 0}, description="entries the last purge removed (shown)"),
        ),
    ),
]
