"""The HTTP edge shared by every remote adapter: one aiohttp session, errors mapped in one place.

aiohttp's client was chosen by measurement (docs/benchmarks.md): it sustains several times httpx's request
rate on this hardware. Adapters call `post_json` for buffered calls and `open_stream` + `sse_events` for
streams, handing each the adapter's own `ErrorMap` (`failures.py`), which these apply to every connection
failure, timeout and non-2xx answer, keeping the provider's own message and chaining the cause.

Traced attempts (observe/tracing.py) put their W3C trace context on every upstream call here: `post_json` and
`open_stream` add it (and show a capturing sink what went and came back), and the session's middleware adds
it to the calls adapters make on the session directly (multipart uploads, media downloads, video jobs).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from inferplex.config import Timeouts
from inferplex.deadlines import Deadline
from inferplex.errors import UpstreamTimeout
from inferplex.providers.failures import ErrorMap
from inferplex.sse import Event, SSEDecoder
from inferplex.targets import Target

T = TypeVar("T")


@dataclass(slots=True)
class Outbound:
    """What a traced attempt adds to its upstream calls: its span's W3C trace context (`traceparent`, and
    `tracestate` when the trace carries one), and with content capture two callbacks that see the JSON body
    sent and each JSON answer or stream event received. The tracing sink sets one in `OUTBOUND` when the
    router starts an attempt; the attempt's calls run in that task, so they read it there."""

    headers: dict[str, str]
    sent: Callable[[Any], None] | None = None
    received: Callable[[Any], None] | None = None


OUTBOUND: ContextVar[Outbound | None] = ContextVar("inferplex_outbound", default=None)

# Whether any app in this process traces: until one does (`trace_calls`), no upstream call reads `OUTBOUND`,
# so with tracing off a call pays one test of this flag. An app that does not trace never sets `OUTBOUND`.
_traced = False


def trace_calls() -> None:
    """Make upstream calls carry the trace context a traced attempt sets (called when a tracing sink is made,
    before the app opens its session)."""
    global _traced
    _traced = True


async def _traced_middleware(
    req: aiohttp.ClientRequest, handler: Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]]
) -> aiohttp.ClientResponse:
    """The trace context on a call made with the session's own methods (`session.post`, `.get`, `.request`)."""
    out = OUTBOUND.get()
    if out is not None:
        for name, value in out.headers.items():
            if name not in req.headers:
                req.headers[name] = value
    return await handler(req)


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=1024, ttl_dns_cache=300, keepalive_timeout=30)
    return aiohttp.ClientSession(
        # Only once a tracing sink exists: a middleware costs every session call a few steps.
        middlewares=(_traced_middleware,) if _traced else (),
        connector=connector,
        json_serialize=lambda o: orjson.dumps(o).decode(),
        auto_decompress=True,
        skip_auto_headers=("User-Agent",),
        # Providers set no cookies we want and need no redirects: skipping both is measurably cheaper.
        cookie_jar=aiohttp.DummyCookieJar(),
        requote_redirect_url=False,
    )


