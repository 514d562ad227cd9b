"""The response cache's page (`/ui/cache`): its size, its hit rate over a window, by model, and a form that
purges entries by entry, model, namespace, key or scope (or all of them).

It shows and does exactly what the admin API's `/admin/cache` and `/admin/cache/purge` do (admin/cache.py):
the same numbers (the size from the running cache, the hit rate from every replica's usage rows) and the same
purge body, validated by the same model, so the page and the API refuse alike. A purge is a POST with the
session's CSRF token, then a redirect to the page saying how many entries went (POST, redirect, GET: a
reload does not purge again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.admin import cache as admin_cache
from inferplex.console import render, session
from inferplex.console.query import BadQuery
from inferplex.errors import GatewayError

# the hit rate's window: its name in the query string and in seconds
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
DEFAULT_WINDOW = "24h"
PURGE_FIELDS = ("entry", "model", "namespace", "key_id", "scope")


def size(count: int | None) -> str:
    """Bytes as a person reads them (1.5 MB); a dash when unknown."""
    if count is None:
        return "—"
    amount = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if amount < 1024 or unit == "GB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GB"  # pragma: no cover: the loop returns at GB


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _window(params: Mapping[str, str]) -> str:
    value = params.get("window", "").strip() or DEFAULT_WINDOW
    if value not in WINDOWS:
        raise BadQuery("window", f"`window` must be one of {', '.join(WINDOWS)}.")
    return value


def _purged(params: Mapping[str, str]) -> int | None:
    value = params.get("purged", "")
    return int(value) if value.isdigit() and len(value) < 19 else None


def purge_values(form: FormData) -> dict[str, Any]:
    """The purge body from the form: each selector filled in, and `all` when its box is ticked."""
    values: dict[str, Any] = {}
    for name in PURGE_FIELDS:
        text = form.get(name)
        if isinstance(text, str) and text.strip():
            values[name] = text.strip()
    if form.get("all") in ("on", "true", "1"):
        values["all"] = True
    return values


async def _page(
    request: Request,
    window: str,
    *,
    error: GatewayError | None = None,
    form: FormData | None = None,
    purged: int | None = None,
) -> Response:
    found = await admin_cache.state(request, WINDOWS[window])
    shown = found["window"]
    values = {name: "" for name in PURGE_FIELDS}
    if form is not None:
        values.update({k: v for k, v in purge_values(form).items() if isinstance(v, str)})
    context = {
        "cache": found,
        "size": size(found["bytes"]),
        "max_size": size(found["max_bytes"]) if found["max_bytes"] is not None else "",
        "window": window,
        "windows": tuple(WINDOWS),
        "rate": rate(shown["hit_rate"]),
        "totals": shown,
        "models": [{**m, "rate": rate(m["hit_rate"])} for m in shown["by_model"]],
        "values": values,
        "all_checked": form is not None and form.get("all") in ("on", "true", "1"),
        "error": error,
        "purged": purged,
    }
    status = error.status if error is not None else 200
    return render.page(request, "cache.html", context, status)


async def cache_page(request: Request) -> Response:
    await session.signed_in(request)
    try:
        window = _window(request.query_params)
    except BadQuery as bad:
        raise bad.as_error() from None
    return await _page(request, window, purged=_purged(request.query_params))


async def purge(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    window = form.get("window")
    window = window if isinstance(window, str) and window in WINDOWS else DEFAULT_WINDOW
    try:
        body = admin_cache.parsed(purge_values(form))
        purged = await admin_cache.purge(admin_cache.running(request), body)
    except GatewayError as refused:  # a bad selection (400), the cache off (409), its store down (503)
        return await _page(request, window, error=refused, form=form)
    return render.see_other("/ui/cache?" + urlencode({"window": window, "purged": purged}))


ROUTES: list[Route] = [
    Route("/ui/cache", render.guarded(cache_page), methods=["GET"]),
    Route("/ui/cache/purge", render.guarded(purge), methods=["POST"]),
]
