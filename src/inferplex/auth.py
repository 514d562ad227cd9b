"""Caller authentication: who is calling, and what they may do.

The `Principal` is what every later stage asks ("may this caller use this model?", "which account pays?").
Until key management lands, one master key guards every route but /health and yields an all-powerful
principal. Keys are compared as SHA-256 digests with `hmac.compare_digest`, so neither the comparison time
nor an error message can leak the key. Both `Authorization: Bearer` and Anthropic's `x-api-key` are accepted.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from starlette.datastructures import Headers
from starlette.requests import Request

from inferplex.accounts.limits import NO_LIMITS, LimitPlan
from inferplex.errors import PermissionDenied, Unauthenticated

# The last five are Inferada's published scopes: its processors (processors/base.py SCOPES), its pii and
# language routes (dialects/inferada.py) and its audio routes (stt, tts: dialects/inferada_audio.py). `metrics`
# reads GET /metrics (observe/, issue 24) and nothing else.
ALL_SCOPES = frozenset(
    {"chat", "embeddings", "images", "audio", "video", "models:read", "admin", "pii", "language", "completions",
     "stt", "tts", "metrics"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str
    account_id: str | None = None
    name: str = ""
    scopes: frozenset[str] = ALL_SCOPES
    allowed_models: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    # The key's and its account's limits, worked out once per key record (accounts/limits.py), so the guard
    # admits a request without reading the record again.
    limits: LimitPlan = NO_LIMITS
    # The key's processor lists as the admin API stored them (names or objects): `default_processors` run
    # when a request names none, `enforced_processors` always (processors/spec.py). Kept unparsed: most
    # keys have none, and a request parses them only when they are there.
    default_processors: tuple[Any, ...] = ()
    enforced_processors: tuple[Any, ...] = ()
    # What a token minted by this principal is bound to (accounts/tokens.py): a fingerprint of the secret
    # it authenticated with, so that secret's rotation ends the token. Empty: it may not mint tokens.
    binding: str = ""

    def may_use(self, model: str) -> bool:
        return not self.allowed_models or any(fnmatch.fnmatchcase(model, p) for p in self.allowed_models)

    def require_scope(self, scope: str) -> None:
        if scope not in self.scopes and "admin" not in self.scopes:
            raise PermissionDenied(f"This key does not have the '{scope}' scope.", code="scope_not_allowed")

    def require_model(self, model: str) -> None:
        if not self.may_use(model):
            raise PermissionDenied(
                f"This key may not use the model `{model}`.", param="model", code="model_not_allowed"
            )


MASTER = Principal(key_id="master", name="master key")


def effective_scopes(scopes: frozenset[str]) -> frozenset[str]:
    """What a set of scopes allows: `admin` allows every scope (as `require_scope` treats it), so narrowing
    an admin's token to `chat` leaves it `chat`, not nothing."""
    return ALL_SCOPES if "admin" in scopes else scopes


def credential(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if value is not None:
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "The Authorization header must be of the form `Bearer <key>`.", code="malformed_credentials"
            )
        return token.strip()
    return headers.get("x-api-key") or None


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class Authenticator(Protocol):
    async def authenticate(self, request: Request) -> Principal: ...

    async def principal_for(self, key_id: str, scopes: frozenset[str] | None = None) -> Principal:
        """The principal of a key, found by its id, for work done later on its behalf (a background response,
        a batch's lines): a key revoked or expired since is refused (`Unauthenticated`), and `scopes` (the
        ones the work was started with) narrow it, so the work never carries more than its caller had."""
        ...


class MasterKeyAuth:
    def __init__(self, key: str) -> None:
        self._digest = digest(key)

    def matches(self, token: str) -> bool:
        return self.matches_digest(digest(token))

    def matches_digest(self, token_digest: bytes) -> bool:
        """For a caller that needs the token's digest anyway (an API key is looked up by it)."""
        return hmac.compare_digest(token_digest, self._digest)

    async def authenticate(self, request: Request) -> Principal:
        token = credential(request.headers)
        if token is None:
            raise Unauthenticated(
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.", code="missing_api_key"
            )
        if not self.matches(token):
            raise Unauthenticated("Incorrect API key provided.")
        return MASTER

    async def principal_for(self, key_id: str, scopes: frozenset[str] | None = None) -> Principal:
        if key_id != MASTER.key_id:
            raise Unauthenticated("This API key no longer exists.")
        return MASTER if scopes is None else replace(MASTER, scopes=MASTER.scopes & effective_scopes(scopes))
