"""Authentication with stored API keys and signed tokens, beside the master key.

Every credential is checked against its key's record on every request, and a replica uses a record it
kept only while the database says no key has changed since (store/key_cache.py), so a revocation, expiry
or rotation takes effect at once on every replica, for keys and for tokens minted from them. Errors never
echo the credential.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from starlette.requests import Request

from inferplex.accounts.keys import KEY_PREFIX, same_digest
from inferplex.accounts.limits import LimitPlan, Limits, rules_of
from inferplex.accounts.tokens import TOKEN_PREFIX, Claims, binding, verify
from inferplex.auth import MASTER, MasterKeyAuth, Principal, credential, digest, effective_scopes
from inferplex.errors import PermissionDenied, Unauthenticated
from inferplex.store.keys import AccountLimits, KeyRecord, KeyStore

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _invalid_token() -> Unauthenticated:
    """One answer for every bad token (forged, expired, or minted with a secret since rotated): never says which."""
    return Unauthenticated("The access token is invalid or has expired.", code="invalid_token")


def parse_networks(items: Sequence[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in items)


def _in(ip: str, networks: Sequence[Network]) -> bool:
    try:
        addr = ipaddress.ip_address(ip.strip())
    except ValueError:
        return False
    return any(addr in net for net in networks)


def client_ip(peer: str | None, forwarded_for: str | None, trusted: Sequence[Network]) -> str | None:
    """The caller's address: the peer, unless the peer is a trusted proxy; then the right-most
    X-Forwarded-For entry that is not itself a trusted proxy (entries further left are caller-supplied)."""
    if peer is None or not forwarded_for or not _in(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _in(hop, trusted):
            return hop
    return hops[0] if hops else peer


def principal_of(
    record: KeyRecord, account: AccountLimits, scopes: frozenset[str] | None = None, bound_to: str = ""
) -> Principal:
    """The key's principal; with `scopes` (a token's), narrowed to them: never more than the key holds."""
    key_scopes = frozenset(record.scopes)
    key_limits = Limits(
        record.rpm,
        record.tpm,
        record.max_concurrent,
        rules_of(record.limit_rules),
        rules_of(record.user_limit_rules),
    )
    limit_scopes = [(f"key:{record.id}", key_limits)]
    if record.account_id:
        account_limits = Limits(account.rpm, account.tpm, account.max_concurrent, rules_of(account.limit_rules))
        limit_scopes.append((f"acct:{record.account_id}", account_limits))
    return Principal(
        key_id=record.id,
        account_id=record.account_id,
        name=record.name,
        scopes=key_scopes if scopes is None else effective_scopes(key_scopes) & scopes,
        allowed_models=tuple(record.allowed_models),
        tags=tuple(record.tags),
        metadata=dict(record.metadata),
        limits=LimitPlan.of(limit_scopes),
        default_processors=tuple(record.default_processors),
        enforced_processors=tuple(record.enforced_processors),
        binding=bound_to,
    )


class KeyAuth:
    def __init__(self, master_key: str, keys: KeyStore, token_secret: bytes, trusted_proxies: Sequence[str]) -> None:
        self._master = MasterKeyAuth(master_key)
        # The master key's principal carries the fingerprint its tokens are bound to: after the master key
        # changes (and the gateway restarts), tokens minted with the old one no longer match it.
        self.master = replace(MASTER, binding=binding(token_secret, digest(master_key).hex()))
        self.keys = keys
        self.token_secret = token_secret
        self.trusted = parse_networks(trusted_proxies)
        self._principals: dict[tuple[int, frozenset[str] | None], tuple[object, Principal]] = {}
        self._master_tokens: dict[frozenset[str], Principal] = {}

    async def authenticate(self, request: Request) -> Principal:
        token = credential(request.headers)
        if token is None:
            raise Unauthenticated(
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.", code="missing_api_key"
            )
        raw_digest = digest(token)
        if self._master.matches_digest(raw_digest):
            return self.master
        now = time.time()
        claims: Claims | None = None
        if token.startswith(TOKEN_PREFIX):
            claims = verify(self.token_secret, token, now)
            if claims is None:
                raise _invalid_token()
            if claims.key_id == MASTER.key_id:
                return self._master_token(claims)
            found = await self.keys.by_id_with_account(claims.key_id)
        elif token.startswith(KEY_PREFIX):
            hex_digest = raw_digest.hex()  # key_digest(token), without hashing it twice
            found = await self.keys.by_hash(hex_digest)
            if found is not None and not same_digest(found[0].hash, hex_digest):
                found = None
        else:
            raise Unauthenticated("Incorrect API key provided.")
        if found is None:
            raise Unauthenticated("Incorrect API key provided.")
        record = found[0]
        self._check_live(record, now)
        self._check_ip(record, request)
        principal = self._principal(found, None if claims is None else claims.scopes)
        if claims is not None and not hmac.compare_digest(claims.binding, principal.binding):
            raise _invalid_token()  # minted with a secret the key no longer has (it was rotated)
        return principal

    async def principal_for(self, key_id: str, scopes: frozenset[str] | None = None) -> Principal:
        if key_id == MASTER.key_id:
            return self.master if scopes is None else replace(self.master, scopes=self.master.scopes & scopes)
        found = await self.keys.by_id_with_account(key_id)
        if found is None:
            raise Unauthenticated("This API key no longer exists.")
        self._check_live(found[0], time.time())
        return self._principal(found, scopes)

    def _master_token(self, claims: Claims) -> Principal:
        """A token minted with the master key: only if minted with the current one, and only its scopes."""
        if not hmac.compare_digest(claims.binding, self.master.binding):
            raise _invalid_token()
        principal = self._master_tokens.get(claims.scopes)
        if principal is None:
            principal = replace(self.master, scopes=self.master.scopes & claims.scopes)
            self._master_tokens[claims.scopes] = principal  # at most one per subset of ALL_SCOPES
        return principal

    def _principal(self, found: tuple[KeyRecord, AccountLimits], scopes: frozenset[str] | None) -> Principal:
        """`principal_of`, built once per key record: the key store hands back the very same record for as
        long as it keeps it (store/key_cache.py), so a changed key is a new record and a new principal."""
        memo = (id(found), scopes)
        kept = self._principals.get(memo)
        if kept is not None and kept[0] is found:
            return kept[1]
        principal = principal_of(*found, scopes, binding(self.token_secret, found[0].hash))
        if len(self._principals) >= 10_000:
            self._principals.clear()
        self._principals[memo] = (found, principal)  # holding `found` keeps its id from being reused
        return principal

    @staticmethod
    def _check_live(record: KeyRecord, now: float) -> None:
        if record.revoked_at is not None:
            raise Unauthenticated("This API key has been revoked.", code="revoked_api_key")
        if record.expires_at is not None and record.expires_at <= now:
            raise Unauthenticated("This API key has expired.", code="expired_api_key")

    def _check_ip(self, record: KeyRecord, request: Request) -> None:
        if not record.allowed_ips:
            return
        peer = request.client.host if request.client else None
        ip = client_ip(peer, request.headers.get("x-forwarded-for"), self.trusted)
        if ip is None or not _in(ip, parse_networks(record.allowed_ips)):
            raise PermissionDenied(
                f"This key may not be used from {ip or 'an unknown address'}.", code="ip_not_allowed"
            )


def describe(principal: Principal) -> dict[str, Any]:
    return {"key_id": principal.key_id, "account_id": principal.account_id, "scopes": sorted(principal.scopes)}
