"""API keys as stored: a SHA-256 hex digest of the secret, never the secret itself."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from inferplex.store import tables as t
from inferplex.store.backend import Database
from inferplex.store.key_cache import KeyCache


@dataclass(slots=True)
class KeyRecord:
    id: str
    hash: str
    prefix: str
    name: str
    account_id: str | None = None
    scopes: list[str] = field(default_factory=list)
    allowed_models: list[str] = field(default_factory=list)
    allowed_ips: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # Processor specs (names or {"name": ..., options}): run when a request names none / always.
    default_processors: list[Any] = field(default_factory=list)
    enforced_processors: list[Any] = field(default_factory=list)
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    # Inferada's rate-limit rules (accounts/limits.py), as JSON; the user rules apply to each end user.
    limit_rules: list[Any] = field(default_factory=list)
    user_limit_rules: list[Any] = field(default_factory=list)
    monthly_cap_micros: int | None = None  # the key's monthly spending cap (store/moves.py)
    expires_at: float | None = None
    revoked_at: float | None = None
    created_at: float = field(default_factory=time.time)

    def public(self) -> dict[str, Any]:
        """What the admin API shows: everything but the digest."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "hash"}


@dataclass(frozen=True, slots=True)
class AccountLimits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    limit_rules: tuple[Any, ...] = ()


_COLUMNS = [f.name for f in fields(KeyRecord)]
# What `update` may change: everything but the identity, the secret's digest, the account and the lifecycle
# (revoke and rotate have operations of their own).
EDITABLE = frozenset(_COLUMNS) - {"id", "hash", "prefix", "account_id", "revoked_at", "created_at"}


def _key_with_account(where: Any) -> Any:
    """Built once at import: building a statement costs more than running this one on SQLite."""
    a = t.accounts
    return (
        select(
            t.api_keys,
            a.c.rpm.label("a_rpm"),
            a.c.tpm.label("a_tpm"),
            a.c.max_concurrent.label("a_mc"),
            a.c.limit_rules.label("a_rules"),
        )
        .outerjoin(a, a.c.id == t.api_keys.c.account_id)
        .where(where)
    )


_BY_HASH = _key_with_account(t.api_keys.c.hash == bindparam("v"))
_BY_ID = _key_with_account(t.api_keys.c.id == bindparam("v"))


def _record(row: Any) -> KeyRecord:
    return _from_mapping(row._mapping)


def _from_mapping(m: Any) -> KeyRecord:
    return KeyRecord(**{c: m[c] for c in _COLUMNS})


class KeyStore:
    def __init__(self, db: Database, cache: KeyCache | None = None) -> None:
        self.db = db
        self.cache = cache
        # The per-request lookups run on the driver directly (store/driver.py).
        self._driver = {q: db.driver_statement(q) for q in (_BY_HASH, _BY_ID)}

    async def create(self, record: KeyRecord) -> None:
        values = {c: getattr(record, c) for c in _COLUMNS}
        await self.db.write(lambda conn: conn.execute(insert(t.api_keys).values(values)))

    async def by_hash(self, digest: str) -> tuple[KeyRecord, AccountLimits] | None:
        """The key with this digest and its account's limits: one indexed query per authentication."""
        return await self._with_account(_BY_HASH, digest)

    async def by_id_with_account(self, key_id: str) -> tuple[KeyRecord, AccountLimits] | None:
        return await self._with_account(_BY_ID, key_id)

    async def _with_account(self, query: Any, value: str) -> tuple[KeyRecord, AccountLimits] | None:
        cache = self.cache
        generation = None if cache is None else cache.now()
        if cache is not None and generation is not None:
            found: tuple[KeyRecord, AccountLimits] | None = cache.get((query, value), generation)
            if found is not None:
                return found
        m = await self.db.fetchrow(self._driver[query], {"v": value})
        if m is None:
            return None
        found = _from_mapping(m), AccountLimits(m["a_rpm"], m["a_tpm"], m["a_mc"], tuple(m["a_rules"] or ()))
        if cache is not None and generation is not None:
            cache.put((query, value), found, generation)
        return found

    async def get(self, key_id: str) -> KeyRecord | None:
        query = select(t.api_keys).where(t.api_keys.c.id == key_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _record(row)

    async def list(self, account_id: str | None = None) -> list[KeyRecord]:
        query = select(t.api_keys).order_by(t.api_keys.c.created_at, t.api_keys.c.id)
        if account_id is not None:
            query = query.where(t.api_keys.c.account_id == account_id)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [_record(r) for r in rows]

    async def update(self, key_id: str, changes: dict[str, Any]) -> KeyRecord | None:
        """Apply every change or none: a field that is not editable is a caller's bug, never skipped quietly."""
        refused = sorted(set(changes) - EDITABLE)
        if refused:
            raise ValueError(f"not editable: {', '.join(refused)}")
        values = dict(changes)
        if values:
            statement = update(t.api_keys).where(t.api_keys.c.id == key_id).values(values)
            await self.db.write(lambda conn: conn.execute(statement))
        return await self.get(key_id)

    async def revoke(self, key_id: str) -> KeyRecord | None:
        statement = (
            update(t.api_keys)
            .where(t.api_keys.c.id == key_id, t.api_keys.c.revoked_at.is_(None))
            .values(revoked_at=time.time())
        )
        await self.db.write(lambda conn: conn.execute(statement))
        return await self.get(key_id)

    async def rotate(self, key_id: str, digest: str, prefix: str) -> KeyRecord | None:
        """Replace the secret; the old one stops working at once (its digest no longer matches any row)."""
        statement = (
            update(t.api_keys)
            .where(t.api_keys.c.id == key_id, t.api_keys.c.revoked_at.is_(None))
            .values(hash=digest, prefix=prefix)
        )
        changed = await self.db.write(lambda conn: conn.execute(statement).rowcount)
        return await self.get(key_id) if changed else None
