"""An in-process OpenTelemetry collector: OTLP over HTTP (protobuf), as the gateway's exporter speaks it.

It decodes each `ExportTraceServiceRequest` with opentelemetry-proto and keeps every span as a plain
`Span` (hex ids, attributes as Python values), so tests assert on exactly what an operator's collector would
receive: the span tree, names, kinds and attributes.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: str  # "server", "client", "internal"...
    attributes: dict[str, Any]
    status: str  # "unset", "ok", "error"
    start_ns: int
    end_ns: int
    resource: dict[str, Any]


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return None if which is None else getattr(v, which)


_KINDS = {
    ProtoSpan.SPAN_KIND_SERVER: "server",
    ProtoSpan.SPAN_KIND_CLIENT: "client",
    ProtoSpan.SPAN_KIND_INTERNAL: "internal",
    ProtoSpan.SPAN_KIND_PRODUCER: "producer",
    ProtoSpan.SPAN_KIND_CONSUMER: "consumer",
}
_STATUS = {Status.STATUS_CODE_UNSET: "unset", Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}


def decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    Span(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        kind=_KINDS.get(s.kind, "unspecified"),
                        attributes={kv.key: _value(kv.value) for kv in s.attributes},
                        status=_STATUS.get(s.status.code, "unset"),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        resource=resource,
                    )
                )
    return spans


class Collector:
    """`POST /v1/traces` on 127.0.0.1 (a free port), from a thread; every span received kept in `spans`."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.posts = 0
        self.headers: list[dict[str, str]] = []  # each export's HTTP headers, names lowercased
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(raw)
                with collector._lock:
                    collector.posts += 1
                    collector.headers.append({k.lower(): v for k, v in self.headers.items()})
                    collector.spans.extend(spans)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="otlp-collector")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def start(self) -> Collector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 20.0) -> list[Span]:
        """Every span received, once `found(spans)` holds (the exporter sends in batches, on its own thread);
        an AssertionError with what arrived if it never does."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the collector never received the spans expected; it has {spans!r}")
            time.sleep(0.02)
