"""What every dialect does the same way when a request fails: the `Retry-After` header, and the error a
stream ends with.

Each dialect renders an error in its own shape, but the header's rounding and the choice of what a broken
stream reports were copied into each of them; they are written here once.
"""

from __future__ import annotations

import logging

from inferplex.context import Context
from inferplex.errors import GatewayError, InternalError

log = logging.getLogger("inferplex")


def error_headers(err: GatewayError, ctx: Context) -> dict[str, str]:
    """The request's headers, with `Retry-After` when the error says when to retry: whole seconds,
    rounded up, at least 1 (RFC 9110 allows no fraction, and 0 would invite an immediate retry)."""
    headers = ctx.headers()
    if err.retry_after is not None:
        headers["retry-after"] = str(max(int(err.retry_after + 0.999), 1))
    return headers


def stream_failure(exc: Exception, ctx: Context) -> GatewayError:
    """The error a stream that failed after its first byte reports in its last frame: a gateway error as
    it is; anything else is a bug, logged with its traceback and reported as an internal error naming the
    request id (never the exception's own text)."""
    if isinstance(exc, GatewayError):
        return exc
    log.error("stream failed", exc_info=exc, extra={"request_id": ctx.request_id})
    return InternalError(f"The stream failed (request id {ctx.request_id}).")
