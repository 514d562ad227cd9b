"""The HTTP/1.1 protocol uvicorn serves the gateway with: uvicorn's httptools protocol, with the writes of
each pass of the event loop sent at its end.

uvicorn writes to the socket at once: a response's head on `http.response.start` and its body on
`http.response.body`, each a send system call. Sending at once wakes the peer right then, and when the
peer runs on another core, waking it is an inter-processor interrupt charged to the gateway's core (in a
VM, an exit to the hypervisor): measured under load, one per response. Holding the writes until the end of
the loop's pass sends a response's head and body as one, and the responses of one pass back to back, so
the peer is woken once for many: a tenth of an interrupt per response, and 13% more requests per second
on the master key (docs/benchmarks.md). Sending a response's head with its body alone, at once, saved the
system call but not the interrupt, and no throughput. A write waits at most for the rest of the pass it
was made in (for a stream whose upstream chunks are already buffered, the chunks of that pass).

The protocol also holds each request head to `HeadLimits` (docs/limits.md), before anything reads it: the
request line (414 past it), each header line and the whole head (431). The head is counted as it arrives,
before the parser sees it, because httptools joins a header's pieces as they come: an 8 MiB header was
otherwise read whole, copied again for each piece, and handed to the app. A head the parser rejects (a NUL
in a header value, say) gets a 400. Each refusal is a JSON error in the dialect of the path asked for
(`dialects/registry.py`), followed by a bounded lingering close, as nginx does, so that the client reads it
instead of a connection reset. The cost on the request path is one comparison per read, and one call per
request head and per request end.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from inferplex.dialects.registry import error_payload, plain_error
from inferplex.errors import GatewayError

log = logging.getLogger("inferplex")

# While lingering, the connection closes once nothing arrived for this long (nginx's lingering_timeout).
LINGER_QUIET_S = 1.0


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """The request head's limits (`server:` in the config; defaults as nginx's 4 x 8k buffers): the
    request line, one header line, the whole head, and how long a refused connection lingers at most."""

    line: int = 8192
    header: int = 8192
    head: int = 32768
    linger_s: float = 5.0


def limits_of(app: Any) -> HeadLimits:
    """The limits the gateway app carries (`app.Gateway.head_limits`), under any middleware uvicorn added."""
    for _ in range(8):
        limits = getattr(app, "head_limits", None)
        if isinstance(limits, HeadLimits):
            return limits
        app = getattr(app, "app", None)
        if app is None:
            break
    return HeadLimits()


class _Refused(Exception):
    """Raised by a parser callback to stop parsing a head past its limits (the refusal is on the protocol)."""


def _reason(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__).rstrip(".")


class CoalescingTransport:
    """A connection's transport whose writes made in one pass of the loop leave as one. Everything else is
    the transport's own; closing sends what is held first."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def writelines(self, lines: list[bytes]) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHTTPProtocol(HttpToolsProtocol):
    """uvicorn's `http=` protocol for `inferplex serve` (and the tests' and benchmarks' servers), with the
    request head held to `HeadLimits` and a malformed head answered in the path's dialect (module docstring).
    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._limits = limits_of(self.app)
        self._head = 0  # bytes of the current request head fed to the parser; -1 once the head is complete
        self._refusal: GatewayError | None = None  # set by a parser callback that found the head too large
        self._closing_at: float | None = None  # while lingering after a refusal: when to close at the latest
        self._lingered = 0  # bytes read and dropped while lingering

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self._closing_at is not None:
            self._lingered += len(data)  # lingering: what still arrives is read and dropped
            return
        self._unset_keepalive_if_required()
        head = self._head
        if head >= 0:
            if len(data) > self._limits.head - head:
                self._overflow(data)
                return
            self._head = head + len(data)
        self._feed(data)

    def _overflow(self, data: bytes) -> None:
        """`data` would take the head past its limit: feed what fits, the rest only if the head ended in it."""
        room = self._limits.head - self._head
        self._head = self._limits.head
        if not self._feed(data[:room]):
            return
        if self._head < 0:
            self._feed(data[room:])
        elif not self.transport.is_closing():
            message = f"The request head (request line and headers) is larger than {self._limits.head} bytes."
            self._refuse(plain_error(message, 431, "request_header_too_large"))

    def _feed(self, data: bytes) -> bool:
        """uvicorn's `data_received` with our refusals; False once the connection is being closed."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            refusal, self._refusal = self._refusal, None
            if refusal is None:
                refusal = plain_error(f"Invalid HTTP request: {_reason(exc)}.", 400, "invalid_http_request")
            self._refuse(refusal)
            return False
        return True

    # Parser callbacks: uvicorn's own, with the line limits (replaced rather than wrapped: they run per header).
    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self._limits.line:
            self._refusal = plain_error(
                f"The request line is longer than {self._limits.line} bytes.", 414, "request_line_too_long"
            )
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) + 4 > self._limits.header:
            self._refusal = plain_error(
                f"The header {name[:64].decode('latin-1')!r} is longer than {self._limits.header} bytes.",
                431,
                "request_header_too_large",
            )
            raise _Refused
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._head = -1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head = 0

    # Refusing, then a bounded lingering close.
    def _refuse(self, err: GatewayError) -> None:
        """Answer `err` as JSON in the path's dialect, stop parsing, and close once the client has read it.

        A close with unread input makes the kernel send a reset, which can destroy the answer before the
        client reads it; so, as nginx does, the connection first sends its end (FIN) after the answer and
        keeps reading and dropping input until the client closes, goes quiet for a second, or
        `lingering_close_s` has passed."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A pipelined request is being answered: the connection ends after that answer, without ours.
            cycle.keep_alive = False
            self._closing_at = self.loop.time() + self._limits.linger_s
            return
        path = (getattr(self, "url", b"") or b"/").split(b"?", 1)[0].decode("latin-1")
        body = orjson.dumps(error_payload(path, err))
        status = STATUS_LINE[err.status]
        head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        self.transport.write(status + b"".join(n + b": " + v + b"\r\n" for n, v in self.server_state.default_headers))
        self.transport.write(head + body)
        log.info("refused a request head from %s: %s %s", self.client, err.status, err.message)
        self._closing_at = self.loop.time() + self._limits.linger_s
        self.transport.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_check()

    def _linger_check(self, seen: int = -1) -> None:
        """Close when the client closed, went quiet since the last check, or the bound passed."""
        if self.transport.is_closing() or self._closing_at is None:
            return
        received = self._lingered
        if received == seen or self.loop.time() >= self._closing_at:
            self.transport.close()
            return
        self.loop.call_later(LINGER_QUIET_S, self._linger_check, received)
