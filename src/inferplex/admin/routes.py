"""The admin API (`/admin/...`, admin scope) and the token exchange (`POST /v1/auth/token`).

Every handler is a thin shell: parse the body with its pydantic model, call `admin.operations` or a store,
answer JSON. Errors are OpenAI error objects, like every other route. Every parameter is checked before it
reaches a store (`_admin`, `_int`, `_float`), so bad input is a 400 naming it, never a database error.
"""

from __future__ import annotations

import math
import time
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts import tokens
from inferplex.accounts.wiring import AccountServices
from inferplex.admin import cache
from inferplex.admin import operations as ops
from inferplex.admin.models import (
    AccountCreate,
    AccountUpdate,
    CreditChange,
    KeyCreate,
    KeyUpdate,
    TokenRequest,
    invalid,
)
from inferplex.admin.openapi import openapi_document
from inferplex.auth import credential, effective_scopes
from inferplex.context import Context
from inferplex.dialects.openai import render_error
from inferplex.edge import Handler, endpoint, json_response, read_json
from inferplex.errors import InvalidRequest, NotFound, PermissionDenied
from inferplex.store.request_log import CACHE_OUTCOMES, MAX_LIMIT, RequestFilter, RequestLog
from inferplex.store.rollups import SECONDS, RollupFilter, Rollups, ceil_to, floor_to, series_csv
from inferplex.store.usage import GROUPS, UsageFilter

B = TypeVar("B", bound=BaseModel)
MAX_PAGE = 10_000  # rows a list answer holds at most (`limit`)
MAX_ID = 2**63 - 1  # a ledger entry's id (BIGINT): the `before` cursor


def _services(request: Request) -> AccountServices:
    services: AccountServices = request.app.state.accounts
    return services


async def _body(request: Request, model: type[B]) -> B:
    raw = await read_json(request, 1024 * 1024)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise invalid(exc) from None


def _float(request: Request, name: str, unit: str = "UNIX seconds") -> float | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise InvalidRequest(f"`{name}` must be a number ({unit}).", param=name)
    return number


def _int(request: Request, name: str, default: int, highest: int) -> int:
    """A positive integer query parameter, at most `highest` (a page size: the database's LIMIT)."""
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= highest:
        raise InvalidRequest(f"`{name}` must be an integer from 1 to {highest}.", param=name)
    return number


# ---- keys ------------------------------------------------------------------------------------------------


async def create_key(request: Request, ctx: Context) -> Response:
    s = _services(request)
    record, secret = await ops.create_key(s.keys, s.ledger, await _body(request, KeyCreate))
    return json_response(ops.key_view(record, secret), status=201)


async def _views(request: Request, records: list[Any], secret: str | None = None) -> list[dict[str, Any]]:
    """Keys as shown, each with its month's spend (one query for them all)."""
    months = await _services(request).ledger.key_months([r.id for r in records])
    return [ops.key_view(r, secret, months.get(r.id)) for r in records]


async def list_keys(request: Request, ctx: Context) -> Response:
    records = await _services(request).keys.list(request.query_params.get("account_id"))
    return json_response({"object": "list", "data": await _views(request, records)})


async def _key(request: Request) -> Any:
    record = await _services(request).keys.get(request.path_params["key_id"])
    if record is None:
        raise NotFound(f"No key {request.path_params['key_id']!r}.", param="key_id", code="key_not_found")
    return record


async def get_key(request: Request, ctx: Context) -> Response:
    return json_response((await _views(request, [await _key(request)]))[0])


async def update_key(request: Request, ctx: Context) -> Response:
    await _key(request)
    body = await _body(request, KeyUpdate)
    record = await _services(request).keys.update(request.path_params["key_id"], body.model_dump(exclude_unset=True))
    assert record is not None
    return json_response((await _views(request, [record]))[0])


async def revoke_key(request: Request, ctx: Context) -> Response:
    await _key(request)
    record = await _services(request).keys.revoke(request.path_params["key_id"])
    assert record is not None
    return json_response((await _views(request, [record]))[0])


async def rotate_key(request: Request, ctx: Context) -> Response:
    record, secret = await ops.rotate_key(_services(request).keys, request.path_params["key_id"])
    return json_response((await _views(request, [record], secret))[0])


