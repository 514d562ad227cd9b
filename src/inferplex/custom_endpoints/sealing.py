"""Provider keys sealed at rest: AES-256-GCM under a key derived from the operator's configured secret.

The database holds only `v1.<nonce+ciphertext>`: a copy of it (a backup, a replica, a leaked dump) reveals
no key without the configured secret, which lives elsewhere (`custom_endpoints.encryption_key`, an `env:` or
`file:` reference). Each sealed value is bound to its account and row id as associated data, so a ciphertext
copied onto another account's row does not open: the key is usable only where it was stored.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_VERSION = "v1."


class SealBroken(Exception):
    """A sealed value that does not open: another secret, or a row tampered with or moved."""


class Sealer:
    """Seals and opens the secrets of one gateway; the configured secret never leaves this object."""

    def __init__(self, secret: str) -> None:
        if len(secret) < 16:
            raise ValueError("custom_endpoints.encryption_key must be at least 16 characters")
        # HKDF, so any high-entropy string the operator configures becomes a proper 256-bit key.
        kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"inferplex custom provider keys v1")
        self._aead = AESGCM(kdf.derive(secret.encode()))

    def __repr__(self) -> str:
        return "Sealer(**********)"

    def seal(self, plaintext: str, owner: str, row: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), _bound(owner, row))
        return _VERSION + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, sealed: str, owner: str, row: str) -> str:
        if not sealed.startswith(_VERSION):
            raise SealBroken("unknown sealed format")
        try:
            raw = base64.urlsafe_b64decode(sealed[len(_VERSION) :])
            return self._aead.decrypt(raw[:12], raw[12:], _bound(owner, row)).decode()
        except (InvalidTag, ValueError):
            raise SealBroken("the sealed key does not open with this gateway's secret") from None


def _bound(owner: str, row: str) -> bytes:
    return f"{len(owner)}:{owner}\0{row}".encode()
