"""Caller authentication. Until key management lands, one master key guards every route but /health.

Keys are compared as SHA-256 digests with `hmac.compare_digest`, so neither the comparison time nor an
exception message can leak the key. Both `Authorization: Bearer` and Anthropic's `x-api-key` are accepted.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.datastructures import Headers

from inferplex.errors import Unauthenticated


def credential(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if value is not None:
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("The Authorization header must be of the form `Bearer <key>`.")
        return token.strip()
    return headers.get("x-api-key") or None


class MasterKeyAuth:
    def __init__(self, key: str) -> None:
        self._digest = hashlib.sha256(key.encode()).digest()

    def check(self, headers: Headers) -> None:
        token = credential(headers)
        if token is None:
            raise Unauthenticated(
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.", code="missing_api_key"
            )
        if not hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self._digest):
            raise Unauthenticated("Incorrect API key provided.")
