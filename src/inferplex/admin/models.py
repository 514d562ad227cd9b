"""The admin API's request bodies: pydantic models with extra fields forbidden (also its OpenAPI schemas)."""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inferplex.auth import ALL_SCOPES

DEFAULT_SCOPES = sorted(ALL_SCOPES - {"admin"})


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_scopes(value: list[str] | None) -> list[str] | None:
    if value is not None:
        unknown = sorted(set(value) - ALL_SCOPES)
        if unknown:
            raise ValueError(f"unknown scopes {unknown} (known: {sorted(ALL_SCOPES)})")
    return value


def _check_ips(value: list[str] | None) -> list[str] | None:
    for item in value or ():
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR block") from None
    return value


def _check_processors(value: list[Any] | None) -> list[Any] | None:
    """Unknown processor names are refused when the key is written, not on every later request."""
    if value is None:
        return value
    from inferplex.errors import InvalidRequest
    from inferplex.processors.base import known_processors
    from inferplex.processors.spec import parse_list

    try:
        specs = parse_list(value, "processors")
    except InvalidRequest as err:
        raise ValueError(err.message) from None
    unknown = sorted({s.name for s in specs} - known_processors())
    if unknown:
        raise ValueError(f"unknown processor(s): {', '.join(unknown)} (known: {', '.join(sorted(known_processors()))})")
    return value


class KeyLimits(_Body):
    rpm: int | None = Field(None, gt=0, description="requests per minute")
    tpm: int | None = Field(None, gt=0, description="tokens per minute")
    max_concurrent: int | None = Field(None, gt=0, description="requests in flight at once")


class KeyCreate(KeyLimits):
    name: str = Field(min_length=1, max_length=200)
    account_id: str | None = Field(None, description="bill this account; omitted: a new account is created")
    credits_micros: int = Field(0, ge=0, description="top up the (new or given) account by this many micro-USD")
    scopes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCOPES))
    allowed_models: list[str] = Field(default_factory=list, description="glob patterns; empty: every model")
    allowed_ips: list[str] = Field(default_factory=list, description="addresses or CIDR blocks; empty: any")
    expires_at: float | None = Field(None, description="UNIX seconds")
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    default_processors: list[str | dict[str, Any]] = Field(
        default_factory=list, description="processors run when a request names none (docs/processors.md)"
    )
    enforced_processors: list[str | dict[str, Any]] = Field(
        default_factory=list, description="processors every request runs; a request cannot switch them off"
    )

    _scopes = field_validator("scopes")(_check_scopes)
    _ips = field_validator("allowed_ips")(_check_ips)
    _defaults = field_validator("default_processors")(_check_processors)
    _enforced = field_validator("enforced_processors")(_check_processors)


class KeyUpdate(KeyLimits):
    name: str | None = Field(None, min_length=1, max_length=200)
    scopes: list[str] | None = None
    allowed_models: list[str] | None = None
    allowed_ips: list[str] | None = None
    expires_at: float | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    default_processors: list[str | dict[str, Any]] | None = None
    enforced_processors: list[str | dict[str, Any]] | None = None

    _scopes = field_validator("scopes")(_check_scopes)
    _ips = field_validator("allowed_ips")(_check_ips)
    _defaults = field_validator("default_processors")(_check_processors)
    _enforced = field_validator("enforced_processors")(_check_processors)


class AccountCreate(KeyLimits):
    name: str = Field(min_length=1, max_length=200)
    credits_micros: int = Field(0, ge=0)


class AccountUpdate(KeyLimits):
    name: str | None = Field(None, min_length=1, max_length=200)


class CreditChange(_Body):
    amount_micros: int = Field(description="micro-USD added to the balance (negative: an adjustment down)")
    kind: Literal["topup", "refund", "adjust"] = "topup"
    note: str | None = Field(None, max_length=500)


class TokenRequest(_Body):
    ttl_s: int | None = Field(None, gt=0, description="lifetime; at most the configured token_ttl_s")
    scopes: list[str] | None = Field(None, description="narrow the token to these of the key's scopes")

    _scopes = field_validator("scopes")(_check_scopes)


BODIES: dict[str, type[BaseModel]] = {
    m.__name__: m for m in (KeyCreate, KeyUpdate, AccountCreate, AccountUpdate, CreditChange, TokenRequest)
}