@functools.lru_cache(maxsize=256)
def client_timeout(connect: float) -> aiohttp.ClientTimeout:
    """aiohttp bounds only the connect. The router bounds the rest with its one `Deadline` per attempt: `read`
    as the wait for a buffered answer or a stream's first chunk (and a stream's stalls), `total` as the
    attempt's. aiohttp's own read timeout would re-arm a loop timer on every chunk (docs/benchmarks.md)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect, connect=None, sock_read=None)


_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _direct_supported() -> bool:
    """Whether this aiohttp has the connection-level steps `_post` takes (they are not public API)."""
    try:
        params = inspect.signature(ResponseHandler.set_response_params).parameters
        connect = inspect.signature(aiohttp.BaseConnector.connect).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        {"read_until_eof", "auto_decompress"} <= params.keys()
        and {"req", "traces", "timeout"} <= connect.keys()
        and callable(getattr(aiohttp.ClientRequest, "send", None))
        and callable(getattr(aiohttp.ClientResponse, "start", None))
    )


DIRECT = _direct_supported()


async def _post(
    session: aiohttp.ClientSession, url: str | URL, data: bytes, headers: Mapping[str, str], timeouts: Timeouts
) -> aiohttp.ClientResponse:
    """`session.post(url, data=..., allow_redirects=False)`, with only the steps a call to a provider takes.

    `ClientSession._request` is general (redirects, cookies, proxies, auth, tracing, middlewares, timeouts):
    with the read timer it arms, about 14 µs of CPU per call, a sixteenth of a keyed request's
    (docs/benchmarks.md), for features our session does not use. Here the request is built with aiohttp's own
    request class and sent on a connection from the session's connector, and the response read by its own
    parser, as `_request` does. Those steps are aiohttp's but not its public API: `DIRECT` checks that they are
    there, and `session.post` is used if not (tests/providers/test_http.py runs both ways)."""
    if not DIRECT:
        return await session.post(
            url, data=data, headers=headers, timeout=client_timeout(timeouts.connect), allow_redirects=False
        )
    connector = session.connector
    if connector is None:
        raise RuntimeError("Session is closed")  # as session.post says it
    req = aiohttp.ClientRequest(
        "POST",
        url if type(url) is URL else URL(url),
        headers=headers,
        skip_auto_headers=session.skip_auto_headers,
        data=data,
        loop=asyncio.get_running_loop(),
        session=session,
    )
    conn = await connector.connect(req, traces=[], timeout=client_timeout(timeouts.connect))
    try:
        protocol: ResponseHandler = conn.protocol  # type: ignore[assignment]
        protocol.set_response_params(read_until_eof=True, auto_decompress=session.auto_decompress)
        resp = await req.send(conn)
        try:
            await resp.start(conn)
        except BaseException:
            resp.close()
            raise
    except BaseException:
        conn.close()
        raise
    return resp


async def post_json(
    session: aiohttp.ClientSession,
    url: str | URL,
    body: Any,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    errors: ErrorMap,
) -> tuple[Any, Mapping[str, str]]:
    out = OUTBOUND.get() if _traced else None
    if out is not None:
        headers = _sending(out, body, headers)
    try:
        async with await _post(session, url, orjson.dumps(body), headers, timeouts) as resp:
            raw = await resp.read()
        if resp.status >= 400:
            raise errors.status(resp.status, raw, resp.headers)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.malformed("sent a body that is not JSON") from exc
    except _TRANSPORT_ERRORS as exc:
        raise errors.transport(exc) from exc
    if out is not None and out.received is not None:
        out.received(data)
    return data, resp.headers


def _sending(out: Outbound, body: Any, headers: Mapping[str, str]) -> dict[str, str]:
    """The call's headers with the attempt's trace context (a copy: adapters share theirs between calls)."""
    if out.sent is not None:
        out.sent(body)
    return {**headers, **out.headers}


async def open_stream(
    session: aiohttp.ClientSession,
    url: str | URL,
    body: Any,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    errors: ErrorMap,
) -> aiohttp.ClientResponse:
    """Send the request and wait for the response head; the caller owns (and must close) the response."""
    out = OUTBOUND.get() if _traced else None
    if out is not None:
        headers = _sending(out, body, headers)
    try:
        resp = await _post(session, url, orjson.dumps(body), headers, timeouts)
    except _TRANSPORT_ERRORS as exc:
        raise errors.transport(exc) from exc
    return await answered(resp, errors)


async def answered(resp: aiohttp.ClientResponse, errors: ErrorMap) -> aiohttp.ClientResponse:
    """The response, once its head says it succeeded; a non-2xx one is read (as far as it can be), released,
    and raised as the adapter's mapped error."""
    if resp.status >= 400:
        try:
            raw = await resp.read()
        except _TRANSPORT_ERRORS:
            raw = b""
        finally:
            resp.release()
        raise errors.status(resp.status, raw, resp.headers)
    return resp


async def read_json(resp: aiohttp.ClientResponse, errors: ErrorMap) -> Any:
    """An answered response's whole body as JSON, the response released: a transport failure while reading
    it, or a body that is not JSON, mapped by the adapter's `ErrorMap`."""
    try:
        raw = await resp.read()
    except _TRANSPORT_ERRORS as exc:
        raise errors.transport(exc) from exc
    finally:
        resp.release()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.malformed("sent a body that is not JSON") from exc


async def sse_events(resp: aiohttp.ClientResponse, errors: ErrorMap) -> AsyncIterator[Event]:
    """Decode a response body as SSE; transport failures mid-stream become `UpstreamError`."""
    decoder = SSEDecoder()
    buffer = b""
    try:
        # Reads whatever arrived and splits lines ourselves: no per-line size cap, no waiting on partial lines.
        async for data in resp.content.iter_any():
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                event = decoder.feed(line)
                if event is not None:
                    yield event
    except _TRANSPORT_ERRORS as exc:
        raise errors.transport(exc) from exc
    if buffer:
        decoder.feed(buffer)
    last = decoder.flush()
    if last is not None:
        yield last


