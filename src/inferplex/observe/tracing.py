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

Prompt and completion content goes on spans only with `capture_content` (`tracing_content.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry.context import Context as OtelContext
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inferplex import __version__
from inferplex.config import Config
from inferplex.context import Attempt, Context
from inferplex.observe import genai
from inferplex.observe.faults import error_type, fault_of
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
        with open(os.path.expanduser(value[5:])) as f:
            return f.read().strip()
    return value


class _Attempt:
    """One attempt's span, and with content capture what came back."""

    __slots__ = ("replies", "span")

    def __init__(self, span: Span, replies: Replies | None) -> None:
        self.span = span
        self.replies = replies


class _Request:
    """A request's trace (`ctx.trace`): its span, the clock its recorded stage times convert on, its
    attempts' spans."""

    __slots__ = ("attempts", "epoch_ns", "parent", "perf", "sent", "served", "span")

    def __init__(self, span: Span, parent: OtelContext, epoch_ns: int, perf: float) -> None:
        self.span = span
        self.parent = parent  # the request span as a parent context, for its children
        self.epoch_ns = epoch_ns
        self.perf = perf
        self.attempts: dict[int, _Attempt] = {}
        self.served: _Attempt | None = None  # the last attempt that answered (its stream's text, with capture)
        self.sent: str | None = None  # with capture, the input messages as the first attempt sent them

    def ns(self, perf: float) -> int:
        """A `time.perf_counter()` reading as epoch nanoseconds, on the request's own clock."""
        return self.epoch_ns + int((perf - self.perf) * 1e9)


class TracingSink(Sink):
    def __init__(self, settings: TracingConfig, headers: Mapping[str, str]) -> None:
        self.settings = settings
        self.capture = settings.capture_content
        self._headers = dict(headers)
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self._hosts: dict[str, str] = {}

    async def start(self, env: Env) -> None:
        s = self.settings
        resource = Resource.create({"service.name": s.service_name, "service.version": __version__})
        provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(s.sample_ratio)))
        exporter = OTLPSpanExporter(endpoint=s.endpoint, headers=self._headers, timeout=5)
        processor = BatchSpanProcessor(
            exporter,
            max_queue_size=max(2048, s.max_batch),
            schedule_delay_millis=s.export_interval_s * 1000,
            max_export_batch_size=s.max_batch,
        )
        provider.add_span_processor(processor)
        self.provider, self.tracer = provider, provider.get_tracer("inferplex", __version__)

    async def aclose(self) -> None:
        provider, self.provider, self.tracer = self.provider, None, None
        if provider is not None:  # flushes what is batched, then stops the exporter's thread: not on the loop
            await asyncio.to_thread(provider.shutdown)

    # ---- the request ----------------------------------------------------------------------------------

    def started(self, ctx: Context, method: str) -> None:
        headers, ctx.trace = ctx.trace, None
        tracer = self.tracer
        if tracer is None:
            return
        parent = _PROPAGATOR.extract(headers) if isinstance(headers, Mapping) else None
        epoch_ns, perf = time.time_ns(), time.perf_counter()
        route = ctx.route_template
        attributes = {"http.request.method": method, "http.route": route, "inferplex.request_id": ctx.request_id}
        start = epoch_ns + int((ctx.timings.start - perf) * 1e9)  # when the request's context was made
        span = tracer.start_span(
            f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes=attributes, start_time=start
        )
        ctx.trace = _Request(span, set_span_in_context(span), epoch_ns, perf)
        if span.is_recording():  # a request the sampler left out records no stages
            ctx.stages = []

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        req = ctx.trace
        if not isinstance(req, _Request) or self.tracer is None:
            return
        ctx.trace = None
        end = req.ns(time.perf_counter())
        for open_attempt in req.attempts.values():  # an attempt the router never closed (a stream left open)
            open_attempt.span.end(end)
        span = req.span
        if span.is_recording():
            self._describe(span, ctx, method, status, streaming, req)
            for name, began, ended in ctx.stages or ():
                child = self.tracer.start_span(name, context=req.parent, start_time=req.ns(began))
                child.set_attribute("inferplex.stage", name)
                child.end(req.ns(ended))
        span.end(end)

    def _describe(self, span: Span, ctx: Context, method: str, status: int, streaming: bool, req: _Request) -> None:
        """The request span's name and attributes, now that everything about the request is known."""
        operation = genai.operation_name(ctx.operation)
        requested = ctx.attempt_log[0].model if ctx.attempt_log else (ctx.model.name if ctx.model else None)
        if operation is not None and requested is not None:
            span.update_name(f"{operation} {requested}")
        response = ctx.response if isinstance(ctx.response, Mapping) else None
        attrs: dict[str, Any] = {"http.response.status_code": status, "inferplex.stream": streaming}
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
        kind = error_type(ctx.error or ctx.failure, status)
        if kind is not None:
            attrs["error.type"] = kind
            if fault_of(kind) in ("provider", "gateway"):
                span.set_status(Status(StatusCode.ERROR, str(ctx.failure or ctx.error or status)))
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
        span.set_attributes(attrs)

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
        req, tracer, target = ctx.trace, self.tracer, ctx.target
        if not isinstance(req, _Request) or tracer is None or target is None:
            return
        operation = genai.operation_name(ctx.operation) or "call"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": genai.provider_name(target.provider),
            "gen_ai.request.model": target.upstream_model,
            "inferplex.deployment": record.deployment,
            "inferplex.model": record.model,
        }
        address = self._address(target.provider.base_url)
        if address is not None:
            attributes["server.address"] = address
        span = tracer.start_span(
            f"{operation} {target.upstream_model}",
            context=req.parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=req.ns(time.perf_counter()),
        )
        entry = _Attempt(span, Replies() if self.capture else None)
        req.attempts[id(record)] = entry
        sc = span.get_span_context()
        headers = {"traceparent": f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"}
        if sc.trace_state:
            headers["tracestate"] = sc.trace_state.to_header()
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
        attrs: dict[str, Any] = {"inferplex.attempt.outcome": record.outcome}
        if record.status is not None:
            attrs["http.response.status_code"] = record.status
        if record.outcome in ("ok", "failed_midstream"):
            req.served = entry
        if record.outcome != "ok":
            attrs["error.type"] = _attempt_error(record)
            span.set_status(Status(StatusCode.ERROR, record.error or record.outcome))
        if entry.replies is not None and record.outcome != "error":
            output = output_messages(None, entry.replies)
            if output is not None:
                attrs["gen_ai.output.messages"] = _json(output)
        span.set_attributes(attrs)
        span.end(req.ns(time.perf_counter()))


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


def _sent_to(req: _Request, span: Span) -> Any:
    """The callback that puts an attempt's outgoing messages on its span, and the first attempt's on the
    request's (content capture): the input as it went upstream, with the gateway's system prompt."""

    def sent(body: Any) -> None:
        messages = input_messages(body)
        if messages is not None:
            text = _json(messages)
            span.set_attribute("gen_ai.input.messages", text)
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


_USAGE = (("gen_ai.usage.input_tokens", "prompt_tokens"), ("gen_ai.usage.output_tokens", "completion_tokens"))


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
