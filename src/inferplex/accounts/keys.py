"""API key secrets: how they look, and the only form in which they are stored (a SHA-256 digest).

A key is `ipx-` followed by 43 URL-safe characters (256 bits of entropy), so an unsalted SHA-256 is enough:
nobody can brute-force the preimage. The digest is the lookup index; the final comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "ipx-"


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def key_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def display_prefix(secret: str) -> str:
    """The first few characters, shown in listings so a person can tell keys apart (never enough to use)."""
    return secret[:8]


def same_digest(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
