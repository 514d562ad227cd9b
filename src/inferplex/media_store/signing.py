"""The gateway's download URLs: HMAC-SHA256 over a file id and an expiry time, checked in constant time.

The key is the operator's (`media.signing_key`, a secret reference), else one generated on first start into
`<data_dir>/media_signing_key` (0600). Replicas that share a store must share the key (configure it, or
share the data directory), or a URL made by one is refused by another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from inferplex.accounts.tokens import load_secret

KEY_FILE = "media_signing_key"


def load_key(configured: str | None, data_dir: str) -> bytes:
    """The configured key, else the data directory's generated one (created once, even by replicas at once)."""
    return load_secret(configured, data_dir, KEY_FILE, "media.signing_key")


class Signer:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def signature(self, file_id: str, expires: int) -> str:
        mac = hmac.new(self._key, f"media:{file_id}:{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def check(self, file_id: str, expires: str, signature: str, now: float | None = None) -> str | None:
        """None when the signature is this key's for `file_id` and `expires` and that time is still ahead;
        else why not: 'invalid' or 'expired'."""
        if not expires.isdigit() or len(expires) > 12:
            return "invalid"
        expected = self.signature(file_id, int(expires))
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            return "invalid"
        if int(expires) <= (time.time() if now is None else now):
            return "expired"
        return None
