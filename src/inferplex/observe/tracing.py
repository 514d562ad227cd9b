"""OpenTelemetry traces (issue 24): a span per request, one per upstream attempt, the stages as children.

Off by default (`observability.tracing.enabled`). Each request gets a SERVER span whose parent is the
caller's W3C `traceparent` (and `tracestate`), named `{gen_ai.operation.name} {gen_ai.request.model}` once
the model is known (`{method} {route}` otherwise), with the HTTP and GenAI attributes and the gateway's own
(`inferplex.*`). Each upstream attempt is a CLIENT span, started when the router starts the attempt, so its
`traceparent` goes upstream on the attempt's calls (`providers/http.Outbound`): a provider that traces sees
its span under the gateway's. The pipeline's stages (auth, processors, limits, routing, settle) become child
spans after the fact, from the times the request recorded (`ctx.stages`), which costs the request path a
list append per stage, and nothing when tracing is off (`ctx.stages` stays None).

Every app has a `TracerProvider` of its own, never OpenTelemetry's global one: several gateways live in one
test process, and an embedding application's own tracing is not ours to replace. Spans are batched and sent
by the SDK's exporter thread (OTLP over HTTP, protobuf), off the event loop.

The sink opens and closes every span itself, at known points, so it keeps what a span needs (its ids, its
start, its attributes) in a small record of its own (`_Span`) and hands the SDK's batch one finished
`ReadableSpan` when the span ends: the SDK's live spans (locks, attribute checks at every set, the span
processors' start hooks) cost about ten times as much, for machinery only a general instrumentation needs.
The sampling decision is still the SDK's sampler (`ParentBased(TraceIdRatioBased(sample_ratio))`), taken
once per request: a request it leaves out records nothing, and still passes its trace context upstream.

Prompt and completion content goes on spans only with `capture_content` (`tracing_content.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inferplex import __version__
from inferplex.config import Config
from inferplex.context import Attempt, Context
from inferplex.observe import genai
from inferplex.observe.faults import error_type, fault_of, of_request
from inferplex.observe.hub import Env, Sink
from inferplex.observe.settings import TracingConfig
from inferplex.observe.tracing_content import Replies, input_messages, output_messages
from inferplex.providers import http

log = logging.getLogger("inferplex.observe")

_PROPAGATOR = TraceContextTextMapPropagator()


def sink(config: Config) -> Sink | None:
    settings = config.observability.tracing
    if not settings.enabled:
        return None
    http.trace_calls()  # before the app opens its upstream session
    return TracingSink(settings, {name: _reference(value) for name, value in settings.headers.items()})


def _reference(value: str) -> str:
    """A collector header's value: `env:NAME` and `file:PATH` read now (an API key for the collector stays out
    of the file, as the providers' keys do), anything else as written."""
    if value.startswith("env:"):
        found = os.environ.get(value[4:])
        if found is None:
            raise ValueError(f"observability.tracing.headers: environment variable {value[4:]} is not set")
        return found
    if value.startswith("file:"):
        path = os.path.expanduser(value[5:])
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as exc:
            raise ValueError(f"observability.tracing.headers: cannot read {path}: {exc.strerror}") from None
    return value


