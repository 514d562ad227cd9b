"""Typed provider errors (Anthropic, Bedrock and Gemini error types) mapped onto the `GatewayError` tree.

HTTP statuses are mapped by `errors.from_upstream_status`; this adds what a status alone cannot say: an
overloaded provider (Anthropic's 529, Bedrock's ServiceUnavailable) is a retryable 503, not a 502, and an
error that arrives inside a stream (which has no status) is classified by its type.
"""

from __future__ import annotations

from inferplex.errors import GatewayError, InvalidRequest, RateLimited, UpstreamError, from_upstream_status


class UpstreamOverloaded(UpstreamError):
    """The provider is overloaded: try again soon, or elsewhere. Keeps the provider's message."""

    status = 503
    code = "upstream_overloaded"
    retryable = True


def overloaded(err: GatewayError) -> GatewayError:
    """Re-class an HTTP 529 (Anthropic's overloaded status) as `UpstreamOverloaded`."""
    if isinstance(err, UpstreamError) and err.upstream_status == 529:
        return UpstreamOverloaded(err.message, upstream_status=529, retry_after=err.retry_after)
    return err


_TYPE_STATUS = {
    "invalid_request_error": 400,
    "ValidationException": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "AccessDeniedException": 403,
    "not_found_error": 404,
    "ResourceNotFoundException": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "ThrottlingException": 429,
    "api_error": 500,
    "InternalServerException": 500,
    "ModelStreamErrorException": 500,
    "ServiceUnavailableException": 503,
    "ModelNotReadyException": 503,
    "ModelTimeoutException": 504,
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "INTERNAL": 500,
    "DEADLINE_EXCEEDED": 504,
}


def from_error_type(kind: str, message: str, status: int | None = None) -> GatewayError:
    """Map a typed provider error (mid-stream, or a body whose type says more than its status)."""
    if kind in ("overloaded_error", "ServiceUnavailableException", "ModelNotReadyException", "UNAVAILABLE"):
        return UpstreamOverloaded(message, upstream_status=status or 529)
    if kind in ("rate_limit_error", "ThrottlingException", "RESOURCE_EXHAUSTED"):
        return RateLimited(message, code="upstream_rate_limited")
    mapped = _TYPE_STATUS.get(kind, status or 500)
    err = from_upstream_status(mapped, message)
    if isinstance(err, InvalidRequest) or not isinstance(err, UpstreamError):
        return err
    return UpstreamError(message, upstream_status=mapped)
