"""The gateway's configuration: one YAML file, validated once at start-up.

Secrets are never inlined in the file: a secret field holds a reference (`env:NAME` or `file:PATH`) that is
resolved when the file is loaded, so a config file can be committed and shared without leaking keys.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from inferplex.accounts.limits import LimitRule
from inferplex.cache.checks import problems as cache_problems
from inferplex.cache.settings import CacheConfig, ModelCache
from inferplex.observe.settings import AlertsConfig, ConsoleConfig, ObservabilityConfig
from inferplex.prompting.templates import TemplateProblem, check_template
from inferplex.provider_kinds import known_kinds


class ConfigError(Exception):
    """A configuration file that cannot be used; the message names the file, the field and the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def resolve_secret(value: str) -> str:
    """Turn `env:NAME` / `file:PATH` into the secret itself; anything else is an inlined secret: refused.
    Public: a section that must resolve its references later than load time (observe/alerts_outbox.py) uses it."""
    if value.startswith("env:"):
        name = value[4:]
        resolved = os.environ.get(name)
        if resolved is None:
            raise ValueError(f"environment variable {name} is not set")
        return resolved
    if value.startswith("file:"):
        path = Path(value[5:]).expanduser()
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ValueError(f"cannot read secret file {path}: {exc.strerror}") from None
    raise ValueError("secrets are referenced, not inlined: write env:VARIABLE or file:/path/to/secret")


def _secret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a string reference such as env:VARIABLE")
    return resolve_secret(value)


# A secret field: resolved from its reference at load time, shown as '**********' in any repr or dump.
Secret = Annotated[SecretStr, BeforeValidator(_secret)]


def _redis_url(value: str | None) -> str | None:
    """A Redis URL read as the stores will read it (redis_connect.parse: Sentinel and Cluster forms too), so
    `config check` refuses a bad one instead of the server's start."""
    if value is not None:
        from inferplex.redis_connect import parse  # redis-py is imported only by configs that name Redis

        parse(value)
    return value


RedisUrl = Annotated[str | None, AfterValidator(_redis_url)]


class Timeouts(_Strict):
    """Upstream timeouts in seconds. `read` bounds the wait for each chunk: a buffered answer (head and
    body), a stream's first token and its stalls."""

    connect: float = Field(10.0, gt=0)
    read: float = Field(300.0, gt=0)
    total: float | None = Field(None, gt=0)


