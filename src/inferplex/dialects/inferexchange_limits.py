"""InferExchange's per-route rate limits on `/api/v1`: chat 60 and models 30 requests a minute per caller key,
as it publishes them (the operator may change or turn off each: `inferexchange:` in the config).

Each is a bucket of the accounts' limit store (`limits/`), so it holds across replicas when they share Redis
and is exact under concurrency (one atomic step counts the request and reads what is left). The same step's
answer becomes the `X-RateLimit-*` headers, put on the request's context so that every answer of the route,
a failure included, carries them. It counts every authenticated request, before its body is read: a client
planning by `X-RateLimit-Remaining` sees each of its calls counted, whatever became of it.
"""

from __future__ import annotations

import math
import time

from starlette.requests import Request
from starlette.responses import Response

from inferplex.config import InferExchangeConfig
from inferplex.context import Context
from inferplex.edge import Handler
from inferplex.errors import RateLimited, Unavailable
from inferplex.limits import LimitStore, LimitsUnavailable, Rate

WINDOW_S = 60.0


def _limit(config: InferExchangeConfig, route: str) -> int | None:
    return config.chat_rpm if route == "chat" else config.models_rpm


async def count(request: Request, ctx: Context, route: str) -> None:
    """Count this request against the caller's bucket for `route`, set the headers, refuse with a 429."""
    accounts = request.app.state.accounts
    limit = _limit(accounts.config.inferexchange, route)
    if limit is None:
        return
    store: LimitStore = accounts.limits
    try:
        quota = await store.take(Rate(f"ix:{route}:{ctx.principal.key_id}", 1, limit, WINDOW_S))
    except LimitsUnavailable:  # Redis down and the operator's policy is to fail closed, as the guard does
        raise Unavailable("Limits cannot be checked right now; try again shortly.", code="limits_unavailable") from None
    ctx.extra_headers["x-ratelimit-limit"] = str(limit)
    ctx.extra_headers["x-ratelimit-remaining"] = str(quota.remaining)
    ctx.extra_headers["x-ratelimit-reset"] = str(math.ceil(time.time() + quota.reset_s))
    if not quota.admitted:
        raise RateLimited(f"Rate limit exceeded for {route} on /api/v1.", retry_after=quota.retry_s)


def limited(route: str, handler: Handler) -> Handler:
    """`handler` behind the caller's `route` bucket."""

    async def run(request: Request, ctx: Context) -> Response:
        await count(request, ctx, route)
        return await handler(request, ctx)

    return run