# ---- accounts and credits --------------------------------------------------------------------------------


async def _account_view(s: AccountServices, account_id: str) -> dict[str, Any]:
    account = await s.ledger.account(account_id)
    if account is None:
        raise NotFound(f"No account {account_id!r}.", param="account_id", code="account_not_found")
    return account.public()


async def create_account(request: Request, ctx: Context) -> Response:
    account = await ops.create_account(_services(request).ledger, await _body(request, AccountCreate))
    return json_response(account.public(), status=201)


async def list_accounts(request: Request, ctx: Context) -> Response:
    accounts = await _services(request).ledger.accounts()
    return json_response({"object": "list", "data": [a.public() for a in accounts]})


async def get_account(request: Request, ctx: Context) -> Response:
    return json_response(await _account_view(_services(request), request.path_params["account_id"]))


async def update_account(request: Request, ctx: Context) -> Response:
    s, account_id = _services(request), request.path_params["account_id"]
    await _account_view(s, account_id)
    body = await _body(request, AccountUpdate)
    await s.ledger.update_account(account_id, body.model_dump(exclude_unset=True))
    return json_response(await _account_view(s, account_id))


async def change_credits(request: Request, ctx: Context) -> Response:
    s, account_id = _services(request), request.path_params["account_id"]
    body = await _body(request, CreditChange)
    await ops.credit(s.ledger, account_id, body)
    return json_response(await _account_view(s, account_id))


async def ledger(request: Request, ctx: Context) -> Response:
    s, account_id = _services(request), request.path_params["account_id"]
    await _account_view(s, account_id)
    limit, before = _int(request, "limit", 1000, MAX_PAGE), _int(request, "before", 0, MAX_ID) or None
    rows = await s.ledger.entries(account_id, limit + 1, before)
    return json_response({"object": "list", "data": rows[:limit], "has_more": len(rows) > limit})


# ---- usage -----------------------------------------------------------------------------------------------


def _cache(request: Request) -> str | None:
    """`cache`: a cache outcome (hit, semantic-hit, miss, bypass), `hits` (either kind), or `none`."""
    value = request.query_params.get("cache")
    if value is not None and value not in (*CACHE_OUTCOMES, "hits"):
        raise InvalidRequest(f"`cache` must be one of {', '.join(CACHE_OUTCOMES)} or hits.", param="cache")
    return value


def _filter(request: Request) -> UsageFilter:
    q = request.query_params
    return UsageFilter(
        q.get("key_id"),
        q.get("account_id"),
        q.get("model"),
        _float(request, "since"),
        _float(request, "until"),
        _cache(request),
    )


async def usage(request: Request, ctx: Context) -> Response:
    s = _services(request)
    await s.usage_log.flush()
    limit = _int(request, "limit", 100, MAX_PAGE)
    return json_response({"object": "list", "data": await s.usage.rows(_filter(request), limit)})


async def usage_totals(request: Request, ctx: Context) -> Response:
    s = _services(request)
    by = request.query_params.get("by", "day")
    if by not in GROUPS:
        raise InvalidRequest(f"`by` must be one of {', '.join(GROUPS)}.", param="by")
    await s.usage_log.flush()
    return json_response({"object": "list", "by": by, "data": await s.usage.totals(by, _filter(request))})


# ---- usage over time (the rollups) and the request log ---------------------------------------------------

DEFAULT_RANGE_S = {"hour": 86400.0, "day": 30 * 86400.0}  # a series' range when `since` is not given


def _refused(exc: ValueError, default: str) -> InvalidRequest:
    """A store's refusal of an argument as a 400 naming it (its message names it in backticks)."""
    message = str(exc)
    return InvalidRequest(message, param=message.split("`")[1] if message.count("`") >= 2 else default)


