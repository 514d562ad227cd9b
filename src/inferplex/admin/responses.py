"""What the admin API and the token exchange answer, as TypedDicts (the request bodies are `models.py`).

The handlers return the stores' plain dicts (`KeyRecord.public()`, `Account.public()`, ledger and usage
rows); these types describe them for `/openapi.json` and for the tests that validate real answers.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict


class LimitRuleView(TypedDict):
    """One of Inferada's rate-limit rules (docs/accounts.md)."""

    metric: Literal[
        "tokens", "prompt_tokens", "completion_tokens", "requests", "audio_duration_seconds", "characters_synthesised"
    ]
    period: Literal["minute", "day", "week", "month"]
    max: int
    per_request: bool


class ApiKey(TypedDict):
    object: Literal["api_key"]
    id: str
    prefix: str
    name: str
    account_id: str | None
    scopes: list[str]
    allowed_models: list[str]
    allowed_ips: list[str]
    tags: list[str]
    metadata: dict[str, Any]
    default_processors: list[Any]
    enforced_processors: list[Any]
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    limit_rules: list[LimitRuleView]
    user_limit_rules: list[LimitRuleView]
    monthly_cap_micros: int | None
    month_spent_micros: int  # this calendar month's (UTC) settled costs
    month_reserved_micros: int  # held by the key's requests in flight
    expires_at: float | None
    revoked_at: float | None
    created_at: float
    key: NotRequired[str]  # the secret: only when the key is created or rotated


class ApiKeyList(TypedDict):
    object: Literal["list"]
    data: list[ApiKey]


class Account(TypedDict):
    id: str
    object: Literal["account"]
    name: str
    balance_micros: int
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    limit_rules: list[LimitRuleView]
    created_at: float
    monthly_cap_micros: int | None
    month_spent_micros: int  # this calendar month's (UTC) settled costs
    month_reserved_micros: int  # held by the account's requests in flight


class AccountList(TypedDict):
    object: Literal["list"]
    data: list[Account]


class LedgerEntry(TypedDict):
    id: int
    account_id: str
    kind: str
    amount_micros: int
    request_id: str | None
    key_id: str | None
    note: str | None
    created_at: float


class LedgerList(TypedDict):
    object: Literal["list"]
    data: list[LedgerEntry]
    has_more: bool  # older entries remain: ask again with `before` = the last entry's id


class UsageColumns(TypedDict):
    """A usage row's columns, as the admin API's usage list and request log both answer them."""

    id: int
    request_id: str
    created_at: float
    key_id: str | None
    account_id: str | None
    model: str | None
    provider: str | None
    deployment: str | None
    route: str | None  # the route template it came in on
    operation: str | None  # the endpoint family: chat, embedding, image...
    status: int
    error_type: str | None  # closed and fault-prefixed: caller.*, policy.*, provider.*, gateway.*
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    estimated: int
    cost_micros: int
    total_ms: float | None
    upstream_ms: float | None
    ttft_ms: float | None
    queued_ms: float | None
    tags: list[str]
    end_user: str | None
    attempt_errors: int  # attempts that failed (a request that failed over succeeded with 1 or more)
    # what the response cache did: hit, semantic-hit, miss or bypass; None where caching did not apply
    cache: Literal["hit", "semantic-hit", "miss", "bypass"] | None


class UsageRow(UsageColumns):
    request_body: Any
    response_body: Any
    attempts: list[AttemptView] | None


class UsageList(TypedDict):
    object: Literal["list"]
    data: list[UsageRow]


class UsageTotal(TypedDict):
    group: str | None
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_micros: int


class UsageTotals(TypedDict):
    object: Literal["list"]
    by: Literal["day", "model", "key", "account", "tag", "cache"]
    data: list[UsageTotal]


class UsagePoint(TypedDict):
    """One bucket of a usage series, or (without `bucket`) a total over the range (store/rollups.py)."""

    bucket: NotRequired[int]  # the bucket's start, UNIX seconds (UTC)
    group: str | None  # the model, key id, account id or provider (`group_by`); None without one
    requests: int
    errors: int  # answered with a status of 400 or more
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_micros: int
    avg_ms: float | None  # mean total latency
    p50_ms: float | None  # percentiles of the total latency, from the rollups' histogram
    p95_ms: float | None
    p99_ms: float | None


class UsageSeries(TypedDict):
    object: Literal["list"]
    grain: Literal["hour", "day"]
    group_by: Literal["model", "key", "account", "provider"] | None
    since: int  # the range, rounded out to the grain
    until: int
    data: list[UsagePoint]
    totals: list[UsagePoint]


class AttemptView(TypedDict):
    """One try at one deployment (context.Attempt)."""

    deployment: str
    model: str
    outcome: Literal["ok", "error", "failed_midstream", "cancelled"]
    status: int | None
    error: str | None
    latency_ms: float


class RequestSummary(UsageColumns):
    cursor: str  # pass as `before` to list the requests after this one


class RequestList(TypedDict):
    object: Literal["list"]
    data: list[RequestSummary]
    has_more: bool
    before: str | None  # the cursor of the next page


class RequestDetail(RequestSummary):
    object: Literal["request"]
    attempts: list[AttemptView]
    request_body: Any  # only when logging bodies was on for the request
    response_body: Any
    ledger: list[LedgerEntry]  # the credit moves the request made


class CacheCounts(TypedDict):
    """Requests by what the response cache did for them, over the window (from the usage rows)."""

    requests: int  # the rows the cache applied to: every outcome below
    hits: int  # exact hits
    semantic_hits: int
    misses: int
    bypass: int  # the request asked not to be looked up (no-cache, bypass) or not to be stored
    hit_rate: float | None  # (hits + semantic hits) / (hits + semantic hits + misses); None before any lookup


class CacheModel(CacheCounts):
    model: str | None


class CacheWindow(CacheCounts):
    window_s: float
    since: float  # UNIX seconds: the window's start
    by_model: list[CacheModel]


class CacheState(TypedDict):
    """The response cache: its store now (this replica's view of it) and its hit rate over a window (every
    replica's requests, read from the usage rows)."""

    object: Literal["cache"]
    enabled: bool
    backend: str | None  # memory, sqlite, redis; None when the cache is off
    entries: int | None
    bytes: int | None
    vectors: int | None  # semantic index entries
    max_bytes: int | None  # the in-process backend's bound
    window: CacheWindow


class CachePurged(TypedDict):
    object: Literal["cache.purge"]
    purged: int  # entries removed


class AccessToken(TypedDict):
    object: Literal["access_token"]
    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    expires_at: int
    scopes: list[str]
    key_id: str | None
