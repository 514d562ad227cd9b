"""Unify's observability routes, answered from the gateway's own usage log (one row per request, written by
the guard: accounts/guard.py) and ledger.

A caller reads its own account's rows (a key without an account: its own key's rows); an admin caller (the
master key) reads every row. Every route reads the usage log only after this replica's queued rows are
written (`UsageLog.flush`), so a caller sees the request it just made.

- `GET /v0/queries`: the query history, newest first, 100 per page (`page_number` from 1), narrowed by
  `tags` (any of them), `endpoints` (`model@provider`), `start_time`, `end_time` and `failures`.
- `POST /v0/queries`: logs a query made elsewhere as a usage row that costs nothing.
- `GET /v0/tags`: every tag on the caller's rows.
- `GET /v0/metrics`: per `interval` seconds, the request count, tokens and the p50/p95 of generation time
  and tokens per second (unify_metrics.py).
- `GET /v0/endpoint-metrics`: time to first token and inter-token latency measured from streamed traffic,
  with the endpoint's prices (unify_metrics.py).
- `GET /v0/credits`: the account's balance in USD (Unify's credit is one US dollar; ours are micro-USD).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from inferplex.accounts.wiring import AccountServices
from inferplex.auth import Principal
from inferplex.context import Context
from inferplex.dialects import unify_metrics as metrics
from inferplex.dialects.openai import endpoint_rows
from inferplex.dialects.unify_wire import Params, iso, log_query, problem
from inferplex.edge import json_response, read_json
from inferplex.errors import NotFound
from inferplex.gateway_request import tags as split_tags
from inferplex.services import Services
from inferplex.store.usage import QueryFilter

PAGE = 100  # queries per page, as Unify pages them
MAX_PAGE_NUMBER = 1_000_000
MEASURED_ROWS = 100_000  # the newest rows a metrics answer is computed from, at most
MAX_BODY_BYTES = 1024 * 1024
DAY_S = 86_400.0


def _accounts(request: Request) -> AccountServices:
    accounts: AccountServices = request.app.state.accounts
    return accounts


def scope(p: Principal) -> QueryFilter:
    """Whose rows a caller reads: all (an admin), its account's, or its own key's."""
    return QueryFilter(account_id=p.account_id, key_id=p.key_id, everyone="admin" in p.scopes)


def _endpoint_pairs(params: Params, name: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in params.strings(name):
        model, at, provider = value.rpartition("@")
        if not (at and model and provider):
            params.problems.append(problem("query", name, "Endpoint should be `model@provider`", "value_error"))
            continue
        pairs.append((model, provider))
    return tuple(pairs)


def endpoint_of(row: dict[str, Any]) -> str:
    return f"{row['model']}@{row['provider']}" if row["provider"] else str(row["model"])


def query_item(row: dict[str, Any]) -> dict[str, Any]:
    """One usage row as a query of Unify's history (the item's fields are inferred: Unify does not publish
    them)."""
    return {
        "id": row["request_id"],
        "endpoint": endpoint_of(row),
        "timestamp": iso(row["created_at"]),
        "status": row["status"],
        "failed": row["status"] >= 400,
        "tags": list(row["tags"] or ()),
        "query_body": row["request_body"],
        "response_body": row["response_body"],
        "prompt_tokens": row["prompt_tokens"],
        "completion_tokens": row["completion_tokens"],
        "cost": row["cost_micros"] / 1_000_000,
        "latency_ms": row["total_ms"],
        "time_to_first_token_ms": row["ttft_ms"],
    }


async def get_queries(request: Request, ctx: Context) -> Response:
    params = Params(request.query_params)
    tags = frozenset(params.strings("tags"))
    where = replace(
        scope(ctx.principal),
        endpoints=_endpoint_pairs(params, "endpoints"),
        since=params.time("start_time"),
        until=params.time("end_time"),
        failures=params.failures(),
    )
    page = params.integer("page_number", 1, 1, MAX_PAGE_NUMBER)
    params.done()
    accounts = _accounts(request)
    await accounts.usage_log.flush()
    rows = await accounts.usage.page(where, tags, (page - 1) * PAGE, PAGE)
    return json_response([query_item(r) for r in rows], ctx.headers())


def _usage(body: dict[str, Any] | None) -> tuple[int, int]:
    """The prompt and completion tokens a logged response reports, when they are sane integers (the
    columns hold 32-bit integers); else none."""
    usage = (body or {}).get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    out: list[int] = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        sane = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31
        out.append(value if sane and isinstance(value, int) else 0)
    return out[0], out[1]


async def post_query(request: Request, ctx: Context) -> Response:
    raw = await read_json(request, MAX_BODY_BYTES, request.app.state.services.json_limits)
    body, model, provider, timestamp = log_query(raw)
    tags = split_tags(body.tags)  # a string or a list of strings, as pydantic checked
    p = ctx.principal
    prompt, completion = _usage(body.response_body)
    row: dict[str, Any] = {
        "request_id": ctx.request_id,
        "created_at": timestamp if timestamp is not None else time.time(),
        "key_id": p.key_id,
        "account_id": p.account_id,
        "model": model,
        "provider": provider,
        "deployment": None,
        "status": 200,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "estimated": 0,
        "cost_micros": 0,
        "total_ms": None,
        "upstream_ms": None,
        "ttft_ms": None,
        "queued_ms": 0.0,
        "tags": [*p.tags, *tags],
        "end_user": None,
        "request_body": body.query_body,
        "response_body": body.response_body,
    }
    _accounts(request).usage_log.record(row)
    return json_response({"info": "Query logged successfully"}, ctx.headers())


async def get_tags(request: Request, ctx: Context) -> Response:
    accounts = _accounts(request)
    await accounts.usage_log.flush()
    return json_response(await accounts.usage.tag_names(scope(ctx.principal)), ctx.headers())


async def get_metrics(request: Request, ctx: Context) -> Response:
    params = Params(request.query_params)
    until = params.time("end_time")
    since = params.time("start_time")
    models, providers = tuple(params.strings("models")), tuple(params.strings("providers"))
    interval = params.integer("interval", 300, 1, 366 * 86_400)
    user = params.string("secondary_user_id")
    params.done()
    until = time.time() if until is None else until
    since = until - DAY_S if since is None else since
    where = replace(scope(ctx.principal), models=models, providers=providers, since=since, until=until, end_user=user)
    accounts = _accounts(request)
    await accounts.usage_log.flush()
    rows = await accounts.usage.measures(where, MEASURED_ROWS)
    return json_response(metrics.intervals(rows, since, interval, user), ctx.headers())


async def get_endpoint_metrics(request: Request, ctx: Context) -> Response:
    params = Params(request.query_params)
    model = params.string("model", required=True)
    provider = params.string("provider", required=True)
    since, until = params.time("start_time"), params.time("end_time")
    params.done()
    services: Services = request.app.state.services
    row = next(
        (r for r in endpoint_rows(services) if r["model"] == model and r["provider"] == provider),
        None,
    )
    if row is None or not ctx.principal.may_use(row["model"]):
        raise NotFound(f"Endpoint `{model}@{provider}` is not served here; GET /v0/endpoints lists them.")
    if since is not None and until is None:
        until = time.time()
    pair = ((row["model"], row["provider"]),)
    where = replace(scope(ctx.principal), endpoints=pair, since=since, until=until, failures="exclude")
    accounts = _accounts(request)
    await accounts.usage_log.flush()
    rows = await accounts.usage.measures(where, MEASURED_ROWS)
    pricing = row["pricing"]
    items = metrics.endpoint_metrics(rows, float(pricing["input"]), float(pricing["output"]))
    return json_response(items if since is not None else items[-1:], ctx.headers())


async def get_credits(request: Request, ctx: Context) -> Response:
    p = ctx.principal
    credits = None
    if p.account_id is not None:
        account = await _accounts(request).ledger.account(p.account_id)
        credits = None if account is None else account.balance_micros / 1_000_000
    return json_response({"id": p.account_id or p.key_id, "credits": credits}, ctx.headers())