async def _series(request: Request) -> dict[str, Any]:
    q = request.query_params
    grain, group_by = q.get("grain", "hour"), q.get("group_by") or None
    if grain not in SECONDS:
        raise InvalidRequest("`grain` must be hour or day.", param="grain")
    until = _float(request, "until")
    until = time.time() if until is None else until
    since = _float(request, "since")
    since = until - DEFAULT_RANGE_S[grain] if since is None else since
    where = RollupFilter(q.get("model"), q.get("key_id"), q.get("account_id"), q.get("provider"))
    s = _services(request)
    await s.usage_log.flush()
    rollups = Rollups(s.usage.db)
    try:
        data = await rollups.series(grain, since, until, group_by, where)
        totals = await rollups.totals(since, until, group_by, where)
    except ValueError as exc:
        raise _refused(exc, "since") from None
    step = SECONDS[grain]
    return {
        "object": "list",
        "grain": grain,
        "group_by": group_by,
        "since": floor_to(step, since),
        "until": ceil_to(step, until),
        "data": data,
        "totals": totals,
    }


async def usage_series(request: Request, ctx: Context) -> Response:
    return json_response(await _series(request))


async def usage_export(request: Request, ctx: Context) -> Response:
    series = await _series(request)
    name = f"usage-{series['grain']}-{series['since']}-{series['until']}.csv"
    return Response(
        series_csv(series["data"]),
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )


