"""One exception tree for everything that can go wrong in a request.

Every failure, whether bad input, auth, an unknown model or a provider error, becomes a `GatewayError`
carrying its HTTP status, an OpenAI-style `type` and `code`, and the offending `param`. Each dialect
(OpenAI, Anthropic, the seeds) renders the same error in its own shape, so mapping happens once, at the
boundary where it is raised, and never again. A provider's failures are mapped onto this tree by its
adapter's `ErrorMap` (providers/failures.py), at the HTTP edge.
"""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    type: str = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retry_after = retry_after

    def to_openai(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class Unauthenticated(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class SpendingCapReached(GatewayError):
    """A monthly spending cap, the account's or the key's, would be passed (Inferada's 402). OpenAI's own
    word for a spent quota is its type. `inferada` (set for a request carrying Inferada's extension) makes the
    OpenAI-shaped answer Inferada's `{"error", "request_id"}`, as its clients on the shared route expect."""

    status = 402
    type = "insufficient_quota"
    code = "spending_cap_reached"

    def __init__(self, message: str, *, request_id: str, inferada: bool = False) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.inferada = inferada

    def to_openai(self) -> dict[str, object]:
        return {"error": self.message, "request_id": self.request_id} if self.inferada else super().to_openai()


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class Unavailable(GatewayError):
    """A model the gateway knows but cannot serve right now (e.g. a local model whose file is missing)."""

    status = 503
    type = "api_error"
    code = "model_unavailable"


class UpstreamError(GatewayError):
    """The provider failed. The provider's own message is kept; `upstream_status` is what it answered."""

    status = 502
    type = "api_error"
    code = "upstream_error"

    def __init__(self, message: str, *, upstream_status: int | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.upstream_status = upstream_status


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class ProcessorRejected(GatewayError):
    """A request processor refused the request (injection, secret, schema...); the message names it and why."""

    status = 422
    type = "invalid_request_error"
    code = "processor_policy_rejection"


class UnsupportedLanguage(GatewayError):
    status = 422
    type = "invalid_request_error"
    code = "unsupported_language"


class InternalError(GatewayError):
    status = 500
    type = "api_error"
    code = "internal_error"
