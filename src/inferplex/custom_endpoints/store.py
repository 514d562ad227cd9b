"""The accounts' custom provider keys and custom endpoints, in the gateway's database (migration 0010).

Every read and write names the owning account, so no query can reach another account's rows: that is the
whole isolation, and it lives here, under the routes. A key's value is stored only sealed
(`sealing.Sealer`, bound to its account and row id, so renaming a key needs no re-sealing); an endpoint
points at its key by row id, so renaming the key keeps the endpoint working.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    MetaData,
    Select,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database

# Apart from store/tables.py's metadata: these tables belong to this feature and its one migration.
metadata = MetaData()

custom_api_keys = Table(
    "custom_api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), nullable=False),
    Column("name", String(200), nullable=False),
    Column("sealed", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("account_id", "name", name="uq_custom_api_keys_account_name"),
)

custom_endpoints = Table(
    "custom_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), nullable=False),
    Column("name", String(200), nullable=False),
    Column("url", Text, nullable=False),
    Column("key_id", String(40), nullable=False),
    Column("model_arg", String(200), nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("account_id", "name", name="uq_custom_endpoints_account_name"),
)

K, E = custom_api_keys.c, custom_endpoints.c
# Each account's keys and endpoints are few; the cap keeps a caller from filling the database (and the
# router's per-deployment state, one entry per endpoint called) with them.
MAX_PER_ACCOUNT = 100


@dataclass(frozen=True, slots=True)
class StoredKey:
    id: str
    name: str
    sealed: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A registered endpoint with its key's name and sealed value (`key_id` None: the key was deleted)."""

    name: str
    url: str
    model_arg: str
    key_name: str | None
    key_id: str | None
    sealed: str | None = field(repr=False)


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class CustomStore:
    """One account's keys and endpoints at a time: `owner` is the account id ('' for the operator's key)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- keys --------------------------------------------------------------------------------------------

    def new_key_id(self) -> str:
        return _new_id("cak_")

    async def add_key(self, owner: str, key_id: str, name: str, sealed: str) -> str:
        """'ok', 'taken' (the account has a key of that name) or 'full' (MAX_PER_ACCOUNT): only 'ok' writes."""

        def run(conn: Connection) -> str:
            refused = _refusal(conn, custom_api_keys, owner, name)
            if refused:
                return refused
            values = {"id": key_id, "account_id": owner, "name": name, "sealed": sealed, "created_at": time.time()}
            conn.execute(custom_api_keys.insert().values(values))
            return "ok"

        return await self.db.write(run)

    async def key(self, owner: str, name: str) -> StoredKey | None:
        query = select(K.id, K.name, K.sealed).where(K.account_id == owner, K.name == name)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else StoredKey(row.id, row.name, row.sealed)

    async def keys(self, owner: str) -> list[StoredKey]:
        query = select(K.id, K.name, K.sealed).where(K.account_id == owner).order_by(K.created_at, K.id)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [StoredKey(r.id, r.name, r.sealed) for r in rows]

    async def rename_key(self, owner: str, name: str, new_name: str) -> str:
        """'ok', 'missing' (no such key) or 'taken' (the new name is in use)."""
        return await self.db.write(lambda conn: _rename(conn, custom_api_keys, owner, name, new_name))

    async def delete_key(self, owner: str, name: str) -> bool:
        """Deletes the key; endpoints that used it remain, and answer 404 until given a key again."""
        statement = delete(custom_api_keys).where(K.account_id == owner, K.name == name)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    # ---- endpoints ---------------------------------------------------------------------------------------

    async def add_endpoint(self, owner: str, name: str, url: str, key_id: str, model_arg: str) -> str:
        """As `add_key`: 'ok', 'taken' or 'full'."""

        def run(conn: Connection) -> str:
            refused = _refusal(conn, custom_endpoints, owner, name)
            if refused:
                return refused
            values = {
                "id": _new_id("cep_"),
                "account_id": owner,
                "name": name,
                "url": url,
                "key_id": key_id,
                "model_arg": model_arg,
                "created_at": time.time(),
            }
            conn.execute(custom_endpoints.insert().values(values))
            return "ok"

        return await self.db.write(run)

    def _endpoints(self, owner: str, name: str | None = None) -> Select[Any]:
        joined = custom_endpoints.outerjoin(custom_api_keys, (K.id == E.key_id) & (K.account_id == E.account_id))
        query = select(E.name, E.url, E.model_arg, K.name.label("key_name"), K.id.label("key_id"), K.sealed)
        query = query.select_from(joined).where(E.account_id == owner).order_by(E.created_at, E.id)
        return query if name is None else query.where(E.name == name)

    async def endpoint(self, owner: str, name: str) -> Endpoint | None:
        query = self._endpoints(owner, name)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else Endpoint(*row)

    async def endpoints(self, owner: str) -> list[Endpoint]:
        query = self._endpoints(owner)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [Endpoint(*r) for r in rows]

    async def rename_endpoint(self, owner: str, name: str, new_name: str) -> str:
        return await self.db.write(lambda conn: _rename(conn, custom_endpoints, owner, name, new_name))

    async def delete_endpoint(self, owner: str, name: str) -> bool:
        statement = delete(custom_endpoints).where(E.account_id == owner, E.name == name)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))


def _refusal(conn: Connection, table: Table, owner: str, name: str) -> str | None:
    c = table.c
    if conn.execute(select(c.id).where(c.account_id == owner, c.name == name)).first() is not None:
        return "taken"
    count = conn.execute(select(func.count()).select_from(table).where(c.account_id == owner)).scalar_one()
    return "full" if count >= MAX_PER_ACCOUNT else None


def _rename(conn: Connection, table: Table, owner: str, name: str, new_name: str) -> str:
    c = table.c
    if conn.execute(select(c.id).where(c.account_id == owner, c.name == name)).first() is None:
        return "missing"
    if name != new_name and conn.execute(select(c.id).where(c.account_id == owner, c.name == new_name)).first():
        return "taken"
    conn.execute(update(table).where(c.account_id == owner, c.name == name).values(name=new_name))
    return "ok"
