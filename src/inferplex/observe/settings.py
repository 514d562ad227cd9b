"""The operator-side sections of the configuration: `observability` (metrics, traces, request logs),
`console` (the admin web console) and `alerts` (webhooks). Kept here, not in config.py, so each part's
settings sit beside the code that reads them; config.py only hangs them on `Config`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AlertEvent = Literal["budget", "breaker", "error_rate"]
ALERT_EVENTS: tuple[AlertEvent, ...] = ("budget", "breaker", "error_rate")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricsConfig(_Strict):
    # `GET /metrics` on the gateway's own port, for callers with the `metrics` scope (or admin)
    enabled: bool = True
    # "host:port": also serve /metrics, unauthenticated, on a separate listener that only the scraper can reach
    listen: str | None = Field(None, pattern=r"^[^\s:]*:[0-9]{1,5}$")
    # answer `GET /metrics` on the gateway's own port (scope-protected); false with `listen`: only there
    gateway_route: bool = True
    # label per-key series with the key id (off: key ids are unbounded; an operator with few keys may want them)
    key_labels: bool = False


class TracingConfig(_Strict):
    enabled: bool = False
    # OTLP over HTTP (protobuf): the collector's traces URL, e.g. http://127.0.0.1:4318/v1/traces
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    headers: dict[str, str] = Field(default_factory=dict)
    service_name: str = "inferplex"
    sample_ratio: float = Field(1.0, ge=0, le=1)
    # prompt and completion content on spans (gen_ai.input.messages / gen_ai.output.messages): off by default
    capture_content: bool = False
    # how long spans may wait in the batch before export, and the batch's size
    export_interval_s: float = Field(2.0, gt=0, le=60)
    max_batch: int = Field(512, ge=1, le=100_000)


class RequestLogConfig(_Strict):
    # one JSON line per request (observe/access_log.py), written by a thread of its own, never by the event loop
    enabled: bool = False
    # where the lines go: "stdout", "stderr" or a file path (appended to; reopened when rotated away)
    destination: str = "stdout"
    # the response body in the line (never a key): off unless the operator turns it on
    bodies: bool = False
    # lines are handed to the writer thread at most this often (and at once past 64 KiB)
    flush_s: float = Field(0.1, gt=0, le=10)


class ObservabilityConfig(_Strict):
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    request_log: RequestLogConfig = Field(default_factory=RequestLogConfig)


class ConsoleConfig(_Strict):
    # the admin web console at /ui
    enabled: bool = True
    session_ttl_s: int = Field(12 * 3600, ge=60, le=30 * 86400)
    # mark the session cookie Secure (set it when the console is served over HTTPS, as it should be)
    secure_cookie: bool = False
    # origins (scheme://host[:port]) whose forms the console also accepts, besides the Host the request
    # names: the public origin, behind a proxy that rewrites Host
    allowed_origins: list[str] = Field(default_factory=list)


class WebhookConfig(_Strict):
    # a stable name for the hook: deliveries waiting in the database find their hook by it (default: a
    # digest of the URL, so changing the URL of an unnamed hook orphans what it had queued)
    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    # the URL, or an env:/file: reference to it (a Slack webhook URL is itself a secret); references are
    # resolved when the gateway starts (observe/alerts.py)
    url: str = Field(min_length=1, pattern=r"^(https?://|env:|file:)")
    # HMAC-SHA256 key of the Standard Webhooks signature, referenced as every secret is (env:NAME or
    # file:PATH, never inlined); "whsec_<base64>" is decoded as Standard Webhooks does, any other value used
    # as its UTF-8 bytes. Without one, deliveries are unsigned
    secret: str | None = Field(None, pattern=r"^(env|file):.")
    # "inferplex": the signed JSON event; "slack": Slack's incoming-webhook body ({"text": ...}), which
    # Slack, Mattermost, Discord's /slack endpoint and most chat tools accept
    format: Literal["inferplex", "slack"] = "inferplex"
    # which events go to this hook: budget, breaker, error_rate (all by default)
    events: list[AlertEvent] = Field(default_factory=lambda: list(ALERT_EVENTS))


class ErrorRateConfig(_Strict):
    # alert when, over `window_s`, at least `min_requests` requests ran and more than `threshold` of them failed
    # (provider or gateway faults: a caller's own 4xx never counts)
    window_s: float = Field(60.0, gt=0)
    threshold: float = Field(0.2, gt=0, le=1)
    min_requests: int = Field(20, ge=1)


class AlertsConfig(_Strict):
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    # fractions of a budget (an account's or key's monthly cap) that raise an alert once per month each
    budget_thresholds: list[float] = Field(default_factory=lambda: [0.5, 0.8, 1.0])
    error_rate: ErrorRateConfig = Field(default_factory=ErrorRateConfig)
    # a delivery that fails is tried again with backoff, up to this many times in all
    max_attempts: int = Field(8, ge=1, le=100)
    timeout_s: float = Field(5.0, gt=0, le=60)
    # the wait after a failed try: retry_initial_s, doubling each time, at most retry_max_s (plus 10% jitter)
    retry_initial_s: float = Field(5.0, gt=0)
    retry_max_s: float = Field(3600.0, gt=0)
    # how often each replica looks for due deliveries (at once when it raised an alert itself)
    tick_s: float = Field(1.0, gt=0, le=60)
    # how often the month's spend of the accounts and keys that spent since the last look is read
    budget_check_s: float = Field(5.0, gt=0, le=3600)
    # how often every capped account and key is looked at (spend of batches, video jobs, other replicas)
    budget_sweep_s: float = Field(300.0, gt=0)
    # a deployment whose breaker stays open (re-opened after failed probes) alerts again at most this often
    breaker_repeat_s: float = Field(900.0, gt=0)
    # delivered and abandoned deliveries (and their tries) are deleted after this long
    retention_s: float = Field(30 * 86400.0, gt=0)
