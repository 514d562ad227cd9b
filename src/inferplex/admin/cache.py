"""The response cache in the admin API: `GET /admin/cache` (its size, and its hit rate over a window) and
`POST /admin/cache/purge` (remove entries by entry, model, namespace, key or scope, or all of them).

The size is the running cache's own view (`CacheAdmin.stats`, app.state.cache): the store every replica
shares (Redis, SQLite), or this replica's memory with the in-process backend. The hit rate is read from the
usage rows (their `cache` column, migration 0020), so it is the whole fleet's, whichever replica answered,
and it survives restarts. The console's cache page (console/cache_page.py) shows and purges the same.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import Response

from inferplex.admin.models import invalid, nul_at
from inferplex.cache.base import BackendStats, CacheAdmin, Purge
from inferplex.context import Context
from inferplex.edge import json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, Unavailable

log = logging.getLogger("inferplex.cache")

DEFAULT_WINDOW_S = 86400.0
MAX_WINDOW_S = 366 * 86400.0
_OUTCOMES = {"hit": "hits", "semantic-hit": "semantic_hits", "miss": "misses", "bypass": "bypass"}


class CachePurge(BaseModel):
    """Which entries `POST /admin/cache/purge` removes: every selector given must match (`model` and
    `namespace`: that model's entries in that namespace), or `all` alone for every entry."""

    model_config = ConfigDict(extra="forbid", strict=True)

    entry: str | None = Field(None, min_length=1, max_length=128, description="an entry's id (x-inferplex-cache-entry)")
    model: str | None = Field(None, min_length=1, max_length=200, description="the public model's name")
    namespace: str | None = Field(None, min_length=1, max_length=200, description="a caller's cache namespace")
    key_id: str | None = Field(None, min_length=1, max_length=40, description="the key whose requests stored them")
    scope: str | None = Field(
        None, min_length=1, max_length=80, description="whose entries: account:<id>, key:<id>, shared or open"
    )
    all: bool = Field(False, description="every entry (given alone)")

    @field_validator("entry", "model", "namespace", "key_id", "scope")
    @classmethod
    def _storable(cls, value: str | None, info: Any) -> str | None:
        if value is not None and nul_at(value, info.field_name) is not None:
            raise ValueError("contains a NUL character")
        return value

    @model_validator(mode="after")
    def _some(self) -> CachePurge:
        given = [name for name in ("entry", "model", "namespace", "key_id", "scope") if getattr(self, name)]
        if self.all and given:
            raise ValueError(f"`all` purges every entry: give it alone, not with {', '.join(given)}")
        if not self.all and not given:
            raise ValueError('name what to purge (entry, model, namespace, key_id, scope), or {"all": true}')
        return self

    def selector(self) -> Purge:
        return Purge(entry=self.entry, model=self.model, namespace=self.namespace, key_id=self.key_id,
                     scope=self.scope)  # fmt: skip


def running(request: Request) -> CacheAdmin | None:
    """The app's response cache, or None when the `cache` section is off."""
    cache: CacheAdmin | None = getattr(request.app.state, "cache", None)
    return cache


def window_of(request: Request) -> float:
    """`window_s`: seconds, more than 0 and at most a year (default a day)."""
    value = request.query_params.get("window_s")
    if value is None:
        return DEFAULT_WINDOW_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_WINDOW_S):
        raise InvalidRequest(f"`window_s` must be a number of seconds above 0, at most {MAX_WINDOW_S:.0f}.",
                             param="window_s")  # fmt: skip
    return seconds


def _counts() -> dict[str, Any]:
    return {"requests": 0, "hits": 0, "semantic_hits": 0, "misses": 0, "bypass": 0, "hit_rate": None}


def _rate(counts: dict[str, Any]) -> None:
    """The share of lookups that hit (exactly or semantically); a bypass made no lookup."""
    hits = counts["hits"] + counts["semantic_hits"]
    looked_up = hits + counts["misses"]
    counts["hit_rate"] = round(hits / looked_up, 6) if looked_up else None


def window_view(rows: list[tuple[str | None, str, int]], window_s: float, since: float) -> dict[str, Any]:
    """The window's counts, overall and per model, from (model, outcome, requests) rows."""
    total = _counts()
    models: dict[str | None, dict[str, Any]] = {}
    for model, outcome, n in rows:
        name = _OUTCOMES.get(outcome)
        if name is None:  # a value this version does not know (written by a newer one): counted, not named
            total["requests"] += n
            continue
        per = models.setdefault(model, {"model": model, **_counts()})
        for counts in (total, per):
            counts[name] += n
            counts["requests"] += n
    for counts in (total, *models.values()):
        _rate(counts)
    by_model = sorted(models.values(), key=lambda m: (-m["requests"], m["model"] or ""))
    return {**total, "window_s": window_s, "since": since, "by_model": by_model}


async def stats_of(cache: CacheAdmin | None) -> BackendStats | None:
    """The cache's size now; None when it is off. A backend that cannot answer is a 503."""
    if cache is None:
        return None
    try:
        return await cache.stats()
    except Exception as exc:
        raise _unavailable("read", exc) from None


def _unavailable(doing: str, exc: Exception) -> GatewayError:
    """A 503 for a store that cannot be reached (`doing`: read, purged)."""
    log.warning("the response cache's store cannot be %s: %s: %s", doing, type(exc).__name__, exc)
    return Unavailable(f"The response cache's store cannot be {doing} right now ({type(exc).__name__}); try again "
                       "shortly.", code="cache_unavailable")  # fmt: skip


async def state(request: Request, window_s: float) -> dict[str, Any]:
    """What `GET /admin/cache` answers (and the console's page shows)."""
    accounts = request.app.state.accounts
    found = await stats_of(running(request))
    await accounts.usage_log.flush()  # rows still queued: the window counts the request just answered
    since = time.time() - window_s
    rows = await accounts.usage.cache_outcomes(since)
    return {
        "object": "cache",
        "enabled": found is not None,
        "backend": found.backend if found else None,
        "entries": found.entries if found else None,
        "bytes": found.bytes if found else None,
        "vectors": found.vectors if found else None,
        "max_bytes": found.max_bytes if found else None,
        "window": window_view(rows, window_s, since),
    }


def off() -> GatewayError:
    return InvalidRequest(
        "The response cache is off (`cache.enabled` is false in the configuration): there is nothing to purge.",
        code="cache_disabled",
        status=409,
    )


def parsed(raw: Any) -> CachePurge:
    try:
        return CachePurge.model_validate(raw)
    except ValidationError as exc:
        raise invalid(exc) from None


async def purge(cache: CacheAdmin | None, body: CachePurge) -> int:
    """Remove what `body` selects; how many entries went. 409 when the cache is off, 503 on an outage."""
    if cache is None:
        raise off()
    try:
        return await cache.purge(body.selector())
    except Exception as exc:
        raise _unavailable("purged", exc) from None


# ---- the routes (registered in admin/routes.py, described in admin/openapi.py) ----------------------------


async def get_cache(request: Request, ctx: Context) -> Response:
    return json_response(await state(request, window_of(request)))


async def purge_cache(request: Request, ctx: Context) -> Response:
    body = parsed(await read_json(request, 64 * 1024))
    purged = await purge(running(request), body)
    log.info("cache purge by %s: %s removed %d entries", ctx.principal.key_id or "master", body.selector(), purged)
    return json_response({"object": "cache.purge", "purged": purged})
