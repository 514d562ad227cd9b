"""Provider failures mapped onto the `GatewayError` tree, in one place, from one declaration per adapter.

Each adapter module declares one `ErrorMap`: which of its provider's HTTP statuses mean "overloaded" and
what its typed errors (Anthropic's `overloaded_error`, Bedrock's `ThrottlingException`, Gemini's
`RESOURCE_EXHAUSTED`) mean. The HTTP edge (`http.py`) applies it to every status and transport failure, and
the native adapters' frame (`native.py`) to every `ProviderFailure` their translators read in a body or a
stream, so no adapter maps an error by hand. As in httpx's `map_exceptions`, the most specific rule wins
(a typed error over its status, a subclass over its base), and the mapped error is raised `from` its cause.

The translators stay pure: a failure they read in the provider's own words is a `ProviderFailure` (its
type and message), not yet a `GatewayError`; what that type means is the adapter's business.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

from inferplex.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
)


def from_upstream_status(status: int, message: str, retry_after: float | None = None) -> GatewayError:
    """Map a provider's HTTP error to our tree, keeping the provider's message: every `ErrorMap`'s default.

    A 4xx caused by the request (bad parameter, context too long) is the caller's fault and keeps its status;
    auth failures upstream are the gateway operator's problem, so the caller sees a 502, not a 401 that
    would make them doubt their own gateway key.
    """
    if status in (400, 404, 409, 413, 422):
        err: GatewayError = InvalidRequest(message, status=400 if status == 409 else status)
        if status == 404:
            err.code = "upstream_not_found"
        if "context" in message.lower() and ("length" in message.lower() or "window" in message.lower()):
            err = ContextLengthExceeded(message)
        return err
    if status == 429:
        return RateLimited(message, retry_after=retry_after, code="upstream_rate_limited")
    if status in (408, 504):
        return UpstreamTimeout(message, upstream_status=status)
    return UpstreamError(message, upstream_status=status, retry_after=retry_after)


class UpstreamOverloaded(UpstreamError):
    """The provider is overloaded: try again soon, or elsewhere. Keeps the provider's message."""

    status = 503
    code = "upstream_overloaded"
    retryable = True


class ProviderFailure(Exception):
    """A failure a translator read in the provider's own words: its error type, its message, its status if any.

    Not a `GatewayError`: the adapter that called the translator maps it with its `ErrorMap`."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


def error_message(body: bytes, default: str) -> str:
    """Pull the provider's own message out of whatever error body it sent."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return text[:1000] or default
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg") or err.get("detail")
            if isinstance(msg, str) and msg:
                return msg
        if isinstance(err, str) and err:
            return err
        for key in ("message", "detail"):
            if isinstance(data.get(key), str):
                return str(data[key])
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return error_message(orjson.dumps(data[0]), default)
    return default


# Transport exceptions, most specific first (a ServerTimeoutError is also a ClientError): the first
# `isinstance` match wins, as in httpx's map_exceptions.
_Rule = tuple[type[BaseException] | tuple[type[BaseException], ...], Callable[[str, BaseException], GatewayError]]
_TRANSPORT: tuple[_Rule, ...] = (
    ((asyncio.TimeoutError, aiohttp.ServerTimeoutError), lambda p, e: UpstreamTimeout(f"provider {p} timed out")),
    (
        aiohttp.ClientConnectorError,
        lambda p, e: UpstreamError(f"could not connect to provider {p}: {getattr(e, 'strerror', None) or e}"),
    ),
    (
        (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError),
        lambda p, e: UpstreamError(f"provider {p} closed the connection: {e}"),
    ),
)


@dataclass(frozen=True, slots=True)
class ErrorMap:
    """One provider's errors: its declaration (module level) bound to a configured provider's name."""

    overloaded_statuses: frozenset[int] = frozenset()  # HTTP statuses that mean "overloaded, retry soon"
    overloaded_types: frozenset[str] = frozenset()  # typed errors that mean the same
    rate_limited_types: frozenset[str] = frozenset()  # typed errors that mean "slow down" (a 429)
    type_status: Mapping[str, int] = field(default_factory=dict)  # every other typed error, as an HTTP status
    provider: str = "the provider"  # the configured provider's name, for messages (`bind`)

    def bind(self, provider: str) -> ErrorMap:
        """This map for one configured provider: its messages name it."""
        return dataclasses.replace(self, provider=provider)

    def status(self, status: int, body: bytes, headers: Mapping[str, str]) -> GatewayError:
        """A non-2xx answer: the provider's message kept, its status mapped, `Retry-After` carried."""
        message = error_message(body, f"provider {self.provider} answered HTTP {status}")
        err = from_upstream_status(status, message, _retry_after(headers))
        if status in self.overloaded_statuses and isinstance(err, UpstreamError):
            return UpstreamOverloaded(message, upstream_status=status, retry_after=err.retry_after)
        return err

    def transport(self, exc: BaseException) -> GatewayError:
        """A connection that failed, timed out or closed: the first (most specific) rule that matches."""
        for kinds, make in _TRANSPORT:
            if isinstance(exc, kinds):
                return make(self.provider, exc)
        return UpstreamError(f"provider {self.provider} failed: {type(exc).__name__}: {exc}")

    def typed(self, kind: str, message: str, status: int | None = None) -> GatewayError:
        """A typed provider error (mid-stream, or a body whose type says more than its status)."""
        if kind in self.overloaded_types:
            return UpstreamOverloaded(message, upstream_status=status or 529)
        if kind in self.rate_limited_types:
            return RateLimited(message, code="upstream_rate_limited")
        mapped = self.type_status.get(kind, status or 500)
        err = from_upstream_status(mapped, message)
        if isinstance(err, InvalidRequest) or not isinstance(err, UpstreamError):
            return err
        return UpstreamError(message, upstream_status=mapped)

    def failure(self, failure: ProviderFailure) -> GatewayError:
        """What a translator's `ProviderFailure` means for this provider."""
        return self.typed(failure.kind, failure.message, failure.status)

    def event(self, data: object) -> GatewayError:
        """An error object sent as a stream event (an OpenAI-compatible stream's `{"error": ...}`)."""
        return UpstreamError(error_message(orjson.dumps(data), f"provider {self.provider} failed mid-stream"))

    def malformed(self, what: str) -> UpstreamError:
        """The provider answered, but not in its own format (a body that is not JSON, a cut-off stream)."""
        return UpstreamError(f"provider {self.provider} {what}")


OPENAI = ErrorMap()  # OpenAI-compatible upstreams: their statuses say it all
