"""Short-lived bearer tokens (OneInfer's token exchange): `ipxt.<payload>.<signature>`.

The payload is base64url JSON `{"kid": key id, "scp": scopes, "exp": unix seconds, "bnd": binding}`; the
signature is HMAC-SHA256 over `ipxt.<payload>` with the server secret. A token carries no authority of its
own: every use re-reads its key, so revoking or expiring the key kills its tokens at once, on every replica.

The binding ties a token to the secret it was minted with (an API key's current secret, or the master key):
an HMAC of that secret's SHA-256 under the server secret, checked on every use. So rotating a key, or
changing the master key and restarting, ends the tokens minted with the old secret at once, though the key
id (or `master`) they name is still valid. A token without a binding (minted before bindings existed) is
refused: tokens live at most `token_ttl_s`, so this costs a re-exchange, never access.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

TOKEN_PREFIX = "ipxt."


@dataclass(frozen=True, slots=True)
class Claims:
    key_id: str
    scopes: frozenset[str]
    expires_at: int
    binding: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())


def binding(secret: bytes, credential_digest: str) -> str:
    """What a token minted with a credential carries, given that credential's SHA-256 (hex): it proves which
    secret minted the token without revealing anything about that secret to whoever holds the token."""
    return _b64(hmac.new(secret, b"binding:" + credential_digest.encode(), hashlib.sha256).digest()[:16])


def issue(secret: bytes, key_id: str, scopes: frozenset[str], expires_at: int, bound_to: str) -> str:
    payload = {"kid": key_id, "scp": sorted(scopes), "exp": expires_at, "bnd": bound_to}
    body = TOKEN_PREFIX + _b64(orjson.dumps(payload))
    return body + "." + _sign(secret, body)


def verify(secret: bytes, token: str, now: float) -> Claims | None:
    """The claims of a well-signed, unexpired token; None for anything else (never says which)."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    body, _, signature = token.rpartition(".")
    if not body or not hmac.compare_digest(signature.encode(), _sign(secret, body).encode()):
        return None
    try:
        data = orjson.loads(_unb64(body[len(TOKEN_PREFIX) :]))
        claims = Claims(str(data["kid"]), frozenset(data["scp"]), int(data["exp"]), str(data["bnd"]))
    except (ValueError, KeyError, TypeError):
        return None
    return claims if claims.expires_at > now else None


def load_secret(
    configured: str | None, data_dir: str, file: str = "token_secret", setting: str = "accounts.token_secret"
) -> bytes:
    """The configured secret, else one generated on first start and kept (0600) in the data directory as
    `file` (the token secret; the media store's URL signing key): replicas sharing a data directory share it."""
    if configured:
        return configured.encode()
    path = Path(data_dir) / file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
    for _ in range(100):  # another replica may have created the file an instant before writing it
        text = path.read_text().strip()
        if text:
            return text.encode()
        time.sleep(0.01)
    raise RuntimeError(f"{path} is empty: delete it or configure {setting}")
