"""Prometheus metrics: the hub's sink that counts every request, attempt and breaker change, and `/metrics`.

Names follow OpenTelemetry's GenAI semantic conventions where they exist, spelled as OTel's own Prometheus
exporter spells them (dots as underscores, the unit as a suffix): `gen_ai_client_token_usage`,
`gen_ai_server_request_duration_seconds`, `gen_ai_server_time_to_first_token_seconds` and
`gen_ai_server_time_per_output_token_seconds`, labelled with `gen_ai_operation_name`, `gen_ai_provider_name`
(GenAI's well-known names: `gcp.gemini`, `aws.bedrock`, ...), `gen_ai_request_model`,
`gen_ai_response_model` and `error_type`. The gateway's own are `inferplex_*` (docs/operate.md lists them).

Every label is bounded: route templates (never paths), deployment keys and model names from the
configuration, closed error types (faults.py), and key ids only when the operator turns `key_labels` on.

Each app has its own registry (many live in one test process), and the series are plain dicts updated on
the event loop (metrics_series.py), so a request pays a few dict updates; per-deployment state (breakers,
in flight, queues) is read from the router once per scrape (routing/health.py), not tracked per request.
Under `inferplex serve --workers N` a scrape on any worker reports the whole server: the workers' snapshots
are merged (metrics_workers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric

from inferplex import __version__
from inferplex.cache.base import BackendStats
from inferplex.config import Config, ProviderConfig
from inferplex.observe.faults import of_request
from inferplex.observe.hub import Env, Sink
from inferplex.observe.metrics_listener import listen
from inferplex.observe.metrics_series import Collector, Counter, Gauge, Histogram, Labels, observe_row
from inferplex.observe.metrics_workers import WRITE_EVERY_S, Part, Shared, Snapshot, directory, sum_rows
from inferplex.observe.settings import MetricsConfig
from inferplex.providers.profiles import profile_for
from inferplex.routing.health import DeploymentHealth, local_load, snapshot

if TYPE_CHECKING:
    from aiohttp import web

    from inferplex.context import Attempt, Context

log = logging.getLogger("inferplex.observe")

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format every Prometheus-compatible scraper reads

# OpenTelemetry's buckets for the GenAI metrics (gen-ai-metrics.md: ExplicitBucketBoundaries advice).
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
# The gateway's own: a request or an attempt (sub-millisecond answers up to long streams), a store call.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# GenAI's well-known `gen_ai.provider.name` values, by provider kind, and by vendor profile for the
# OpenAI-compatible kind; anything else is named by its kind (or profile) as it is.
_KIND_NAMES = {"anthropic": "anthropic", "gemini": "gcp.gemini", "azure": "azure.ai.openai", "bedrock": "aws.bedrock"}
_PROFILE_NAMES = {"mistral": "mistral_ai", "xai": "x_ai"}
# GenAI's `gen_ai.operation.name` where it names the family differently (the others keep the family's name).
_OPERATIONS = {"embedding": "embeddings"}
_BREAKER_VALUES = {"closed": 0.0, "open": 1.0, "half_open": 2.0}
# Gauges of one worker's own load, summed over the live workers when several serve (the breakers are shared
# state every worker reads alike, and build info is one value: those come from the scraped worker alone).
_SUMMED = (
    "inferplex_active_requests", "inferplex_active_streams", "inferplex_queue_depth",
    "inferplex_deployment_in_flight", "inferplex_deployment_queue_depth",
)  # fmt: skip
# The response cache's size: the store every worker shares (SQLite, Redis) is reported once, as the scraped
# worker reads it; in-process memory is each worker's own, so those are summed over the live workers.
_CACHE_SIZES = ("inferplex_cache_entries", "inferplex_cache_bytes", "inferplex_cache_vectors")
_GENAI = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model")


def genai_provider(provider: ProviderConfig) -> str:
    """GenAI's name for who answers: the kind, or for an OpenAI-compatible provider its vendor profile."""
    if provider.kind == "openai":
        profile = profile_for(provider.profile, provider.name).name
        return _PROFILE_NAMES.get(profile, profile)
    return _KIND_NAMES.get(provider.kind, provider.kind)


