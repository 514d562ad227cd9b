"""The HTTP edge shared by every dialect: reading JSON bodies within limits, and never leaking a traceback.

`endpoint` wraps a route handler: it creates the request's `Context`, and turns any `GatewayError` into the
dialect's own error shape, and any other exception into a logged, clean 500 in that shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from inferplex.context import Context
from inferplex.errors import (
    GatewayError,
    InternalError,
    InvalidRequest,
    PayloadTooLarge,
    Unavailable,
    UnsupportedMediaType,
)
from inferplex.json_limits import DEFAULT_LIMITS, JsonLimits
from inferplex.json_limits import check as check_json
from inferplex.observe.hub import NULL_HUB, Hub
from inferplex.store.backend import unreachable

log = logging.getLogger("inferplex")

ErrorRenderer = Callable[[GatewayError, Context], Response]
Handler = Callable[[Request, Context], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]

# The routes built by `endpoint`: they answer every failure themselves, so the app may serve them without
# Starlette's exception middleware (app.Gateway).
_SELF_CONTAINED: set[Endpoint] = set()


def self_contained(fn: object) -> bool:
    return fn in _SELF_CONTAINED


class JSONBytes(Response):
    """A JSON body with its headers encoded directly: the gateway's own header names are already lower
    case, so Starlette's general header normalisation is work every response would repeat."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, headers: dict[str, str] | None) -> None:
        self.body = body
        self.status_code = status
        self.background = None
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if headers:
            raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.raw_headers = raw


def json_response(data: Any, headers: dict[str, str] | None = None, status: int = 200) -> Response:
    return JSONBytes(orjson.dumps(data), status, headers)


async def read_json(request: Request, max_bytes: int, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """The decoded body: 415 if it is not declared JSON, 413 over `max_bytes`, 400 if it does not parse or
    is past one of `limits` (depth, items, string length: json_limits.py)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise UnsupportedMediaType(
            f"Unsupported content type {content_type or '(none)'!r}: send the body as application/json."
        )
    body = await read_bytes(request, max_bytes)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc.args[0] if exc.args else 'invalid JSON'}.",
            code="invalid_json",
        ) from None
    check_json(body, value, limits)
    return value


async def read_bytes(request: Request, max_bytes: int) -> bytes:
    """The whole body, refused with a 413 as soon as it is known to exceed `max_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")
    chunks: list[bytes] = []
    size = 0
    receive = request.receive  # read directly: Starlette's stream() is an async generator per request
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# Each route's declared path, by its endpoint (filled by `app.Gateway` from its routes): the bounded
# `route_template` label of metrics and logs. An endpoint no route declares is labelled "other".
TEMPLATES: dict[Endpoint, str] = {}


class Observed(Response):
    """A response that tells the hub when its last byte has gone out (or the caller left): a stream's
    request is over only then. Wraps any ASGI response; added only while a sink listens (`Hub.active`)."""

    def __init__(self, inner: Response, ctx: Context, method: str) -> None:  # no Response.__init__: it wraps
        self.inner = inner
        self.ctx = ctx
        self.method = method
        self.status_code = inner.status_code
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        ctx, streaming = self.ctx, not hasattr(self.inner, "body") or isinstance(self.inner.body, AsyncIterator)
        ctx.hub.responded(ctx, self.status_code, streaming)
        status = self.status_code
        try:
            await self.inner(scope, receive, send)
            if getattr(self.inner, "left", False):  # a stream whose caller hung up (streaming.SSEResponse)
                status = 499
        except BaseException:
            status = 499 if status < 400 else status
            raise
        finally:
            ctx.hub.finished(ctx, self.method, status, streaming)


def endpoint(render_error: ErrorRenderer, handler: Handler, scope: str | None, dialect: str = "openai") -> Endpoint:
    """A route: authenticate the caller (requiring `scope`), run the handler, render any failure."""

    async def run(request: Request) -> Response:
        ctx = Context(dialect=dialect)
        ctx.headers_in = request.headers  # read only by the cache, for a model it caches
        hub: Hub = getattr(request.app.state, "hub", NULL_HUB)
        ctx.hub = hub
        ctx.route_template = TEMPLATES.get(run, "other")  # the usage row keeps it, whoever listens
        if hub.active:
            ctx.trace = request.headers  # the caller's trace context, for a tracing sink to read (it replaces it)
            hub.started(ctx, request.method)
            try:
                response = await _answer(request, ctx)
            except BaseException:  # cancelled (the server shutting down) before it had an answer
                hub.finished(ctx, request.method, 499, False)
                raise
            return Observed(response, ctx, request.method)
        return await _answer(request, ctx)

    async def _answer(request: Request, ctx: Context) -> Response:
        try:
            if scope is not None:
                started = time.perf_counter()
                ctx.client_ip = request.client.host if request.client else None
                ctx.principal = await request.app.state.services.auth.authenticate(request)
                ctx.principal.require_scope(scope)
                ctx.stage("auth", started)
            return await handler(request, ctx)
        except GatewayError as err:
            ctx.error = err
            return render_error(err, ctx)
        except ClientDisconnect:  # gone before its body arrived: nothing was reserved, nobody to answer
            log.debug("caller left before sending the whole body (request id %s)", ctx.request_id)
            return Response(status_code=499)
        except Exception as exc:
            if (cause := unreachable(exc)) is not None:  # no traceback: an outage, not a bug
                log.warning("%s (request id %s): the database cannot be reached (%s)", request.url.path,
                            ctx.request_id, type(cause).__name__)  # fmt: skip
                message = "The gateway's database cannot be reached right now; try again shortly."
                ctx.error = Unavailable(message, code="store_unavailable")
                return render_error(ctx.error, ctx)
            log.exception("unexpected error in %s (request id %s)", request.url.path, ctx.request_id)
            ctx.error = InternalError(f"The gateway hit an unexpected error (request id {ctx.request_id}).")
            return render_error(ctx.error, ctx)

    _SELF_CONTAINED.add(run)
    return run
