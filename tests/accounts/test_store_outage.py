"""PostgreSQL unreachable: the admin API and key lookups answer 503 in the caller's dialect, never a 500."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import httpx
import pytest

from inferplex.store.postgres import ADVISORY_LOCK, PostgresDatabase
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway_server import GatewayServer


def chat(server: GatewayServer, key: str, model: str = "priced") -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})


def eventually(call: Callable[[], httpx.Response], status: int, seconds: float = 10) -> httpx.Response:
    """What `call` answers once it answers `status` (connections broken by the outage are replaced on use)."""
    deadline = time.monotonic() + seconds
    while True:
        r = call()
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_admin_calls_and_key_lookups_answer_503_while_postgresql_is_unreachable(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with TcpProxy(5432) as proxy:
        url = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        with GatewayServer(billing_config(fake_openai, tmp_path, url)) as server:
            admin = Admin(server.url, server.master_key)
            created = admin.create_key(credits_micros=1_000_000)
            key, account = created["key"], created["account_id"]
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                proxy.cut()
                refused = [
                    admin.client.post("/admin/keys", json={"name": "during the outage"}),
                    admin.client.get("/admin/keys"),
                    admin.client.post(f"/admin/accounts/{account}/credits", json={"amount_micros": 5}),
                    chat(server, key),  # its key was never looked up, so it is not kept
                ]
                for r in refused:
                    assert r.status_code == 503, r.text
                    assert r.json()["error"] == {
                        "message": "The gateway's database cannot be reached right now; try again shortly.",
                        "type": "api_error",
                        "param": None,
                        "code": "store_unavailable",
                    }
                messages = httpx.post(
                    f"{server.url}/v1/messages",
                    json={"model": "priced", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
                    headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                )
                assert messages.status_code == 503
                assert messages.json()["type"] == "error" and messages.json()["error"]["type"] == "api_error"
                assert chat(server, server.master_key).status_code == 200  # the master key needs no database
            assert "Traceback" not in caplog.text and "unexpected error" not in caplog.text
            assert "the database cannot be reached" in caplog.text
            assert key not in caplog.text
            proxy.restore()
            assert eventually(lambda: admin.client.post("/admin/keys", json={"name": "after"}), 201).status_code == 201
            assert eventually(lambda: chat(server, key), 200).status_code == 200
            balance = admin.account(account)["balance_micros"]
            assert balance == sum(e["amount_micros"] for e in admin.ledger(account))  # nothing half-written
            admin.close()


def test_a_migration_may_outlast_the_store_deadline(pg_url: str) -> None:
    """The deadline bounds each call a request or an admin makes, not the start-up migration: a replica
    waiting for another's migration (the advisory lock), or building an index on a long table, must not
    fail to start because that takes longer than `storage.timeout_s`."""

    async def run() -> None:
        other = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        await other.execute("SELECT pg_advisory_lock($1)", ADVISORY_LOCK)  # another replica migrating
        db = PostgresDatabase(pg_url, timeout_s=0.2)
        try:
            migrating = asyncio.create_task(db.migrate())
            await asyncio.sleep(1.0)
            assert not migrating.done()  # waits for the lock, past the deadline
            await other.execute("SELECT pg_advisory_unlock($1)", ADVISORY_LOCK)
            await asyncio.wait_for(migrating, 30)
        finally:
            await other.close()
            await db.aclose()

    asyncio.run(run())


def _sql(*statements: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def test_postgresql_refusing_more_connections_is_a_503_not_a_500(
    fake_openai: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ "Too many clients" (SQLSTATE 53300: max_connections, or a role's limit, reached by other servers or
    workers) is the database being unavailable for now, not a bug: 503, and 200 again once it takes them."""
    role = f"inferplex_limited_{time.time_ns()}"
    _sql(f'CREATE ROLE "{role}" LOGIN', f'CREATE DATABASE "{role}" OWNER "{role}"')
    try:
        url = f"postgresql+asyncpg://{role}@127.0.0.1:5432/{role}"
        with GatewayServer(billing_config(fake_openai, tmp_path, url)) as server:
            admin = Admin(server.url, server.master_key)
            key = admin.create_key(credits_micros=1_000_000)["key"]
            with caplog.at_level(logging.WARNING):
                _sql(
                    f'ALTER ROLE "{role}" CONNECTION LIMIT 0',
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
                )
                refused = eventually(lambda: chat(server, key), 503)  # its key was never looked up
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["code"] == "store_unavailable"
                assert eventually(lambda: admin.client.get("/admin/keys"), 503).status_code == 503
            assert "Traceback" not in caplog.text and "unexpected error" not in caplog.text
            _sql(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
            assert eventually(lambda: chat(server, key), 200).status_code == 200
            admin.close()
    finally:
        _sql(f'DROP DATABASE IF EXISTS "{role}" WITH (FORCE)', f'DROP ROLE IF EXISTS "{role}"')