class _Span:
    """A span: its ids from the start (children and the upstream need them), the rest at its end, when a
    sampled request's span is handed to the exporter (an unsampled one only lends its ids to the upstream)."""

    __slots__ = ("attributes", "context", "kind", "name", "parent", "start", "status")

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        start: int,
        attributes: dict[str, Any],
    ) -> None:
        self.name, self.context, self.parent, self.kind = name, context, parent, kind
        self.start, self.attributes = start, attributes
        self.status: Status | None = None

    def traceparent(self) -> dict[str, str]:
        """Its W3C trace context, as the headers that carry it."""
        c = self.context
        headers = {"traceparent": f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"}
        if c.trace_state:
            headers["tracestate"] = c.trace_state.to_header()
        return headers


class _Attempt:
    """One attempt's span, and with content capture what came back."""

    __slots__ = ("replies", "span")

    def __init__(self, span: _Span, replies: Replies | None) -> None:
        self.span = span
        self.replies = replies


class _Request:
    """A request's trace (`ctx.trace`): its span, whether it is recorded, the clock its recorded stage times
    convert on, its attempts' spans."""

    __slots__ = ("attempts", "epoch_ns", "perf", "recorded", "sent", "served", "span")

    def __init__(self, span: _Span, recorded: bool, epoch_ns: int, perf: float) -> None:
        self.span = span
        self.recorded = recorded
        self.epoch_ns = epoch_ns
        self.perf = perf
        self.attempts: dict[int, _Attempt] = {}
        self.served: _Attempt | None = None  # the last attempt that answered (its stream's text, with capture)
        self.sent: str | None = None  # with capture, the input messages as the first attempt sent them

    def ns(self, perf: float) -> int:
        """A `time.perf_counter()` reading as epoch nanoseconds, on the request's own clock."""
        return self.epoch_ns + int((perf - self.perf) * 1e9)

    def child(self, name: str, kind: SpanKind, start: int, attributes: dict[str, Any]) -> _Span:
        parent = self.span.context
        context = SpanContext(parent.trace_id, _span_id(), False, parent.trace_flags, parent.trace_state)
        return _Span(name, context, parent, kind, start, attributes)


class TracingSink(Sink):
    def __init__(self, settings: TracingConfig, headers: Mapping[str, str]) -> None:
        self.settings = settings
        self.capture = settings.capture_content
        self._headers = dict(headers)
        self.provider: TracerProvider | None = None
        self.sampler: Sampler = ParentBased(TraceIdRatioBased(settings.sample_ratio))
        self._processor: BatchSpanProcessor | None = None
        self._resource = Resource.create({"service.name": settings.service_name, "service.version": __version__})
        self._scope = InstrumentationScope("inferplex", __version__)
        self._hosts: dict[str, str] = {}

    async def start(self, env: Env) -> None:
        s = self.settings
        provider = TracerProvider(resource=self._resource, sampler=self.sampler)
        exporter = OTLPSpanExporter(endpoint=s.endpoint, headers=self._headers, timeout=5)
        processor = BatchSpanProcessor(
            exporter,
            max_queue_size=max(2048, s.max_batch),
            schedule_delay_millis=s.export_interval_s * 1000,
            max_export_batch_size=s.max_batch,
        )
        provider.add_span_processor(processor)
        self.provider, self._processor = provider, processor

    async def aclose(self) -> None:
        provider, self.provider, self._processor = self.provider, None, None
        if provider is not None:  # flushes what is batched, then stops the exporter's thread: not on the loop
            await asyncio.to_thread(provider.shutdown)

    def _end(self, span: _Span, end: int) -> None:
        """Hand the finished span to the exporter's batch."""
        processor = self._processor
        if processor is not None:
            readable = ReadableSpan(
                span.name,
                context=span.context,
                parent=span.parent,
                resource=self._resource,
                attributes=span.attributes,
                kind=span.kind,
                status=span.status or _UNSET,
                start_time=span.start,
                end_time=end,
                instrumentation_scope=self._scope,
            )
            processor.on_end(readable)

    # ---- the request ----------------------------------------------------------------------------------

    def started(self, ctx: Context, method: str) -> None:
        headers, ctx.trace = ctx.trace, None
        if self._processor is None:
            return
        parent_context = _PROPAGATOR.extract(headers) if isinstance(headers, Mapping) else None
        parent: SpanContext | None = get_current_span(parent_context).get_span_context()
        if parent is None or not parent.is_valid:
            parent, trace_id = None, _trace_id()
        else:
            trace_id = parent.trace_id
        route = ctx.route_template
        name = f"{method} {route}"
        sampled = self.sampler.should_sample(parent_context, trace_id, name, SpanKind.SERVER)
        recorded = sampled.decision is Decision.RECORD_AND_SAMPLE
        flags = TraceFlags(TraceFlags.SAMPLED if recorded else TraceFlags.DEFAULT)
        context = SpanContext(trace_id, _span_id(), False, flags, sampled.trace_state)
        epoch_ns, perf = time.time_ns(), time.perf_counter()
        start = epoch_ns + int((ctx.timings.start - perf) * 1e9)  # when the request's context was made
        attributes = {"http.request.method": method, "http.route": route, "inferplex.request_id": ctx.request_id}
        ctx.trace = _Request(_Span(name, context, parent, SpanKind.SERVER, start, attributes), recorded, epoch_ns, perf)
        if recorded:  # a request the sampler left out records no stages
            ctx.stages = []

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        req = ctx.trace
        if not isinstance(req, _Request):
            return
        ctx.trace = None
        if not req.recorded:
            return
        end = req.ns(time.perf_counter())
        for open_attempt in req.attempts.values():  # an attempt the router never closed (a stream left open)
            self._end(open_attempt.span, end)
        self._describe(req.span, ctx, status, streaming, req)
        for name, began, ended in ctx.stages or ():
            self._end(req.child(name, SpanKind.INTERNAL, req.ns(began), {"inferplex.stage": name}), req.ns(ended))
        self._end(req.span, end)

    def _describe(self, span: _Span, ctx: Context, status: int, streaming: bool, req: _Request) -> None:
        """The request span's name and attributes, now that everything about the request is known."""
        operation = genai.operation_name(ctx.operation)
        requested = ctx.attempt_log[0].model if ctx.attempt_log else (ctx.model.name if ctx.model else None)
        if operation is not None and requested is not None:
            span.name = f"{operation} {requested}"
        response = ctx.response if isinstance(ctx.response, Mapping) else None
        attrs = span.attributes
        attrs["http.response.status_code"] = status
        attrs["inferplex.stream"] = streaming
        if operation is not None:
            attrs["gen_ai.operation.name"] = operation
        if requested is not None:
            attrs["gen_ai.request.model"] = requested
        if ctx.target is not None:
            attrs["gen_ai.provider.name"] = genai.provider_name(ctx.target.provider)
            attrs["inferplex.deployment"] = ctx.target.key
            model = response.get("model") if response is not None else None
            attrs["gen_ai.response.model"] = model if isinstance(model, str) else ctx.target.upstream_model
        if response is not None and isinstance(response.get("id"), str):
            attrs["gen_ai.response.id"] = response["id"]
        usage = ctx.usage
        if usage:
            for name, key in _USAGE:
                value = usage.get(key)
                if isinstance(value, int):
                    attrs[name] = value
        reasons = _finish_reasons(ctx, response)
        if reasons:
            attrs["gen_ai.response.finish_reasons"] = reasons
        kind = of_request(ctx, status)
        if kind is not None:
            attrs["error.type"] = kind
            if fault_of(kind) in ("provider", "gateway"):
                span.status = Status(StatusCode.ERROR, str(ctx.failure or ctx.error or status))
        if ctx.cost_micros is not None:
            attrs["inferplex.cost_micros"] = ctx.cost_micros
        # The principal is the caller's once authentication passed (a 403 for a missing scope comes after it).
        if any(stage[0] == "auth" for stage in ctx.stages or ()) or kind == "policy.permission_denied":
            attrs["inferplex.key_id"] = ctx.principal.key_id
            if ctx.principal.account_id is not None:
                attrs["inferplex.account_id"] = ctx.principal.account_id
        attrs["inferplex.dialect"] = ctx.dialect
        attrs["inferplex.attempts"] = len(ctx.attempt_log)
        if self.capture:
            if req.sent is not None:
                attrs["gen_ai.input.messages"] = req.sent
            output = output_messages(response, req.served.replies if req.served is not None else None)
            if output is not None:
                attrs["gen_ai.output.messages"] = _json(output)

    # ---- the attempts ---------------------------------------------------------------------------------

    def _address(self, base_url: str | None) -> str | None:
        """The provider's host (`server.address`), parsed once per base URL."""
        if base_url is None:
            return None
        found = self._hosts.get(base_url)
        if found is None:
            found = self._hosts[base_url] = urlsplit(base_url).hostname or ""
        return found or None

    def attempt_started(self, ctx: Context, record: Attempt) -> None:
        req, target = ctx.trace, ctx.target
        if not isinstance(req, _Request) or target is None:
            return
        operation = genai.operation_name(ctx.operation) or "call"
        attributes: dict[str, Any] = {}
        if req.recorded:
            attributes = {
                "gen_ai.operation.name": operation,
                "gen_ai.provider.name": genai.provider_name(target.provider),
                "gen_ai.request.model": target.upstream_model,
                "inferplex.deployment": record.deployment,
                "inferplex.model": record.model,
            }
            address = self._address(target.provider.base_url)
            if address is not None:
                attributes["server.address"] = address
        name = f"{operation} {target.upstream_model}"
        span = req.child(name, SpanKind.CLIENT, req.ns(time.perf_counter()), attributes)
        headers = span.traceparent()
        if not req.recorded:  # nothing to record: the upstream still joins the caller's trace
            http.OUTBOUND.set(http.Outbound(headers))
            return
        entry = _Attempt(span, Replies() if self.capture else None)
        req.attempts[id(record)] = entry
        if entry.replies is None:
            http.OUTBOUND.set(http.Outbound(headers))
        else:
            http.OUTBOUND.set(http.Outbound(headers, _sent_to(req, span), _safe(entry.replies.add)))

    def attempt_finished(self, ctx: Context, record: Attempt) -> None:
        req = ctx.trace
        http.OUTBOUND.set(None)  # in this task, later calls outside an attempt carry nothing
        if not isinstance(req, _Request):
            return
        entry = req.attempts.pop(id(record), None)
        if entry is None:
            return
        span = entry.span
        attrs = span.attributes
        attrs["inferplex.attempt.outcome"] = record.outcome
        if record.status is not None:
            attrs["http.response.status_code"] = record.status
        if record.outcome in ("ok", "failed_midstream"):
            req.served = entry
        if record.outcome != "ok":
            attrs["error.type"] = _attempt_error(record)
            span.status = Status(StatusCode.ERROR, record.error or record.outcome)
        if entry.replies is not None and record.outcome != "error":
            output = output_messages(None, entry.replies)
            if output is not None:
                attrs["gen_ai.output.messages"] = _json(output)
        self._end(span, req.ns(time.perf_counter()))


def _attempt_error(record: Attempt) -> str:
    """An attempt's closed error type: the provider's fault, unless the provider refused the request itself
    (a 400: the caller's) or the caller left. `record.status` is the provider's status, else the gateway's
    for what it saw (504 for a timeout)."""
    status = record.status
    if record.outcome == "cancelled":
        return "caller.disconnected"
    if status == 504:
        return "provider.timeout"
    if status in (429, 503, 529):
        return "provider.unavailable"
    if status in (400, 404, 413, 422):
        return error_type(None, status) or "caller.invalid_request"
    return "provider.upstream_error"


def _sent_to(req: _Request, span: _Span) -> Any:
    """The callback that puts an attempt's outgoing messages on its span, and the first attempt's on the
    request's (content capture): the input as it went upstream, with the gateway's system prompt."""

    def sent(body: Any) -> None:
        messages = input_messages(body)
        if messages is not None:
            text = _json(messages)
            span.attributes["gen_ai.input.messages"] = text
            if req.sent is None:
                req.sent = text

    return _safe(sent)


def _safe(callback: Any) -> Any:
    """A capture callback that never raises into an upstream call: content is a nicety, the call is not."""

    def call(data: Any) -> None:
        try:
            callback(data)
        except Exception:
            log.debug("capturing content for a trace failed", exc_info=True)

    return call


def _finish_reasons(ctx: Context, response: Mapping[str, Any] | None) -> list[str]:
    if response is not None:
        choices = response.get("choices")
        if isinstance(choices, list):
            found = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
            return [r for r in found if isinstance(r, str)]
    return [ctx.finish_reason] if ctx.finish_reason else []


def _span_id() -> int:
    """A random, valid span id, as the SDK's own generator makes them."""
    while True:
        found = random.getrandbits(64)
        if found:
            return found


def _trace_id() -> int:
    while True:
        found = random.getrandbits(128)
        if found:
            return found


_UNSET = Status(StatusCode.UNSET)


_USAGE = (("gen_ai.usage.input_tokens", "prompt_tokens"), ("gen_ai.usage.output_tokens", "completion_tokens"))


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
