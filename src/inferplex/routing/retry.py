"""Which failures are worth another attempt, where, and after how long.

- RETRY: the deployment may answer next time (connection refused or reset, 429, 500, 502, 503, 504, 529):
  the same deployment again after a backoff, or another one at once.
- FAILOVER: this deployment will not do (it timed out, or answered 401/403/other statuses that describe the
  deployment, not the request): another deployment or model, never the same one again in this request.
  A timeout is not retried in place because the same wait would only burn the caller's deadline again.
- FATAL: the request itself is at fault (400, 404, 413, 422, context too long) or the gateway refused it:
  no other deployment would answer differently, so the error goes straight to the caller.

An error class may state `retryable = True/False` itself (e.g. `UpstreamOverloaded`); that wins.
"""

from __future__ import annotations

import enum
import random

from inferplex.errors import GatewayError, RateLimited, Unavailable, UpstreamError, UpstreamTimeout

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})


class Verdict(enum.Enum):
    RETRY = "retry"
    FAILOVER = "failover"
    FATAL = "fatal"


def classify(err: BaseException) -> Verdict:
    if not isinstance(err, GatewayError):
        return Verdict.FATAL
    declared = getattr(err, "retryable", None)
    if isinstance(declared, bool):
        return Verdict.RETRY if declared else Verdict.FATAL
    if isinstance(err, UpstreamTimeout):
        return Verdict.FAILOVER
    if isinstance(err, RateLimited):
        return Verdict.RETRY
    if isinstance(err, UpstreamError):
        if err.upstream_status is None or err.upstream_status in RETRY_STATUSES:
            return Verdict.RETRY
        return Verdict.FAILOVER
    if isinstance(err, Unavailable):
        return Verdict.FAILOVER
    return Verdict.FATAL


def backoff(n: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with equal jitter before the n-th retry (n >= 1): half fixed, half random."""
    ceiling = min(cap, base * 2.0 ** (n - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def wait_before_retry(
    n: int, retry_after: float | None, base: float, cap: float, max_wait: float, rng: random.Random
) -> float | None:
    """Seconds to wait before retrying the same deployment, or None when its `Retry-After` asks too much."""
    delay = backoff(n, base, cap, rng)
    if retry_after is not None:
        if retry_after > max_wait:
            return None
        delay = max(delay, retry_after)
    return delay


def status_of(err: BaseException) -> int | None:
    """The status worth logging for an attempt: the provider's own when known."""
    if isinstance(err, UpstreamError) and err.upstream_status is not None:
        return err.upstream_status
    if isinstance(err, GatewayError):
        return err.status
    return None
