"""A request's error as a closed, fault-prefixed type: whose fault it was, then what went wrong.

Metrics and logs label errors with it, so it must come from a closed set (never a provider's own code or
message, which are unbounded). The prefix answers the operator's first question: `caller` (the request
was wrong: fix the client), `policy` (the gateway refused it on purpose: a key, a scope, a limit, credits,
a processor), `provider` (the upstream failed or every deployment was unavailable) or `gateway` (ours: the
store was down, or a bug).
"""

from __future__ import annotations

from inferplex.context import Context
from inferplex.errors import (
    GatewayError,
    PermissionDenied,
    ProcessorRejected,
    RateLimited,
    SpendingCapReached,
    Unauthenticated,
    Unavailable,
    UpstreamError,
    UpstreamTimeout,
)

FAULTS = ("caller", "policy", "provider", "gateway")

# Every value `error_type` can return (tests/observe/test_faults.py holds it to this list).
ERROR_TYPES = (
    "caller.invalid_request",
    "caller.not_found",
    "caller.too_large",
    "caller.unsupported_media_type",
    "caller.disconnected",
    "policy.unauthenticated",
    "policy.permission_denied",
    "policy.insufficient_credits",
    "policy.spending_cap",
    "policy.rate_limited",
    "policy.processor_rejected",
    "provider.upstream_error",
    "provider.timeout",
    "provider.unavailable",
    "gateway.store_unavailable",
    "gateway.internal",
)

_BY_STATUS = {
    400: "caller.invalid_request",
    404: "caller.not_found",
    405: "caller.not_found",
    413: "caller.too_large",
    414: "caller.too_large",
    431: "caller.too_large",
    415: "caller.unsupported_media_type",
    422: "caller.invalid_request",
    499: "caller.disconnected",
    401: "policy.unauthenticated",
    402: "policy.spending_cap",
    403: "policy.permission_denied",
    429: "policy.rate_limited",
    502: "provider.upstream_error",
    504: "provider.timeout",
    503: "provider.unavailable",
    500: "gateway.internal",
}


_OWN_STORES = frozenset({"store_unavailable", "cache_unavailable"})


def error_type(error: GatewayError | None, status: int) -> str | None:
    """The closed type of what the caller received: from the error when the edge rendered one, else from
    the status alone (a 4xx/5xx answered without a GatewayError). None for a success."""
    if error is None:
        if status < 400:
            return None
        return _BY_STATUS.get(status, "gateway.internal" if status >= 500 else "caller.invalid_request")
    if isinstance(error, UpstreamTimeout):
        return "provider.timeout"
    if isinstance(error, UpstreamError):
        return "provider.upstream_error"
    if isinstance(error, Unavailable):
        # the gateway's own stores (the database, the limits' Redis, the response cache's store) or a provider
        return "gateway.store_unavailable" if error.code in _OWN_STORES else "provider.unavailable"
    if isinstance(error, ProcessorRejected):
        return "policy.processor_rejected"
    if isinstance(error, SpendingCapReached):
        return "policy.spending_cap"
    if isinstance(error, RateLimited):
        return "policy.rate_limited"
    if isinstance(error, Unauthenticated):
        return "policy.unauthenticated"
    if isinstance(error, PermissionDenied):
        return "policy.insufficient_credits" if error.code == "insufficient_credits" else "policy.permission_denied"
    return _BY_STATUS.get(error.status, "gateway.internal" if error.status >= 500 else "caller.invalid_request")


def of_request(ctx: Context, status: int) -> str | None:
    """The closed type of how a finished request went, as every sink labels it: the caller left (499); the
    error the edge rendered (or a 4xx/5xx answered without one); else a stream's failure after its first
    byte (status 200, `ctx.failure`); None for a success."""
    if status == 499:
        return "caller.disconnected"
    if ctx.error is not None or status >= 400:
        return error_type(ctx.error, status)
    if ctx.failure is not None:
        return error_type(ctx.failure, ctx.failure.status)
    return None


def fault_of(kind: str | None) -> str | None:
    """The prefix alone (`caller`, `policy`, `provider`, `gateway`)."""
    return None if kind is None else kind.split(".", 1)[0]
