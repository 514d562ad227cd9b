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


class UsageRow(TypedDict):
    id: int
    request_id: str
    created_at: float
    key_id: str | None
    account_id: str | None
    model: str | None
    provider: str | None
    deployment: str | None
    status: int
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
    request_body: Any
    response_body: Any


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
    by: Literal["day", "model", "key", "account", "tag"]
    data: list[UsageTotal]


class AccessToken(TypedDict):
    object: Literal["access_token"]
    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    expires_at: int
    scopes: list[str]
    key_id: str | None