DONE = object()  # what `json_events` yields for OpenAI's `data: [DONE]`

# How long a stream whose end marker was read waits for the body's own end (see `ended`): past Linux's 40 ms
# delayed ACK with room for a loaded machine, and short next to the stream itself.
END_WAIT_S = 0.25


async def ended(resp: aiohttp.ClientResponse) -> None:
    """Wait (at most `END_WAIT_S`) for the rest of a stream whose provider's end marker was read, so that its
    connection goes back to the session's pool instead of being closed.

    A provider sends its end marker (`data: [DONE]`) and then the body's end (the chunked encoding's last
    chunk) in two writes, which often arrive in two reads. An adapter that stops at the marker and closes the
    response then closes the connection (aiohttp releases one for reuse only once its body has ended): the
    next call pays a new connection (a TLS handshake to a real provider), and each closed one leaves its
    transport in a reference cycle on both sides (tests/memory/test_reference_cycles.py failed on CI with
    about 10% of 200 streams closing theirs). Once the body has ended aiohttp has released the connection,
    and the adapter's `close` finds none to close. Anything sent after the marker is dropped."""
    content = resp.content
    if content.is_eof():
        return
    try:
        with Deadline(END_WAIT_S):
            while await content.readany():
                pass
    except (TimeoutError, *_TRANSPORT_ERRORS):
        pass  # the adapter's `close` closes the connection, as it did before


async def json_events(resp: aiohttp.ClientResponse, errors: ErrorMap) -> AsyncIterator[tuple[str, Any]]:
    """SSE events as (event name, decoded JSON data); `[DONE]` comes as `DONE`, once the body has ended (or
    `ended` gave up on it). A stream that ends without its provider's own end marker is for the caller to
    judge; data that is not JSON is the provider's failure."""
    out = OUTBOUND.get() if _traced else None  # read at the first event, still in the attempt's task
    received = out.received if out is not None else None
    async for event in sse_events(resp, errors):
        if event.data == "[DONE]":
            await ended(resp)
            yield event.event, DONE
            continue
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError as exc:
            raise errors.malformed("sent a stream event that is not JSON") from exc
        if received is not None:
            received(data)
        yield event.event, data


def deployment_timeouts(target: Target) -> Timeouts:
    """The timeouts an attempt at `target` runs with: its provider's, with the deployment's own `connect`.

    The router computes this once per deployment and hands it to the adapter on the `CallInfo`; a call the
    router does not make computes it here."""
    provider, connect = target.provider.timeouts, target.deployment.timeouts.connect
    return provider if connect is None else provider.model_copy(update={"connect": connect})


async def bounded(target: Target, call: Callable[[Timeouts], Awaitable[T]]) -> T:
    """`call(timeouts)` bounded as the router bounds an attempt, for the calls it does not make.

    The router hands its attempts their timeouts and bounds the rest with its `Deadline`; a call made beside
    it (token counts, an adapter called directly) gets the same: `deployment_timeouts` for aiohttp's
    connect, and the read bound, or the total one when shorter, for the whole call."""
    provider, own = target.provider.timeouts, target.deployment.timeouts
    total = own.total or provider.total
    limit = min(provider.read, total) if total else provider.read
    deadline = Deadline(limit)
    try:
        with deadline:
            return await call(deployment_timeouts(target))
    except TimeoutError:
        if not deadline.expired():
            raise
        raise UpstreamTimeout(f"provider {target.provider.name} did not answer within {limit:.3g}s") from None


async def post_json_within(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    url: str | URL,
    body: Any,
    headers: Mapping[str, str],
    errors: ErrorMap,
) -> tuple[Any, Mapping[str, str]]:
    """`post_json` with the attempt's `timeouts`; bounded here (`bounded`) when the router gave none."""
    return await _within(target, timeouts, lambda t: post_json(session, url, body, headers, t, errors))


async def open_stream_within(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    url: str | URL,
    body: Any,
    headers: Mapping[str, str],
    errors: ErrorMap,
) -> aiohttp.ClientResponse:
    """`open_stream` with the attempt's `timeouts`; its opening bounded here when the router gave none."""
    return await _within(target, timeouts, lambda t: open_stream(session, url, body, headers, t, errors))


async def _within(target: Target, timeouts: Timeouts | None, call: Callable[[Timeouts], Awaitable[T]]) -> T:
    """The router's per-attempt `timeouts` when it gave them (it bounds the attempt itself), else `bounded`."""
    return await (call(timeouts) if timeouts is not None else bounded(target, call))