class ProviderConfig(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: str = "openai"
    profile: str | None = None
    base_url: str | None = None
    api_key: Secret | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    options: dict[str, Any] = Field(default_factory=dict)


_Usd = Annotated[Decimal, Field(ge=0)]


class Pricing(_Strict):
    """Prices in USD, per the unit each provider publishes (docs/media.md for the media units).

    Tokens and characters are priced per million (so a token's price in USD per million is exactly its
    price in micro-USD); an image, a second of audio or of video per unit. Image and audio tokens have
    their own rates: billing an image's output tokens at the text `output` rate is a known gateway bug
    (gpt-image's image tokens cost several times its text tokens), so an unset image rate is never the
    text one. `image_by` and `video_second_by` price by size, quality or resolution: for an image the
    most specific key wins (`1024x1024/hd`, then `1024x1024`, then `hd`), else `image`."""

    input: Decimal = Field(Decimal(0), ge=0)
    output: Decimal = Field(Decimal(0), ge=0)
    cached_input: Decimal | None = Field(None, ge=0)
    cache_write: Decimal | None = Field(None, ge=0)
    image: Decimal | None = Field(None, ge=0)
    image_by: dict[str, _Usd] = Field(default_factory=dict)
    image_input: Decimal | None = Field(None, ge=0)
    image_output: Decimal | None = Field(None, ge=0)
    audio_input: Decimal | None = Field(None, ge=0)
    audio_output: Decimal | None = Field(None, ge=0)
    audio_second: Decimal | None = Field(None, ge=0)
    character: Decimal | None = Field(None, ge=0)
    video_second: Decimal | None = Field(None, ge=0)
    video_second_by: dict[str, _Usd] = Field(default_factory=dict)
    free: bool = False


class Capabilities(_Strict):
    tools: bool = True
    vision: bool = False
    json_schema: bool = True
    streaming: bool = True


class DeploymentTimeouts(_Strict):
    """Per-deployment overrides, in seconds; unset ones fall back to the provider's `timeouts`.

    `first_token` bounds the wait for the first chunk (connect included), `stall` the gap between chunks,
    `total` one whole attempt."""

    connect: float | None = Field(None, gt=0)
    first_token: float | None = Field(None, gt=0)
    stall: float | None = Field(None, gt=0)
    total: float | None = Field(None, gt=0)


class DeploymentConfig(_Strict):
    provider: str
    model: str = Field(min_length=1)
    # Routing (docs/routing.md): `id` names it for `endpoint_id`; a `dedicated` one is reached only that way.
    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")
    dedicated: bool = False
    region: str | None = None
    # Where it runs, for `require_local` (docs/processors.md): unset means on premises for a `local` provider,
    # else cloud (targets.Target.location).
    location: Literal["on_premises", "cloud"] | None = None
    weight: float = Field(1.0, ge=0)
    priority: int = 0
    rpm: int | None = Field(None, gt=0)
    tpm: int | None = Field(None, gt=0)
    max_concurrent: int | None = Field(None, gt=0)
    timeouts: DeploymentTimeouts = Field(default_factory=DeploymentTimeouts)
    pricing: Pricing | None = None
    flex_pricing: Pricing | None = None


class CooldownConfig(_Strict):
    """Circuit breaker: `failures` within `window` seconds open it for `period` seconds, then one probe.
    `when_all_open`: with every deployment's breaker open, `probe` tries the one that reopens soonest once
    anyway; `refuse` answers 503 with `Retry-After` at once (InferExchange: "a model with no serving capacity
    answers 503")."""

    failures: int = Field(3, ge=1)
    window: float = Field(60.0, gt=0)
    period: float = Field(30.0, gt=0)
    when_all_open: Literal["probe", "refuse"] = "probe"


class RoutingConfig(_Strict):
    strategy: Literal["weighted", "least_busy", "lowest_latency", "lowest_cost", "priority"] = "weighted"
    fallbacks: list[str] = Field(default_factory=list)
    retries: int = Field(2, ge=0, le=10)
    backoff: float = Field(0.2, ge=0)
    backoff_max: float = Field(5.0, ge=0)
    max_retry_wait: float = Field(5.0, ge=0)
    deadline: float = Field(600.0, gt=0)
    max_deadline: float = Field(3600.0, gt=0)
    cooldown: CooldownConfig = Field(default_factory=CooldownConfig)


class RoutingStoreConfig(_Strict):
    """Where replicas share cooldowns; without `redis_url` each replica keeps its own."""

    redis_url: RedisUrl = None
    redis_prefix: str = "inferplex:routing:"


class ModelConfig(_Strict):
    name: str = Field(min_length=1)
    type: Literal["chat", "embedding", "image", "speech", "transcription", "video"] = "chat"
    display_name: str | None = None
    description: str | None = None
    deployments: Annotated[list[DeploymentConfig], Field(min_length=1)]
    context_window: int | None = Field(None, gt=0)
    max_output: int | None = Field(None, gt=0)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    pricing: Pricing = Field(default_factory=Pricing)
    flex_pricing: Pricing | None = None
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    created: int = 1735689600
    # Inferada's prompt templating (prompting/): the model's default system prompt, and how system text is
    # rendered (`off`: literal; `vars`: {{ variable }} only; `logic`: conditionals and loops, default only).
    system_prompt: str | None = None
    template_render_mode: Literal["off", "vars", "logic"] = "off"
    # Inferada's rate-limit rules at the model level: counted across every caller of the model (docs/accounts.md).
    limit_rules: list[LimitRule] = Field(default_factory=list)
    # the response cache's settings for this model (docs/caching.md); unset: the `cache` section's
    cache: ModelCache = Field(default_factory=ModelCache)

    @model_validator(mode="after")
    def _prompt_template(self) -> ModelConfig:
        """An operator's template is refused when the config is loaded, never on a caller's request."""
        if self.system_prompt is not None:
            try:
                check_template(self.system_prompt, self.template_render_mode)
            except TemplateProblem as exc:
                raise ValueError(f"system_prompt: {exc}") from None
        return self


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    master_key: Secret | None = None
    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    data_dir: str = ".inferplex"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # The request head (docs/limits.md): nginx's large_client_header_buffers 4 x 8k. Over a line: 414 for
    # the request line, 431 for a header; over the total: 431. The answer is followed by a lingering close
    # of at most `lingering_close_s`, so the client reads it instead of a reset.
    max_request_line_bytes: int = Field(8192, ge=256, le=1024 * 1024)
    max_header_bytes: int = Field(8192, ge=256, le=1024 * 1024)
    max_head_bytes: int = Field(32768, ge=1024, le=16 * 1024 * 1024)
    lingering_close_s: float = Field(5.0, gt=0, le=60)
    # The shape of a JSON body (json_limits.py): nesting depth, items per array or object, string length.
    max_json_depth: int = Field(64, ge=2, le=200)
    max_json_items: int = Field(100_000, ge=1)
    max_json_string_chars: int = Field(10_485_760, ge=1)
    # Serving (serving/, docs/deploy.md). `workers`: processes sharing the port under a supervisor (None: one
    # per core; `--workers` wins). On SIGTERM a process answers 503 on /health/ready at once, keeps accepting
    # for `drain_delay_s` (so a load balancer's health checks take it out first), then stops accepting and
    # gives requests and streams in flight `drain_s` to finish; what is still open then is cut, and settled
    # as for a caller who left.
    workers: int | None = Field(None, ge=1, le=256)
    drain_delay_s: float = Field(0.0, ge=0, le=600)
    drain_s: float = Field(30.0, ge=0, le=3600)


class StorageConfig(_Strict):
    """Where keys, credits and usage live (SQL), and what replicas share for limits (Redis, optional).

    Without `database_url`, an SQLite file in `server.data_dir` (`sqlite:///path`; `sqlite+aiosqlite://` is read
    the same way). Without `redis_url`, limits are per replica.
    `redis_failure`: when Redis is unreachable, `open` admits requests unlimited, `closed` refuses them (503).
    `redis_lease_s`: a concurrency slot's lease in Redis, renewed every third of it while its request runs:
    how long the slots of a replica that died (or could not send a release) stay taken (limits/leases.py).
    It is also each replica's liveness lease in the database: a lost replica's credit reservations are
    released by the others within it plus a third (store/liveness.py).
    `pool_size`: PostgreSQL connections per server (shared out over `--workers N`: each keeps
    ceil(pool_size / N)), all kept open; a request waits for a free one rather than opening (and then
    closing) an extra one, which costs more CPU than the queries themselves.
    `timeout_s`: the deadline of every call to the database (a silent one costs a request this, then 503).
    `spool_flush_s`: how often what a failed write left in the local spool is written again.
    `orphan_release_s`: a reservation with no settlement this old is released (docs/accounts.md, "Under
    store outages"); default: the longest `routing.max_deadline` of any model, plus ten minutes.
    `pooler`: `transaction` when `database_url` reaches PostgreSQL through a pooler in transaction mode
    (PgBouncer's `pool_mode = transaction`): no statement is prepared by name, since a named statement lives
    in one server session and the pooler hands each transaction to any of them.
    `direct_database_url`: PostgreSQL itself, not the pooler, for what needs a session of its own: the
    LISTEN that keeps key records cached, and the migrations. Without it behind a transaction pooler the
    migrations go through the pooler (their lock is held by their transaction) and the key cache is off:
    every keyed request reads its key (docs/deploy.md).
    """

    database_url: str | None = None
    # PostgreSQL behind a transaction pooler (docs/deploy.md, "PgBouncer"): what the pooler cannot carry
    # goes to `direct_database_url`.
    pooler: Literal["none", "transaction"] = "none"
    direct_database_url: str | None = None
    pool_size: int = Field(20, ge=1, le=1000)
    timeout_s: float = Field(5.0, gt=0, le=300)
    spool_flush_s: float = Field(1.0, gt=0, le=3600)
    orphan_release_s: float | None = Field(None, gt=0)
    redis_url: RedisUrl = None
    redis_prefix: str = "inferplex:limits:"
    redis_failure: Literal["open", "closed"] = "open"
    redis_timeout_s: float = Field(0.25, gt=0)
    redis_lease_s: float = Field(30.0, ge=1, le=3600)

    @model_validator(mode="after")
    def _pooled_postgres(self) -> StorageConfig:
        """A pooler and a direct URL mean something only for PostgreSQL: said at start-up, not at the first
        request."""
        postgres = self.database_url is not None and not self.database_url.startswith("sqlite")
        if self.pooler != "none" and not postgres:
            raise ValueError("storage.pooler needs storage.database_url to be a PostgreSQL URL")
        if self.direct_database_url is not None:
            if not postgres:
                raise ValueError("storage.direct_database_url needs storage.database_url to be a PostgreSQL URL")
            if self.direct_database_url.startswith("sqlite"):
                raise ValueError("storage.direct_database_url must be a PostgreSQL URL")
        return self


class AccountsConfig(_Strict):
    """API keys, credits and limits (docs/accounts.md)."""

    trusted_proxies: list[str] = Field(default_factory=list)
    default_max_tokens: int = Field(4096, gt=0)
    max_queue_wait_s: float = Field(10.0, ge=0)
    log_query_body: bool = False
    log_response_body: bool = False
    token_ttl_s: int = Field(3600, gt=0)
    token_secret: Secret | None = None


class InferExchangeConfig(_Strict):
    """InferExchange's published per-route limits on `/api/v1`, in requests per minute per caller key
    (docs/dialects.md); `null` turns a route's limit off."""

    chat_rpm: int | None = Field(60, gt=0)
    models_rpm: int | None = Field(30, gt=0)


class CustomEndpointsConfig(_Strict):
    """Unify's custom endpoints (custom_endpoints/, docs/dialects.md): the key that seals the accounts'
    provider keys at rest (a reference; without one the routes are off), and whether a registered URL may
    reach loopback, private, link-local and other internal addresses (off: only for a trusted deployment)."""

    encryption_key: Secret | None = None
    allow_private_addresses: bool = False


class MediaS3Config(_Strict):
    """An S3-compatible bucket for media files (AWS S3, MinIO, Ceph, R2...): `endpoint_url` unset is AWS."""

    bucket: str = Field(min_length=1)
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: Secret | None = None
    secret_access_key: Secret | None = None
    prefix: str = ""


class MediaConfig(_Strict):
    """Where generated media and uploads are stored, and how they are served (media_store/, docs/media.md).

    `backend`: `disk` (under `dir`, default `<server.data_dir>/media`) or `s3` (the `s3:` bucket). Downloads go
    through the gateway's own signed URLs, valid `url_ttl_s`, absolute from `public_base_url` (else the server's
    host and port). Files are deleted `retention_s` after they were stored (null: kept), by a sweep every
    `sweep_interval_s`. `signing_key` (a reference) signs the URLs; without one a key is generated once into
    `<data_dir>/media_signing_key`: replicas sharing a store must share the key. Uploads are refused past
    `max_upload_bytes`; a provider's file fetched into the store past `max_fetch_bytes`."""

    backend: Literal["disk", "s3"] = "disk"
    dir: str | None = None
    s3: MediaS3Config | None = None
    url_ttl_s: float = Field(3600.0, gt=0)
    retention_s: float | None = Field(7 * 86400.0, gt=0)
    sweep_interval_s: float = Field(300.0, gt=0)
    max_upload_bytes: int = Field(25 * 1024 * 1024, gt=0)
    max_fetch_bytes: int = Field(1024 * 1024 * 1024, gt=0)
    fetch_timeout_s: float = Field(300.0, gt=0)
    public_base_url: str | None = Field(None, pattern=r"^https?://")
    signing_key: Secret | None = None

    @model_validator(mode="after")
    def _bucket(self) -> MediaConfig:
        if self.backend == "s3" and self.s3 is None:
            raise ValueError("s3: backend s3 needs the bucket (media.s3.bucket)")
        return self


class JobsConfig(_Strict):
    """Durable media jobs (jobs/, docs/media.md "Video jobs"). Every replica looks for due jobs every `tick_s`
    and polls each upstream after `poll_initial_s`, then backs off by `poll_backoff` up to `poll_max_s`; a
    replica holds a job for `lease_s` at most per look (renewed while it downloads). A job unfinished after
    `max_job_s` is failed and its reservation released; the orphan sweeper's bound
    (`storage.orphan_release_s`) is above it by default, and a configured one below it is refused, or a job
    could go unbilled. Concurrent (unfinished) video jobs per key and per account: at most
    `max_concurrent_per_key` / `max_concurrent_per_account` (null: no limit), counted in the database, so
    across replicas."""

    tick_s: float = Field(1.0, gt=0, le=60)
    poll_initial_s: float = Field(5.0, gt=0)
    poll_max_s: float = Field(60.0, gt=0)
    poll_backoff: float = Field(1.5, ge=1, le=10)
    lease_s: float = Field(120.0, ge=0.5)
    batch: int = Field(50, ge=1, le=1000)
    max_job_s: float = Field(3600.0, gt=0)
    submit_grace_s: float = Field(900.0, gt=0)
    max_concurrent_per_key: int | None = Field(8, ge=1)
    max_concurrent_per_account: int | None = Field(None, ge=1)


class BatchesConfig(_Strict):
    """Batches the gateway runs itself (batches/, docs/batches.md). Every `inferplex serve` (unless `worker` is
    false) and every `inferplex worker` runs a worker that looks for lines to run every `tick_s` (at once when
    one of its lines ends), runs at most `concurrency` at a time and starts at most `rate_per_s` a second, so
    interactive traffic keeps its room; a line is leased for `lease_s` (renewed while it runs), and one that
    a rate limit refused is tried again later, `max_attempts` times at most. An input file may hold
    `max_lines` lines; a batch ends (`expired`) after its completion window, `window_s` for "24h"."""

    worker: bool = True
    tick_s: float = Field(1.0, gt=0, le=60)
    concurrency: int = Field(4, ge=1, le=1000)
    rate_per_s: float | None = Field(None, gt=0)
    lease_s: float = Field(300.0, ge=0.5)
    max_attempts: int = Field(5, ge=1, le=100)
    max_lines: int = Field(50_000, ge=1)
    window_s: float = Field(86_400.0, gt=0)


class ResponsesConfig(_Strict):
    """Stored responses (responses_api/, docs/responses.md). A stored response is kept `retention_days` after
    it was made, then swept (every `sweep_s`). Background responses are durable rows every replica's worker
    looks for every `tick_s` (at once on the replica that took them); a run holds its row for `lease_s`,
    renewed while it runs, and a replica runs at most `concurrency` at a time. A stream of a background
    response follows its stored events, looking for new ones every `follow_poll_s`."""

    retention_days: float = Field(30.0, gt=0)
    sweep_s: float = Field(300.0, gt=0)
    tick_s: float = Field(1.0, gt=0, le=60)
    lease_s: float = Field(60.0, ge=0.5)
    concurrency: int = Field(8, ge=1, le=1000)
    follow_poll_s: float = Field(0.1, gt=0, le=10)
    # files named by `file_id` in an input go upstream inline (responses_api/files.py), at most this many
    # bytes together per request (Gemini takes 20 MB of inline data in one request)
    max_inline_file_bytes: int = Field(20 * 1024 * 1024, gt=0)


class Config(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    providers: list[ProviderConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    routing: RoutingStoreConfig = Field(default_factory=RoutingStoreConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    accounts: AccountsConfig = Field(default_factory=AccountsConfig)
    inferexchange: InferExchangeConfig = Field(default_factory=InferExchangeConfig)
    custom_endpoints: CustomEndpointsConfig = Field(default_factory=CustomEndpointsConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    batches: BatchesConfig = Field(default_factory=BatchesConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)  # issue 24
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)  # issue 26: the response cache
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)

    @model_validator(mode="after")
    def _cross_references(self) -> Config:
        names = [p.name for p in self.providers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"providers[{i}].name: duplicate provider name {name!r}")
        kinds = known_kinds()
        for i, p in enumerate(self.providers):
            if p.kind not in kinds:
                raise ValueError(f"providers[{i}].kind: unknown kind {p.kind!r} (known: {', '.join(sorted(kinds))})")
        seen: set[str] = set()
        for i, m in enumerate(self.models):
            if m.name in seen:
                raise ValueError(f"models[{i}].name: duplicate model name {m.name!r}")
            seen.add(m.name)
            for j, d in enumerate(m.deployments):
                if d.provider not in names:
                    raise ValueError(f"models[{i}].deployments[{j}].provider: unknown provider {d.provider!r}")
        _check_routing(self.models)
        if self.cache.enabled and (found := cache_problems(self)):
            raise ValueError("cache: " + "; ".join(found))
        orphan = self.storage.orphan_release_s
        if orphan is not None and orphan <= self.jobs.max_job_s and any(m.type == "video" for m in self.models):
            raise ValueError(
                f"storage.orphan_release_s: {orphan:g}s is not above jobs.max_job_s ({self.jobs.max_job_s:g}s): "
                "a video job still running would have its reservation released, and go unbilled"
            )
        return self

    def provider(self, name: str) -> ProviderConfig:
        return next(p for p in self.providers if p.name == name)


def _check_routing(models: list[ModelConfig]) -> None:
    """Fallbacks name known models; deployment ids are unique across the catalog (`endpoint_id` finds them)."""
    names = {m.name for m in models}
    ids: set[str] = set()
    for i, m in enumerate(models):
        for j, name in enumerate(m.routing.fallbacks):
            if name not in names or name == m.name:
                raise ValueError(f"models[{i}].routing.fallbacks[{j}]: unknown fallback model {name!r}")
        for j, d in enumerate(m.deployments):
            if d.id is not None:
                if d.id in ids:
                    raise ValueError(f"models[{i}].deployments[{j}].id: duplicate deployment id {d.id!r}")
                ids.add(d.id)


def check_pricing(config: Config, source: str) -> None:
    """Every model has a price (its own, or one per deployment) or is marked free: a model nobody priced
    would otherwise be given away without anyone deciding so. Checked when the server starts and by
    `inferplex config check` (not by `parse_config`, so partial configs built in code stay usable)."""
    for i, m in enumerate(config.models):
        own = "pricing" in m.model_fields_set and (
            # a token price, or a media family's unit price (per image, second, character: docs/media.md)
            m.pricing.free or bool(m.pricing.model_fields_set - {"free", "cached_input", "cache_write"})
        )
        if not own and not all(d.pricing is not None for d in m.deployments):
            raise ConfigError(
                f"{source}: invalid configuration\n  models[{i}].pricing: model {m.name!r} has no price: set "
                "pricing.input and pricing.output (USD per million tokens), a media unit's price, or pricing.free: true"
            )


def _format_error(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for err in exc.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        # Cross-field checks run on the whole file and name their own field at the start of the message.
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(source, exc)) from None


def load_config(path: str | os.PathLike[str]) -> Config:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    return parse_config(data, str(p))