@dataclass(slots=True)
class _Served:
    """The cells a successful model request adds to, kept per (operation, requested model, deployment)."""

    labels: Labels  # the GenAI labels: operation, provider, request model, response model
    served_by: Labels  # (model, provider) of the gateway's own token and cost counters
    key: Labels
    seconds: list[float]
    tokens_in: list[float] | None = None
    tokens_out: list[float] | None = None
    charged_in: list[float] = field(default_factory=list)
    charged_out: list[float] = field(default_factory=list)
    ttft: list[float] | None = None
    tpot: list[float] | None = None
    cost: list[float] | None = None


class MetricsSink(Sink):
    def __init__(self, config: MetricsConfig, providers: list[ProviderConfig]) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        self._providers = {p.name: genai_provider(p) for p in providers}
        self._key_labels = config.key_labels
        key: tuple[str, ...] = ("key_id",) if config.key_labels else ()
        self._active = 0
        self._streams = 0
        self._health: list[DeploymentHealth] = []
        self._router: Any = None
        self._slots: Any = None
        self._listener: web.AppRunner | None = None
        self._shared: Shared | None = None
        # The hot path's cached cells: per label tuple, the numbers it adds to (metrics_series.py).
        self._requests: dict[tuple[Any, ...], tuple[list[float], list[float]]] = {}
        self._attempts: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        self._served: dict[tuple[Any, ...], _Served] = {}
        self._cache: Any = None  # the response cache (CacheAdmin), read at each scrape for its size
        self._cache_stats: BackendStats | None = None
        self._cache_local = False  # the cache is this process's memory (workers: each has its own)
        self._cache_task: asyncio.Task[None] | None = None
        self._cached: dict[tuple[str, str], list[float]] = {}
        s = self._series = Collector()

        # ---- GenAI semantic conventions ----
        self.genai_tokens = Histogram(
            "gen_ai_client_token_usage", "Tokens used per request (input, output)", (*_GENAI, "gen_ai_token_type"),
            TOKEN_BUCKETS,
        )  # fmt: skip
        self.genai_seconds = Histogram(
            "gen_ai_server_request_duration_seconds", "Model request duration, as the gateway served it",
            (*_GENAI, "error_type"), DURATION_BUCKETS,
        )  # fmt: skip
        self.genai_ttft = Histogram(
            "gen_ai_server_time_to_first_token_seconds", "Time to the first output token of a successful stream",
            _GENAI, TTFT_BUCKETS,
        )  # fmt: skip
        self.genai_tpot = Histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Time per output token after the first, for successful streams", _GENAI, TPOT_BUCKETS,
        )  # fmt: skip
        # ---- the gateway's own ----
        self.requests = Counter(
            "inferplex_requests_total", "Requests answered, by route template, dialect, status and error type",
            ("route", "method", "dialect", "status", "error_type", *key),
        )  # fmt: skip
        self.request_seconds = Histogram(
            "inferplex_request_duration_seconds", "Time from arrival to the last byte out, by route template",
            ("route", "method"), LATENCY_BUCKETS,
        )  # fmt: skip
        self.attempts = Counter(
            "inferplex_upstream_attempts_total",
            "Upstream attempts by deployment and outcome",
            ("deployment", "outcome"),
        )
        self.upstream_seconds = Histogram(
            "inferplex_upstream_latency_seconds",
            "Time to a deployment's answer (a stream's first chunk), by deployment and outcome",
            ("deployment", "outcome"), LATENCY_BUCKETS,
        )  # fmt: skip
        self.fallbacks = Counter(
            "inferplex_fallbacks_total",
            "Requests served by another deployment (kind=deployment) or another model (kind=model) than first tried",
            ("model", "kind"),
        )
        self.breaker_opens = Counter(
            "inferplex_breaker_opens_total", "Circuit breakers this replica opened", ("deployment",)
        )
        self.breaker_closes = Counter(
            "inferplex_breaker_closes_total", "Circuit breakers closed by a successful probe", ("deployment",)
        )
        self.cost = Counter("inferplex_cost_micros_total", "Cost charged, in micro-USD", ("model", "provider", *key))
        self.tokens = Counter(
            "inferplex_tokens_total", "Tokens charged (input, output)", ("model", "provider", "token_type", *key)
        )
        self.queue_wait = Histogram(
            "inferplex_queue_wait_seconds", "Waits for a concurrency slot (limits' fair queue) that queued",
            ("outcome",), QUEUE_BUCKETS,
        )  # fmt: skip
        self.store_seconds = Histogram(
            "inferplex_store_duration_seconds", "Round trips to the stores (SQL and Redis)", ("store",), STORE_BUCKETS
        )
        self.store_errors = Counter("inferplex_store_errors_total", "Store round trips that failed", ("store",))
        self.cache_requests = Counter(
            "inferplex_cache_requests_total",
            "Requests the response cache applied to, by model and outcome (hit, semantic-hit, miss, bypass)",
            ("model", "outcome"),
        )
        for series in (
            self.genai_tokens, self.genai_seconds, self.genai_ttft, self.genai_tpot, self.requests,
            self.request_seconds, self.attempts, self.upstream_seconds, self.fallbacks, self.breaker_opens,
            self.breaker_closes, self.cost, self.tokens, self.queue_wait, self.store_seconds, self.store_errors,
            self.cache_requests,
        ):  # fmt: skip
            s.add(series)
        # ---- read at each scrape ----
        gauges: list[tuple[str, str, tuple[str, ...], Any]] = [
            ("inferplex_active_requests", "Requests being served now", (), lambda: [((), self._active)]),
            ("inferplex_active_streams", "Streamed answers being sent now", (), lambda: [((), self._streams)]),
            ("inferplex_queue_depth", "Requests waiting for a concurrency slot (limits' fair queue)", (),
             lambda: [((), self._slots.waiting if self._slots is not None else 0)]),
            ("inferplex_breaker_state", "Circuit breaker per deployment: 0 closed, 1 open, 2 half-open",
             ("deployment",), lambda: self._per_deployment(lambda h: _BREAKER_VALUES[h["breaker"]])),
            ("inferplex_breaker_retry_in_seconds", "Seconds until an open breaker lets a probe through (cooldown)",
             ("deployment",), lambda: self._per_deployment(lambda h: h["retry_in_s"])),
            ("inferplex_deployment_in_flight", "Attempts open on each deployment",
             ("deployment",), lambda: self._per_deployment(lambda h: h["in_flight"])),
            ("inferplex_deployment_queue_depth", "Requests waiting for a deployment's concurrency",
             ("deployment",), lambda: self._per_deployment(lambda h: h["queued"])),
            ("inferplex_build_info", "The gateway's version", ("version",), lambda: [((__version__,), 1.0)]),
            ("inferplex_cache_entries", "Answers in the response cache's store (backend: memory, sqlite, redis)",
             ("backend",), lambda: self._cache_size("entries")),
            ("inferplex_cache_bytes", "Bytes of answers in the response cache's store",
             ("backend",), lambda: self._cache_size("bytes")),
            ("inferplex_cache_vectors", "Embeddings in the response cache's semantic index",
             ("backend",), lambda: self._cache_size("vectors")),
        ]  # fmt: skip
        for name, doc, labels, read in gauges:
            s.add(Gauge(name, doc, labels, read))
        self.registry.register(s)
        self._process = (ProcessCollector(registry=self.registry), GCCollector(registry=self.registry))
        self._platform = PlatformCollector(registry=self.registry)

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def start(self, env: Env) -> None:
        self._router = env.router
        self._cache = getattr(env.pipeline, "cache", None)
        if env.accounts is not None:
            env.accounts.watch(self._store, self._queued)
            self._slots = env.accounts.guard.slots
        watch = getattr(getattr(env.router, "cooldowns", None), "watch", None)
        if watch is not None:
            watch(self._store)
        where = directory()
        if where is not None:
            self._shared = Shared(where, self._snapshot)
            self._shared.start()
            if self._cache is not None:
                self._cache_task = asyncio.get_running_loop().create_task(self._watch_cache())
        if self.config.listen:
            reuse = self._shared is not None
            self._listener = await listen(self.scrape, CONTENT_TYPE, self.config.listen, reuse)

    async def aclose(self) -> None:
        if self._cache_task is not None:
            self._cache_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cache_task
            self._cache_task = None
        if self._listener is not None:
            await self._listener.cleanup()
            self._listener = None
        if self._shared is not None:
            await self._shared.aclose()
            self._shared = None

    async def scrape(self) -> bytes:
        """The exposition text, with the per-deployment state and the cache's size read now."""
        if self._router is not None:
            try:
                self._health = await snapshot(self._router)
            except Exception:
                log.exception("reading deployment health for /metrics failed")
        await self._read_cache()
        if self._shared is not None:
            view = CollectorRegistry(auto_describe=False)
            view.register(_Merged(self, await self._shared.gather()))
            return generate_latest(view)
        return generate_latest(self.registry)

    async def _read_cache(self) -> None:
        if self._cache is None:
            return
        try:
            self._cache_stats = await self._cache.stats()
        except Exception as exc:  # its store unreachable: no size this scrape, rather than a stale one
            self._cache_stats = None
            log.warning("reading the response cache's size for /metrics failed: %s: %s", type(exc).__name__, exc)
            return
        self._cache_local = self._cache_stats.backend == "memory"

    async def _watch_cache(self) -> None:
        """Under workers, an in-process cache's size read each second, so a sibling's scrape sums fresh
        numbers from this worker's snapshot; a shared store is read by the scraped worker alone."""
        while True:
            await self._read_cache()
            if self._cache_stats is not None and not self._cache_local:
                return
            await asyncio.sleep(WRITE_EVERY_S)

    # ---- several workers (metrics_workers.py) -----------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        """This worker's series as plain lists, for its siblings' scrapes (written at most once a second)."""
        counters: dict[str, list[Any]] = {}
        histograms: dict[str, list[Any]] = {}
        for series in self._series.series:
            if isinstance(series, Counter):
                counters[series.name] = [[k, v[0]] for k, v in series.values.items()]
            elif isinstance(series, Histogram):
                histograms[series.name] = [[k, v] for k, v in series.values.items()]
        in_flight, queued = self._local_deployments()
        gauges = {
            "inferplex_active_requests": [[[], self._active]],
            "inferplex_active_streams": [[[], self._streams]],
            "inferplex_queue_depth": [[[], self._slots.waiting if self._slots is not None else 0]],
            "inferplex_deployment_in_flight": in_flight,
            "inferplex_deployment_queue_depth": queued,
        }
        found = self._cache_stats
        if found is not None and self._cache_local:
            gauges.update({name: [[[found.backend], float(getattr(found, name.rpartition("_")[2]))]]
                           for name in _CACHE_SIZES})  # fmt: skip
        process = [
            [f.name, f.type, f.documentation, [[x.name, x.labels, x.value] for x in f.samples]]
            for collector in self._process
            for f in collector.collect()
        ]
        worker = {"worker": os.environ.get("INFERPLEX_WORKER_SLOT", ""), "pid": str(os.getpid())}
        return {"counters": counters, "histograms": histograms, "gauges": gauges, "process": process, "worker": worker}

    def _local_deployments(self) -> tuple[list[Any], list[Any]]:
        """This worker's attempts open and waiting per deployment, as snapshot rows."""
        load = local_load(self._router) if self._router is not None else {}
        return [[[k], v[0]] for k, v in load.items()], [[[k], v[1]] for k, v in load.items()]

    def _cache_size(self, field: str) -> list[tuple[Labels, float]]:
        found = self._cache_stats
        return [((found.backend,), float(getattr(found, field)))] if found is not None else []

    def _per_deployment(self, value: Any) -> list[tuple[Labels, float]]:
        seen: dict[str, float] = {}
        for row in self._health:
            seen.setdefault(row["deployment"], float(value(row)))
        return [((key,), v) for key, v in seen.items()]

    # ---- callbacks from the stores ----------------------------------------------------------------------

    def _store(self, store: str, seconds: float, ok: bool) -> None:
        self.store_seconds.observe((store,), seconds)
        if not ok:
            self.store_errors.inc((store,))

    def _queued(self, seconds: float, acquired: bool) -> None:
        self.queue_wait.observe(("acquired" if acquired else "timed_out",), seconds)

    # ---- hooks -----------------------------------------------------------------------------------------

    def started(self, ctx: Context, method: str) -> None:
        self._active += 1

    def responded(self, ctx: Context, status: int, streaming: bool) -> None:
        if streaming:
            self._streams += 1

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        self._active -= 1
        if streaming:
            self._streams -= 1
        seconds = time.perf_counter() - ctx.timings.start
        kind = of_request(ctx, status) or ""
        key: Labels = ()
        if self._key_labels:
            key = ("" if kind == "policy.unauthenticated" else ctx.principal.key_id or "",)
        found = (ctx.route_template, method, ctx.dialect, status, kind, *key)
        cells = self._requests.get(found)
        if cells is None:
            labels = (ctx.route_template, method, ctx.dialect, str(status), kind, *key)
            row = self.request_seconds.row((ctx.route_template, method))
            cells = self._requests[found] = (self.requests.cell(labels), row)
        cells[0][0] += 1
        observe_row(LATENCY_BUCKETS, cells[1], seconds)
        model = ctx.model
        cache = ctx.cache
        if cache is not None:
            self._cache_outcome(model.name if model is not None else "", cache.status)
        if ctx.operation is not None and model is not None:
            tries = ctx.attempt_log
            requested = tries[0].model if tries else model.name
            if cache is not None and cache.hit and not kind:
                self._cache_hit(ctx, model.name, seconds, key)
            elif kind or ctx.target is None:
                self._model_failed(ctx, model.name, requested, seconds, kind, key)
            else:
                self._model_served(ctx, requested, seconds, streaming, key)

    def _cache_outcome(self, model: str, status: str) -> None:
        cell = self._cached.get((model, status))
        if cell is None:
            cell = self._cached[(model, status)] = self.cache_requests.cell((model, status))
        cell[0] += 1

    def _cache_hit(self, ctx: Context, model: str, seconds: float, key: Labels) -> None:
        """A request the response cache answered: no deployment served it (no response model, no tokens
        sent upstream); what it was charged counts under provider `cache`."""
        operation = _OPERATIONS.get(ctx.operation or "", ctx.operation or "")
        self.genai_seconds.observe((operation, "", model, "", ""), seconds)
        if ctx.cost_micros:
            self.cost.inc((model, "cache", *key), ctx.cost_micros)

    def _served_cells(self, ctx: Context, requested: str, key: Labels) -> _Served:
        target = ctx.target
        assert target is not None and ctx.model is not None
        found = (ctx.operation, requested, ctx.model.name, target.key, *key)
        cells = self._served.get(found)
        if cells is None:
            operation = _OPERATIONS.get(ctx.operation or "", ctx.operation or "")
            labels = (operation, self._providers.get(target.provider.name, ""), requested, target.upstream_model)
            cells = self._served[found] = _Served(
                labels, (ctx.model.name, target.provider.name), key, self.genai_seconds.row((*labels, ""))
            )
        return cells

    def _model_served(self, ctx: Context, requested: str, seconds: float, streaming: bool, key: Labels) -> None:
        """A model request that succeeded: its series' cells are kept per (operation, model, deployment)."""
        cells = self._served_cells(ctx, requested, key)
        observe_row(DURATION_BUCKETS, cells.seconds, seconds)
        tries = ctx.attempt_log
        if len(tries) > 1:
            first, served = tries[0], tries[-1]
            if served.model != first.model:
                self.fallbacks.inc((requested, "model"))
            elif served.deployment != first.deployment:
                self.fallbacks.inc((requested, "deployment"))
        usage = ctx.usage
        if usage:
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                if cells.tokens_in is None:
                    cells.tokens_in = self.genai_tokens.row((*cells.labels, "input"))
                    cells.charged_in = self.tokens.cell((*cells.served_by, "input", *key))
                observe_row(TOKEN_BUCKETS, cells.tokens_in, prompt)
                cells.charged_in[0] += prompt
            if isinstance(completion, int):
                if cells.tokens_out is None:
                    cells.tokens_out = self.genai_tokens.row((*cells.labels, "output"))
                    cells.charged_out = self.tokens.cell((*cells.served_by, "output", *key))
                observe_row(TOKEN_BUCKETS, cells.tokens_out, completion)
                cells.charged_out[0] += completion
            timings = ctx.timings
            if streaming and timings.first_token:
                if cells.ttft is None:
                    cells.ttft = self.genai_ttft.row(cells.labels)
                observe_row(TTFT_BUCKETS, cells.ttft, timings.first_token - timings.start)
                if isinstance(completion, int) and completion > 1 and timings.upstream_end > timings.first_token:
                    if cells.tpot is None:
                        cells.tpot = self.genai_tpot.row(cells.labels)
                    per_token = (timings.upstream_end - timings.first_token) / (completion - 1)
                    observe_row(TPOT_BUCKETS, cells.tpot, per_token)
        if ctx.cost_micros:
            if cells.cost is None:
                cells.cost = self.cost.cell((*cells.served_by, *key))
            cells.cost[0] += ctx.cost_micros

    def _model_failed(self, ctx: Context, model: str, requested: str, seconds: float, kind: str, key: Labels) -> None:
        """A model request that failed (or was refused before routing): no response model, no TTFT."""
        target = ctx.target
        operation = _OPERATIONS.get(ctx.operation or "", ctx.operation or "")
        provider = self._providers.get(target.provider.name, "") if target is not None else ""
        labels = (operation, provider, requested, "")
        self.genai_seconds.observe((*labels, kind), seconds)
        usage = ctx.usage
        if usage and target is not None:  # a stream cut after its first byte is billed for what it produced
            for token_type, count in (
                ("input", usage.get("prompt_tokens")),
                ("output", usage.get("completion_tokens")),
            ):
                if isinstance(count, int):
                    self.genai_tokens.observe((*labels, token_type), count)
                    self.tokens.inc((model, target.provider.name, token_type, *key), count)
        if ctx.cost_micros and target is not None:
            self.cost.inc((model, target.provider.name, *key), ctx.cost_micros)

    def attempt_finished(self, ctx: Context, record: Attempt) -> None:
        found = (record.deployment, record.outcome)
        cells = self._attempts.get(found)
        if cells is None:
            cells = self._attempts[found] = (self.attempts.cell(found), self.upstream_seconds.row(found))
        cells[0][0] += 1
        if record.latency_ms > 0 and record.outcome in ("ok", "error"):
            observe_row(LATENCY_BUCKETS, cells[1], record.latency_ms / 1000)

    def breaker(self, deployment: str, opened: bool) -> None:
        (self.breaker_opens if opened else self.breaker_closes).inc((deployment,))


