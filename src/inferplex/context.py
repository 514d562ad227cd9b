"""The `Context`: everything the gateway learns about one request while serving it.

A dialect creates it (with the caller's `Principal`), and every stage after reads and writes typed fields
on it: the pipeline the model and the routing preferences, the guard its estimate and the cost, the router
the target and the attempts, the stream the usage and the finish reason. It is its own module because
every layer (dialects, pipeline, router, guard, processors) uses it and none of them owns it.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from inferplex.auth import MASTER, Principal
from inferplex.cache.outcome import CacheOutcome
from inferplex.config import ModelConfig
from inferplex.errors import GatewayError
from inferplex.providers.base import CallInfo
from inferplex.responses import ChatCompletionChunk, Usage
from inferplex.routing.options import RouteOptions
from inferplex.targets import Target
from inferplex.timings import Timings

# Request ids: a random per-process prefix and a counter. Unique across replicas and restarts without a
# getrandom() syscall per request (measured at about 1% of a request's CPU).
_ID_PREFIX = "req_" + secrets.token_hex(6)
_ids = itertools.count(1)


def _new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ids):012x}"


@dataclass(slots=True)
class Attempt:
    """One try at one deployment, as the router saw it: kept on the context for the usage log."""

    deployment: str
    model: str
    outcome: str  # "ok", "error" (before the first byte), "failed_midstream", "cancelled" (the caller left)
    status: int | None = None
    error: str | None = None
    latency_ms: float = 0.0

    def view(self) -> dict[str, object]:
        """The attempt as the usage row and the request log keep it: its error cut to 500 characters, its
        latency to 0.01 ms."""
        return {"deployment": self.deployment, "model": self.model, "outcome": self.outcome, "status": self.status,
                "error": self.error[:500] if self.error else None, "latency_ms": round(self.latency_ms, 2)}  # fmt: skip


class Hooks(Protocol):
    """What the request path reports to while it runs: `observe.hub.Hub` (declared here, not imported, so the
    hub may name the context in its hooks without the context depending on the hub)."""

    def attempt_started(self, ctx: Context, record: Attempt) -> None: ...

    def attempt_finished(self, ctx: Context, record: Attempt) -> None: ...

    def breaker(self, deployment: str, opened: bool) -> None: ...

    def responded(self, ctx: Context, status: int, streaming: bool) -> None: ...

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None: ...


class _Silent:
    """The hooks of work outside a request (a batch line, a background response): nobody listens."""

    def attempt_started(self, ctx: Context, record: Attempt) -> None:
        pass

    def attempt_finished(self, ctx: Context, record: Attempt) -> None:
        pass

    def breaker(self, deployment: str, opened: bool) -> None:
        pass

    def responded(self, ctx: Context, status: int, streaming: bool) -> None:
        pass

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        pass


SILENT: Hooks = _Silent()


@dataclass(slots=True)
class Context:
    """Everything the gateway learns about one request while serving it."""

    request_id: str = field(default_factory=lambda: _new_request_id())
    timings: Timings = field(default_factory=Timings.begin)
    info: CallInfo = field(default_factory=CallInfo)
    principal: Principal = MASTER
    client_ip: str | None = None
    dialect: str = "openai"
    model: ModelConfig | None = None
    target: Target | None = None
    attempts: int = 0
    attempt_log: list[Attempt] = field(default_factory=list)
    service_tier: str = "default"  # the tier that served (routing); billing prices flex from it
    usage: Usage | None = None
    finish_reason: str | None = None
    output_chars: int = 0
    # A stream that ends without the provider's usage (cut, or failed mid-way) is billed on the prompt as the
    # gateway counts it (accounts/delivered.py), set here by the stream, not on the reservation's estimate.
    prompt_tokens_counted: int | None = None
    # The error a stream's caller received after its first byte (the upstream failed mid-way); None if none.
    failure: GatewayError | None = None
    cost_micros: int | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    # The usage log's response body: the buffered answer, or the chunks of a streamed one. `streamed` is
    # None unless the request's log_response_body is on (the guard sets it to a list at admission).
    response: Mapping[str, object] | None = None  # a family's buffered answer
    # A media family's answer as its meter reads it (families/base.Meter.used): settlement bills from it.
    answer: object = None
    streamed: list[ChatCompletionChunk] | None = None
    # The request's routing preferences, read once by the pipeline (routing/options.py); None: the defaults.
    route: RouteOptions | None = None
    # The prompt's size as the guard estimated it at admission: a stream cut before any usage is billed on it
    # when the gateway could not count the prompt itself (accounts/guard.py).
    prompt_tokens_estimate: int = 0

    # ---- what operators see (observe/, issue 24) ----
    # The hub the request reports to (the edge sets the app's; work outside a request keeps the silent one).
    hub: Hooks = SILENT
    # The route the request came in on, as declared ("/v1/chat/completions", "/v1/videos/{video_id}"): a
    # bounded label, never the path itself.
    route_template: str = ""
    # The endpoint family's name once resolved ("chat", "embeddings", "image", ...): GenAI's operation.
    operation: str | None = None
    # The error the caller received (the edge rendered it); a stream's mid-way failure is `failure`.
    error: GatewayError | None = None
    # What the router raised when no deployment could answer (or the caller left meanwhile): the failed
    # settlement types the usage row from it (accounts/guard.py).
    routing_error: BaseException | None = None
    # (stage, start, end) in perf_counter seconds, for traces: None unless a sink asked for them (tracing
    # sets a list in `started`), so the request path pays one `is None` test per stage otherwise.
    stages: list[tuple[str, float, float]] | None = None
    # The request as the pipeline received it (a `GatewayRequest`), for a request log that keeps bodies.
    request: object = None
    # A tracing sink's per-request state (its span), opaque to everything else.
    trace: object = None
    # ---- the response cache (cache/, issue 26) ----
    # The caller's HTTP request headers (Starlette's `Headers`), kept by the edge without reading them: the
    # cache reads `Cache-Control` and `x-inferplex-cache` only for a model it caches. None outside a request.
    headers_in: Mapping[str, str] | None = None
    # What the cache decided (hit, semantic-hit, miss, bypass); None when caching does not apply.
    cache: CacheOutcome | None = None

    def stage(self, name: str, start: float) -> None:
        """Record that stage `name` ran from `start` (time.perf_counter()) until now, if anyone listens."""
        if self.stages is not None:
            self.stages.append((name, start, time.perf_counter()))

    def headers(self) -> dict[str, str]:
        out = {"x-inferplex-request-id": self.request_id, "x-request-id": self.request_id}
        if self.target is not None:
            out["x-inferplex-provider"] = self.target.provider.name
            out["x-inferplex-model"] = self.target.upstream_model
        if self.attempts > 1:
            out["x-inferplex-attempts"] = str(self.attempts)
        if self.info.dropped_params:
            # Percent-encoded: a name can be a caller's own field name, not a valid header value as it stands.
            out["x-inferplex-dropped-params"] = ",".join(quote(p, safe="") for p in self.info.dropped_params)
        if self.timings.queued_ms > 0:
            out["x-inferplex-queued-ms"] = f"{self.timings.queued_ms:.2f}"
        if self.cost_micros is not None:
            out["x-inferplex-cost-micros"] = str(self.cost_micros)
        if self.cache is not None:
            out["x-inferplex-cache"] = self.cache.status
            if self.cache.similarity is not None:
                out["x-inferplex-cache-similarity"] = f"{self.cache.similarity:.4f}"
            if self.cache.entry is not None:
                out["x-inferplex-cache-entry"] = self.cache.entry
        out.update(self.extra_headers)
        return out

    @property
    def completion_tokens(self) -> int | None:
        if not self.usage:
            return None
        value = self.usage.get("completion_tokens")
        return value if isinstance(value, int) else None
