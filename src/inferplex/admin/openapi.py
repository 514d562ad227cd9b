"""`/openapi.json`: every route the gateway serves, built from the routes' own pydantic models.

The API routes of each dialect are `inferplex.openapi.operations`; the admin API, the token exchange and
this document are listed here, beside the models they use (`models.py` for bodies, `responses.py` for
answers). The document is built once, on first request.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from inferplex import __version__
from inferplex.admin import responses as r
from inferplex.admin.cache import MAX_WINDOW_S, CachePurge
from inferplex.admin.models import AccountCreate, AccountUpdate, CreditChange, KeyCreate, KeyUpdate, TokenRequest
from inferplex.openapi.operations import GATEWAY, OPERATIONS
from inferplex.openapi.spec import Dialect, Operation, Param, build_document
from inferplex.store.request_log import CACHE_OUTCOMES, MAX_LIMIT, STATUS_CLASSES
from inferplex.store.rollups import GROUPS as SERIES_GROUPS
from inferplex.store.usage import GROUPS

ADMIN = Dialect("Admin", GATEWAY.error)
_READ = (400, 401, 403, 500, 503)  # 400: a parameter no store can hold (NUL)
_WRITE = (400, 401, 403, 404, 413, 415, 500, 503)
_NUMBER = {"type": "number"}
_FILTER = (
    Param("key_id"),
    Param("account_id"),
    Param("model"),
    Param("since", _NUMBER, description="UNIX seconds"),
    Param("until", _NUMBER, description="UNIX seconds"),
    Param(
        "cache",
        {"type": "string", "enum": [*CACHE_OUTCOMES, "hits"]},
        description="the response cache's outcome: hit, semantic-hit, miss, bypass, hits (either kind), or none "
        "(caching did not apply)",
    ),
)
_LIMIT = Param("limit", {"type": "integer", "minimum": 1, "maximum": 10_000})
_MICROS = {"type": "integer", "minimum": 0, "maximum": 10**18 - 1}
_SERIES = (
    Param("grain", {"type": "string", "enum": ["hour", "day"]}, description="bucket width (default hour)"),
    Param("group_by", {"type": "string", "enum": list(SERIES_GROUPS)}, description="one series per group"),
    Param("since", _NUMBER, description="UNIX seconds (default: a day, or 30 days, before `until`)"),
    Param("until", _NUMBER, description="UNIX seconds (default: now)"),
    Param("model"),
    Param("key_id"),
    Param("account_id"),
    Param("provider"),
)
_REQUEST_FILTER = (
    *_FILTER,
    Param("provider"),
    Param("deployment"),
    Param("status", {"type": "string"}, description=f"{', '.join(STATUS_CLASSES)}, or a status code"),
    Param("error_type", description="a closed error type (caller.*, policy.*, provider.*, gateway.*) or its prefix"),
    Param("min_cost_micros", _MICROS),
    Param("max_cost_micros", _MICROS),
    Param("min_latency_ms", _NUMBER, description="total latency, milliseconds"),
    Param("max_latency_ms", _NUMBER),
    Param("tag"),
    Param("before", description="the `before` cursor of the previous page"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
)


def _admin(method: str, path: str, summary: str, ok: Any, errors: tuple[int, ...], **kw: Any) -> Operation:
    return Operation(method, path, summary, ADMIN, ok, errors, **kw)


ADMIN_OPERATIONS: list[Operation] = [
    _admin(
        "post",
        "/admin/keys",
        "Create a key (the secret is in this response only)",
        r.ApiKey,
        _WRITE,
        body=KeyCreate,
        ok_status=201,
    ),
    _admin("get", "/admin/keys", "List keys", r.ApiKeyList, _READ, params=(Param("account_id"),)),
    _admin("get", "/admin/keys/{key_id}", "Get a key", r.ApiKey, (*_READ, 404)),
    _admin(
        "patch",
        "/admin/keys/{key_id}",
        "Update a key's name, scopes, models, IPs, limits, expiry, tags",
        r.ApiKey,
        _WRITE,
        body=KeyUpdate,
    ),
    _admin(
        "post", "/admin/keys/{key_id}/revoke", "Revoke a key (and every token minted from it)", r.ApiKey, (*_READ, 404)
    ),
    _admin("post", "/admin/keys/{key_id}/rotate", "Replace a key's secret", r.ApiKey, (*_READ, 404)),
    _admin("post", "/admin/accounts", "Create an account", r.Account, _WRITE, body=AccountCreate, ok_status=201),
    _admin("get", "/admin/accounts", "List accounts", r.AccountList, _READ),
    _admin("get", "/admin/accounts/{account_id}", "An account and its balance", r.Account, (*_READ, 404)),
    _admin(
        "patch",
        "/admin/accounts/{account_id}",
        "Update an account's name and limits",
        r.Account,
        _WRITE,
        body=AccountUpdate,
    ),
    _admin(
        "post",
        "/admin/accounts/{account_id}/credits",
        "Top up, refund or adjust credits",
        r.Account,
        _WRITE,
        body=CreditChange,
    ),
    _admin(
        "get",
        "/admin/accounts/{account_id}/ledger",
        "The account's ledger, newest first",
        r.LedgerList,
        (*_READ, 404),
        params=(_LIMIT, Param("before", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1})),
    ),
    _admin("get", "/admin/usage", "Usage rows, newest first", r.UsageList, _READ, params=(*_FILTER, _LIMIT)),
    _admin(
        "get",
        "/admin/usage/totals",
        "Usage totals",
        r.UsageTotals,
        _READ,
        params=(Param("by", {"type": "string", "enum": list(GROUPS)}), *_FILTER),
    ),
    _admin(
        "get",
        "/admin/usage/series",
        "Usage over time from the hourly or daily rollups, and totals over the range",
        r.UsageSeries,
        _READ,
        params=_SERIES,
    ),
    _admin(
        "get",
        "/admin/usage/export",
        "The same series as CSV",
        None,
        _READ,
        params=_SERIES,
        ok_media="text/csv",
    ),
    _admin(
        "get",
        "/admin/requests",
        "The request log, newest first (cursor pages)",
        r.RequestList,
        _READ,
        params=_REQUEST_FILTER,
    ),
    _admin(
        "get",
        "/admin/requests/{request_id}",
        "One request: attempts, timings, tokens, cost, error, bodies where logged, credit moves",
        r.RequestDetail,
        (*_READ, 404),
    ),
    _admin(
        "get",
        "/admin/cache",
        "The response cache: its size now, and its hit rate over a window (every replica's requests), by model",
        r.CacheState,
        (*_READ,),
        params=(
            Param(
                "window_s",
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WINDOW_S},
                description="the hit rate's window, seconds before now (default 86400)",
            ),
        ),
    ),
    _admin(
        "post",
        "/admin/cache/purge",
        "Remove cached answers by entry, model, namespace, key or scope (every selector given must match), or all",
        r.CachePurged,
        (*_WRITE, 409),
        body=CachePurge,
        description="409 `cache_disabled` when the cache is off; 503 `cache_unavailable` when its store cannot be "
        "reached.",
    ),
    Operation(
        "post",
        "/v1/auth/token",
        "Exchange an API key for a short-lived bearer token",
        GATEWAY,
        r.AccessToken,
        (400, 401, 403, 413, 415, 500, 503),
        TokenRequest,
        body_required=False,
    ),
    Operation("get", "/openapi.json", "This document", GATEWAY, dict[str, Any], (), authenticated=False),
]


@cache
def openapi_document() -> dict[str, Any]:
    return build_document("Inferplex", __version__, [*OPERATIONS, *ADMIN_OPERATIONS])
