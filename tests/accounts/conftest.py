"""Fixtures for accounts, limits and billing: a fresh PostgreSQL database per test module, a Redis key prefix
per test, and gateways with keys stored in SQLite or PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis

from inferplex.store.backend import Database
from inferplex.store.engine import open_database
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def _pg(statement: str) -> None:
    """Run one statement on the server (in a thread of its own: callers may be inside an event loop)."""

    async def run() -> None:
        conn = await asyncpg.connect(PG_ADMIN)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


@contextmanager
def own_database(prefix: str = "inferplex_test_") -> Iterator[str]:
    """A PostgreSQL database of our own (`<prefix><random>`), dropped afterwards: its URL."""
    name = prefix + secrets.token_hex(6)
    _pg(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        _pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with own_database() as url:
        yield url


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = f"inferplex_test:{secrets.token_hex(6)}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def restart_redis_scripts() -> int:
    """What a Redis restart does to the gateway's scripts: forget them all, and close every connection whose
    last command ran one (so connections that only do other work are left alone). Returns how many closed."""
    server = redis.Redis.from_url(REDIS_URL)
    try:
        server.script_flush()
        scripted = [c["addr"] for c in server.client_list() if c.get("cmd") in ("evalsha", "eval")]
        for addr in scripted:
            server.client_kill(addr)
        return len(scripted)
    finally:
        server.close()


def sqlite_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'inferplex.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
async def migrated_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A store on each engine, migrated to head: a fresh SQLite file, or the module's PostgreSQL database."""
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    database = open_database(url)
    await database.migrate()
    yield database
    await database.aclose()


def billing_config(fake: FakeOpenAI, tmp: Path, database_url: str | None = None, **extra: Any) -> dict[str, Any]:
    """The shared test config plus our storage, a price list we can reason about, and `sleep-*` models.

    `priced` costs 0 per input token and 3 micro-USD per output token, so a request's cost is exactly
    3 x completion tokens; `sleep-300` holds each request 300 ms at the upstream."""
    config = openai_config(fake, data_dir=str(tmp))
    config["models"] += [
        {
            "name": "priced",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "max_output": 100,
            "pricing": {"input": "0", "output": "3"},
        },
        {
            "name": "sleep-300",
            "deployments": [{"provider": "fake", "model": "sleep-300"}],
            "pricing": {"input": "0", "output": "3"},
        },
    ]
    config["storage"] = {"database_url": database_url or sqlite_url(tmp), **extra.pop("storage", {})}
    config["accounts"] = extra.pop("accounts", {})
    config.update(extra)
    return config


class Admin:
    """The admin API, as an operator's script would call it."""

    def __init__(self, base: str, master_key: str) -> None:
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {master_key}"}, timeout=30)

    def create_key(self, **body: Any) -> dict[str, Any]:
        r = self.client.post("/admin/keys", json={"name": "test", **body})
        assert r.status_code == 201, r.text
        data: dict[str, Any] = r.json()
        return data

    def account(self, account_id: str) -> dict[str, Any]:
        r = self.client.get(f"/admin/accounts/{account_id}")
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data

    def ledger(self, account_id: str) -> list[dict[str, Any]]:
        r = self.client.get(f"/admin/accounts/{account_id}/ledger")
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()["data"]
        return rows

    def usage(self, **params: Any) -> list[dict[str, Any]]:
        r = self.client.get("/admin/usage", params=params)
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()["data"]
        return rows

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def admin(server: Any) -> Iterator[Admin]:
    """The admin API of the module's own `server` gateway (each test module defines that fixture)."""
    a = Admin(server.url, server.master_key)
    yield a
    a.close()