def _whole(request: Request, name: str) -> int | None:
    """A non-negative integer query parameter (micro-USD), or None."""
    value = request.query_params.get(name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        raise InvalidRequest(f"`{name}` must be a whole number of micro-USD.", param=name)
    return int(value)


async def list_requests(request: Request, ctx: Context) -> Response:
    q = request.query_params
    where = RequestFilter(
        since=_float(request, "since"),
        until=_float(request, "until"),
        model=q.get("model"),
        key_id=q.get("key_id"),
        account_id=q.get("account_id"),
        provider=q.get("provider"),
        deployment=q.get("deployment"),
        status=q.get("status"),
        error_type=q.get("error_type"),
        min_cost_micros=_whole(request, "min_cost_micros"),
        max_cost_micros=_whole(request, "max_cost_micros"),
        min_latency_ms=_float(request, "min_latency_ms", "milliseconds"),
        max_latency_ms=_float(request, "max_latency_ms", "milliseconds"),
        tag=q.get("tag"),
        cache=_cache(request),
    )
    limit = _int(request, "limit", 50, MAX_LIMIT)
    s = _services(request)
    await s.usage_log.flush()
    try:
        page = await RequestLog(s.usage.db).page(where, q.get("before"), limit)
    except ValueError as exc:
        raise _refused(exc, "before") from None
    return json_response({"object": "list", "data": page.rows, "has_more": page.before is not None,
                          "before": page.before})  # fmt: skip


async def get_request(request: Request, ctx: Context) -> Response:
    s, request_id = _services(request), request.path_params["request_id"]
    await s.usage_log.flush()
    found = await RequestLog(s.usage.db).detail(request_id)
    if found is None:
        raise NotFound(f"No logged request {request_id!r}.", param="request_id", code="request_not_found")
    return json_response({"object": "request", **found})


# ---- token exchange and the OpenAPI document -------------------------------------------------------------


async def issue_token(request: Request, ctx: Context) -> Response:
    """Trade the credential in the Authorization header for a short-lived signed bearer token, which holds
    at most the credential's scopes and outlives neither `token_ttl_s` nor a token it was traded from."""
    s = _services(request)
    principal = ctx.principal = await request.app.state.services.auth.authenticate(request)
    body = TokenRequest()
    if request.headers.get("content-length") not in (None, "0") or "transfer-encoding" in request.headers:
        body = await _body(request, TokenRequest)
    longest = s.config.accounts.token_ttl_s
    if body.ttl_s is not None and body.ttl_s > longest:
        raise InvalidRequest(f"`ttl_s` must be at most {longest} (accounts.token_ttl_s).", param="ttl_s")
    scopes = principal.scopes
    if body.scopes is not None:
        beyond = sorted(set(body.scopes) - effective_scopes(principal.scopes))
        if beyond:
            raise PermissionDenied(
                f"A token can only narrow its credential's scopes, and this one does not have {beyond}.",
                param="scopes",
                code="scope_not_allowed",
            )
        scopes = frozenset(body.scopes)
    now = int(time.time())
    expires_at = now + (body.ttl_s or longest)
    presented = credential(request.headers) or ""
    if presented.startswith(tokens.TOKEN_PREFIX):  # traded from a token: it ends when that one does
        claims = tokens.verify(s.token_secret, presented, now)
        expires_at = min(expires_at, claims.expires_at if claims else now)
    token = tokens.issue(s.token_secret, principal.key_id, scopes, expires_at, principal.binding)
    return json_response(
        {
            "object": "access_token",
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": expires_at - now,
            "expires_at": expires_at,
            "scopes": sorted(scopes),
            "key_id": principal.key_id,
        }
    )


async def openapi(request: Request) -> Response:
    return json_response(openapi_document())


def _admin(handler: Handler, query: tuple[str, ...] = ()) -> Any:
    """An admin route: admin scope; only the query parameters in `query`, each at most once (a misspelt
    filter must not widen a listing to everything); and no path or query parameter holding NUL, which no
    store can hold (PostgreSQL refuses it even in a comparison), whichever parameter a handler reads."""
    allowed = frozenset(query)

    async def checked(request: Request, ctx: Context) -> Response:
        given = request.query_params.multi_items()
        seen: set[str] = set()
        for name, _ in given:
            if name not in allowed:
                takes = f"takes only {', '.join(query)}" if query else "takes no query parameters"
                raise InvalidRequest(f"Unknown query parameter `{name}`: this route {takes}.", param=name)
            if name in seen:
                raise InvalidRequest(f"`{name}` is given more than once.", param=name)
            seen.add(name)
        for name, value in [*request.path_params.items(), *given]:
            if "\x00" in value:
                raise InvalidRequest(f"`{name}` contains a NUL character.", param=name)
        return await handler(request, ctx)

    return endpoint(render_error, checked, "admin")


_FILTERS = ("key_id", "account_id", "model", "since", "until", "cache")
_SERIES = ("grain", "group_by", "since", "until", "model", "key_id", "account_id", "provider")
_REQUESTS = (
    *_FILTERS, "provider", "deployment", "status", "error_type", "min_cost_micros", "max_cost_micros",
    "min_latency_ms", "max_latency_ms", "tag", "before", "limit",
)  # fmt: skip

routes = [
    Route("/admin/keys", _admin(create_key), methods=["POST"]),
    Route("/admin/keys", _admin(list_keys, ("account_id",)), methods=["GET"]),
    Route("/admin/keys/{key_id}", _admin(get_key), methods=["GET"]),
    Route("/admin/keys/{key_id}", _admin(update_key), methods=["PATCH"]),
    Route("/admin/keys/{key_id}/revoke", _admin(revoke_key), methods=["POST"]),
    Route("/admin/keys/{key_id}/rotate", _admin(rotate_key), methods=["POST"]),
    Route("/admin/accounts", _admin(create_account), methods=["POST"]),
    Route("/admin/accounts", _admin(list_accounts), methods=["GET"]),
    Route("/admin/accounts/{account_id}", _admin(get_account), methods=["GET"]),
    Route("/admin/accounts/{account_id}", _admin(update_account), methods=["PATCH"]),
    Route("/admin/accounts/{account_id}/credits", _admin(change_credits), methods=["POST"]),
    Route("/admin/accounts/{account_id}/ledger", _admin(ledger, ("limit", "before")), methods=["GET"]),
    Route("/admin/usage", _admin(usage, (*_FILTERS, "limit")), methods=["GET"]),
    Route("/admin/usage/totals", _admin(usage_totals, ("by", *_FILTERS)), methods=["GET"]),
    Route("/admin/usage/series", _admin(usage_series, _SERIES), methods=["GET"]),
    Route("/admin/usage/export", _admin(usage_export, _SERIES), methods=["GET"]),
    Route("/admin/requests", _admin(list_requests, _REQUESTS), methods=["GET"]),
    Route("/admin/requests/{request_id}", _admin(get_request), methods=["GET"]),
    Route("/admin/cache", _admin(cache.get_cache, ("window_s",)), methods=["GET"]),
    Route("/admin/cache/purge", _admin(cache.purge_cache), methods=["POST"]),
    Route("/v1/auth/token", endpoint(render_error, issue_token, None), methods=["POST"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]
