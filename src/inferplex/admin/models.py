"""The admin API's request bodies: pydantic models with extra fields forbidden (also its OpenAPI schemas).

Whatever a body holds must be storable as it is on every engine, so both engines answer alike and a bad value
is a 400 naming its field, never a database error: integers are strict (`true` is not 1) and within the
BIGINT columns that keep them (store/tables.py), and no text holds NUL, which PostgreSQL cannot store.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from inferplex.accounts.limits import LimitRule
from inferplex.auth import ALL_SCOPES
from inferplex.errors import InvalidRequest
from inferplex.processors.base import Env, known_processors
from inferplex.processors.chain import build
from inferplex.processors.spec import parse_list

# A new key may do everything but administer and read /metrics (deployments, costs, other keys' ids there)
DEFAULT_SCOPES = sorted(ALL_SCOPES - {"admin", "metrics"})
INT64_MAX = 2**63 - 1  # BIGINT, the type of every integer column an admin writes


def invalid(exc: ValidationError) -> InvalidRequest:
    """A body's first validation error as the 400 that names its field (the API and the CLI say the same)."""
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first["loc"]) or None
    return InvalidRequest(f"Invalid {param or 'body'}: {first['msg']}.", param=param)


def nul_at(value: Any, where: str) -> str | None:
    """Where in `value` (a JSON value) the first NUL character is, as a path from `where`; None if nowhere.
    Iterative, so a deeply nested value cannot exhaust the stack."""
    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in str(key):
                    return f"{path} (a key)"
                stack.append((f"{path}.{key}", child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
    return None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _storable(cls, value: Any, info: Any) -> Any:
        where = nul_at(value, info.field_name)
        if where is not None:
            raise ValueError(f"{where} contains a NUL character, which cannot be stored")
        return value


def _not_null(value: Any) -> Any:
    """For a PATCH field that may be left out but not cleared (null would be stored, or refused by the
    database, instead of meaning anything)."""
    if value is None:
        raise ValueError("may be omitted but not null")
    return value


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
    """Unknown processor names, and options a processor refuses, are refused when the key is written:
    otherwise every later request of the key would be refused for them instead. Each processor is built
    once here with its options, as a request would build it (cheap: no model is loaded)."""
    if value is None:
        return value
    try:
        specs = parse_list(value, "processors")
    except InvalidRequest as err:
        raise ValueError(err.message) from None
    unknown = sorted({s.name for s in specs} - known_processors())
    if unknown:
        raise ValueError(f"unknown processor(s): {', '.join(unknown)} (known: {', '.join(sorted(known_processors()))})")
    try:
        build(specs, Env())
    except InvalidRequest as err:
        raise ValueError(err.message) from None
    return value


def _none_is_empty(value: Any) -> Any:
    """A rule list set to null clears it, as null clears `rpm`: the column itself holds a list."""
    return [] if value is None else value


class KeyLimits(_Body):
    """Limits of a key or an account; null (or omitted at creation): no limit."""

    rpm: int | None = Field(None, gt=0, le=INT64_MAX, description="requests per minute")
    tpm: int | None = Field(None, gt=0, le=INT64_MAX, description="tokens per minute")
    max_concurrent: int | None = Field(None, gt=0, le=INT64_MAX, description="requests in flight at once")
    monthly_cap_micros: int | None = Field(
        None, ge=0, le=INT64_MAX, description="micro-USD this may spend per calendar month (UTC); over it: 402"
    )
    limit_rules: list[LimitRule] = Field(
        default_factory=list, description="Inferada's rate-limit rules (docs/accounts.md); null: none"
    )

    _rules = field_validator("limit_rules", mode="before")(_none_is_empty)


class KeyCreate(KeyLimits):
    name: str = Field(min_length=1, max_length=200)
    account_id: str | None = Field(
        None, max_length=40, description="bill this account; omitted: a new account is created"
    )
    credits_micros: int = Field(
        0, ge=0, le=INT64_MAX, description="top up the (new or given) account by this many micro-USD"
    )
    scopes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCOPES))
    allowed_models: list[str] = Field(default_factory=list, description="glob patterns; empty: every model")
    allowed_ips: list[str] = Field(default_factory=list, description="addresses or CIDR blocks; empty: any")
    expires_at: float | None = Field(None, allow_inf_nan=False, description="UNIX seconds")
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    default_processors: list[str | dict[str, Any]] = Field(
        default_factory=list, description="processors run when a request names none (docs/processors.md)"
    )
    enforced_processors: list[str | dict[str, Any]] = Field(
        default_factory=list, description="processors every request runs; a request cannot switch them off"
    )
    user_limit_rules: list[LimitRule] = Field(
        default_factory=list, description="rules counted per end user (the request's `user`) of this key"
    )

    _scopes = field_validator("scopes")(_check_scopes)
    _ips = field_validator("allowed_ips")(_check_ips)
    _defaults = field_validator("default_processors")(_check_processors)
    _enforced = field_validator("enforced_processors")(_check_processors)


class KeyUpdate(KeyLimits):
    """Every field given is applied (store/keys.py `EDITABLE` holds exactly these); null clears a limit or
    the expiry, and is refused for the rest."""

    name: str | None = Field(None, min_length=1, max_length=200)
    scopes: list[str] | None = None
    allowed_models: list[str] | None = None
    allowed_ips: list[str] | None = None
    expires_at: float | None = Field(None, allow_inf_nan=False, description="UNIX seconds; null: never")
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    default_processors: list[str | dict[str, Any]] | None = None
    enforced_processors: list[str | dict[str, Any]] | None = None
    user_limit_rules: list[LimitRule] = Field(default_factory=list)

    _user_rules = field_validator("user_limit_rules", mode="before")(_none_is_empty)
    _required = field_validator(
        "name",
        "scopes",
        "allowed_models",
        "allowed_ips",
        "tags",
        "metadata",
        "default_processors",
        "enforced_processors",
        mode="before",
    )(_not_null)
    _scopes = field_validator("scopes")(_check_scopes)
    _ips = field_validator("allowed_ips")(_check_ips)
    _defaults = field_validator("default_processors")(_check_processors)
    _enforced = field_validator("enforced_processors")(_check_processors)


class AccountCreate(KeyLimits):
    name: str = Field(min_length=1, max_length=200)
    credits_micros: int = Field(0, ge=0, le=INT64_MAX)


class AccountUpdate(KeyLimits):
    name: str | None = Field(None, min_length=1, max_length=200)

    _required = field_validator("name", mode="before")(_not_null)


class CreditChange(_Body):
    amount_micros: int = Field(
        ge=-INT64_MAX,
        le=INT64_MAX,
        description="micro-USD added to the balance (negative: an adjustment down); refused if the balance "
        "would leave the 64-bit range",
    )
    kind: Literal["topup", "refund", "adjust"] = "topup"
    note: str | None = Field(None, max_length=500)


class TokenRequest(_Body):
    ttl_s: int | None = Field(None, gt=0, description="lifetime; at most the configured token_ttl_s")
    scopes: list[str] | None = Field(
        None, min_length=1, description="narrow the token to these of the caller's scopes (never widen them)"
    )

    _scopes = field_validator("scopes")(_check_scopes)


BODIES: dict[str, type[BaseModel]] = {
    m.__name__: m for m in (KeyCreate, KeyUpdate, AccountCreate, AccountUpdate, CreditChange, TokenRequest)
}