class _Merged:
    """The whole server's families at one scrape: this worker's series definitions, every worker's values."""

    def __init__(self, metrics: MetricsSink, parts: list[Part]) -> None:
        self.metrics, self.parts = metrics, parts

    def collect(self) -> Iterator[Metric]:
        for series in self.metrics._series.series:
            if isinstance(series, Counter):
                counter = Counter(series.name, series.doc, series.labels)
                counter.values = self._sum("counters", series.name, len(series.labels), 1)
                yield counter.family()
            elif isinstance(series, Histogram):
                histogram = Histogram(series.name, series.doc, series.labels, series.bounds)
                histogram.values = self._sum("histograms", series.name, len(series.labels), len(series.bounds) + 2)
                yield histogram.family()
            elif series.name in _SUMMED or (series.name in _CACHE_SIZES and self.metrics._cache_local):
                cells = self._sum("gauges", series.name, len(series.labels), 1, live=True)
                values = [(k, v[0]) for k, v in cells.items()]
                yield Gauge(series.name, series.doc, series.labels, values.copy).family()
            else:
                yield series.family()
        yield from self._per_process()
        yield from self.metrics._platform.collect()

    def _per_process(self) -> Iterator[Metric]:
        """process_* and python_gc_*: each live worker's own, labelled with its slot and pid (a sum of two
        processes' memory or start times would describe no process)."""
        families: dict[str, Metric] = {}
        for part in self.parts:
            if not part.live:
                continue
            worker = part.data.get("worker", {})
            for name, kind, doc, samples in part.data.get("process", []):
                family = families.get(name)
                if family is None:
                    family = families[name] = Metric(name, doc, kind)
                for sample, labels, value in samples:
                    family.add_sample(sample, {**labels, **worker}, value)
        yield from families.values()

    def _sum(self, kind: str, name: str, arity: int, width: int, live: bool = False) -> dict[Labels, list[float]]:
        cells: dict[Labels, list[float]] = {}
        for part in self.parts:
            if part.live or not live:
                sum_rows(cells, part.data.get(kind, {}).get(name, []))
        return {k: v for k, v in cells.items() if len(k) == arity and len(v) == width}


def sink(config: Config) -> Sink | None:
    settings = config.observability.metrics
    if not settings.enabled:
        return None
    return MetricsSink(settings, list(config.providers))
