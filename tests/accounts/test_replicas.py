"""Two real gateway processes sharing PostgreSQL and Redis: limits and concurrency are global."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import yaml

from inferplex.store.postgres import ADMIN_POOL, BATCH_CONNECTION, USAGE_CONNECTION
from tests.accounts.conftest import REDIS_URL, Admin, billing_config, restart_redis_scripts
from tests.fakes.openai_upstream import FakeOpenAI
from tests.replicas import serve

MASTER = "ipx-replica-test-master"
POOL = 3


@pytest.fixture(scope="module")
def replicas(fake_openai: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("replicas")
    prefix = f"inferplex_test:{os.urandom(6).hex()}:"
    config = billing_config(
        fake_openai,
        tmp,
        pg_url,
        storage={"redis_url": REDIS_URL, "redis_prefix": prefix, "pool_size": POOL},
        accounts={"max_queue_wait_s": 20},
    )
    config["server"]["master_key"] = "env:INFERPLEX_TEST_MASTER"
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}
    with serve([path, path], env, prefix) as urls:  # both run the migrations, under the advisory lock
        yield urls


def _post(client: httpx.AsyncClient, url: str, key: str, model: str) -> object:
    return client.post(
        url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}"},
    )


def test_a_rate_limit_admits_exactly_n_across_both_replicas(replicas: list[str]) -> None:
    admin = Admin(replicas[0], MASTER)
    key = admin.create_key(credits_micros=100_000, rpm=7)["key"]
    admin.close()

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [_post(client, replicas[i % 2], key, "priced") for i in range(20)]
            return [r.status_code for r in await asyncio.gather(*calls)]  # type: ignore[attr-defined]

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 7 and statuses.count(429) == 13


def test_an_exact_budget_holds_across_both_replicas(replicas: list[str]) -> None:
    """Both replicas batch the reservations of their concurrent requests against one account: together they
    admit exactly what the balance covers (`priced` with max_tokens=2 reserves and costs 6 micro-USD)."""
    admin = Admin(replicas[0], MASTER)
    created = admin.create_key(credits_micros=300)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as client:
            calls = [_post(client, replicas[i % 2], created["key"], "priced") for i in range(200)]
            return await asyncio.gather(*calls)  # type: ignore[no-any-return]

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses].count(200) == 50
    assert {r.json()["error"]["code"] for r in responses if r.status_code != 200} == {"insufficient_credits"}
    entries = admin.ledger(created["account_id"])
    assert admin.account(created["account_id"])["balance_micros"] == 0 == sum(e["amount_micros"] for e in entries)
    kinds = [e["kind"] for e in entries]
    assert (kinds.count("reserve"), kinds.count("settle")) == (50, 50)
    admin.close()


def test_a_concurrency_limit_holds_across_both_replicas(replicas: list[str], fake_openai: FakeOpenAI) -> None:
    admin = Admin(replicas[1], MASTER)
    created = admin.create_key(credits_micros=100_000, max_concurrent=2)
    fake_openai.state.max_in_flight = 0

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=60) as client:
            calls = [_post(client, replicas[i % 2], created["key"], "sleep-300") for i in range(8)]
            return [r.status_code for r in await asyncio.gather(*calls)]  # type: ignore[attr-defined]

    statuses = asyncio.run(burst())
    assert statuses == [200] * 8
    assert fake_openai.state.max_in_flight == 2
    balance = admin.account(created["account_id"])["balance_micros"]
    assert balance == 100_000 - 8 * 6 == sum(e["amount_micros"] for e in admin.ledger(created["account_id"]))
    admin.close()


def test_under_a_burst_each_replica_keeps_to_its_connection_pool(replicas: list[str], pg_url: str) -> None:
    """No connection is opened beyond the pools (`storage.pool_size` for requests, plus the small admin pool)
    per replica: requests wait for a pooled connection instead of opening and closing extra ones."""
    import asyncpg

    admin = Admin(replicas[0], MASTER)
    key = admin.create_key(credits_micros=10**9)["key"]
    admin.close()
    database = pg_url.rsplit("/", 1)[1]

    async def run() -> tuple[list[int], int]:
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{database}")
        seen = 0
        stop = asyncio.Event()

        async def watch() -> None:
            nonlocal seen
            while not stop.is_set():
                query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
                seen = max(seen, await conn.fetchval(query, database))
                await asyncio.sleep(0.002)

        watcher = asyncio.create_task(watch())
        async with httpx.AsyncClient(timeout=60) as client:
            calls = [_post(client, replicas[i % 2], key, "priced") for i in range(120)]
            statuses = [r.status_code for r in await asyncio.gather(*calls)]  # type: ignore[attr-defined]
        stop.set()
        await watcher
        await conn.close()
        return statuses, seen

    statuses, seen = asyncio.run(run())
    assert statuses == [200] * 120
    # Per replica: the two pools, and three connections of their own (key changes' LISTEN, the ledger's
    # batches, the usage log's writer).
    assert 2 <= seen <= 2 * (POOL + ADMIN_POOL + 3)


def test_the_ledger_reconnects_when_postgresql_drops_its_connection(replicas: list[str], pg_url: str) -> None:
    """The ledger's batches run on a connection of their own: when PostgreSQL ends it (a restart, an admin's
    pg_terminate_backend), the next request opens another, and is neither refused nor billed twice."""
    admin = Admin(replicas[0], MASTER)
    created = admin.create_key(credits_micros=1_000)

    async def chat(n: int) -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [_post(client, replicas[i % 2], created["key"], "priced") for i in range(n)]
            return [r.status_code for r in await asyncio.gather(*calls)]  # type: ignore[attr-defined]

    assert asyncio.run(chat(4)) == [200] * 4
    asyncio.run(_terminate(pg_url, f"application_name = '{BATCH_CONNECTION}'", expect=2))
    assert asyncio.run(chat(4)) == [200] * 4
    entries = admin.ledger(created["account_id"])
    assert [e["kind"] for e in entries].count("reserve") == 8
    assert (
        admin.account(created["account_id"])["balance_micros"]
        == 1_000 - 8 * 6
        == sum(e["amount_micros"] for e in entries)
    )
    admin.close()


def test_no_usage_row_is_lost_when_postgresql_drops_the_writers_connection(replicas: list[str], pg_url: str) -> None:
    """Usage rows are appended with COPY on a connection of the writer's own: when PostgreSQL ends it, the
    batch that finds it gone is written again on a new one, and every request keeps its row."""
    admins = [Admin(url, MASTER) for url in replicas]
    created = admins[0].create_key(credits_micros=1_000)

    async def chat(n: int) -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [_post(client, replicas[i % 2], created["key"], "priced") for i in range(n)]
            return [r.status_code for r in await asyncio.gather(*calls)]  # type: ignore[attr-defined]

    def logged() -> list[dict[str, object]]:
        for a in admins:  # each replica writes what it has queued before it answers
            rows = a.usage(key_id=created["id"], limit=100)
        return rows

    assert asyncio.run(chat(4)) == [200] * 4
    assert len(logged()) == 4
    asyncio.run(_terminate(pg_url, f"application_name = '{USAGE_CONNECTION}'", expect=2))
    assert asyncio.run(chat(6)) == [200] * 6
    rows = logged()
    assert len(rows) == 10 and len({r["request_id"] for r in rows}) == 10
    assert all(r["status"] == 200 and r["cost_micros"] == 6 for r in rows)
    for a in admins:
        a.close()


def test_both_replicas_share_keys_and_see_a_revocation_at_once(replicas: list[str]) -> None:
    admin = Admin(replicas[0], MASTER)
    created = admin.create_key(credits_micros=100_000)
    token = httpx.post(replicas[0] + "/v1/auth/token", headers={"Authorization": f"Bearer {created['key']}"}).json()[
        "access_token"
    ]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(replicas[1] + "/v1/models", headers=headers).status_code == 200
    admin.client.post(f"/admin/keys/{created['id']}/revoke")
    assert httpx.get(replicas[1] + "/v1/models", headers=headers).status_code == 401
    admin.close()


def _models(url: str, key: str) -> int:
    return httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code


async def _sql(pg_url: str, statement: str, *args: object) -> None:
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def _terminate(pg_url: str, which: str, expect: int) -> None:
    """Terminate the `expect` connections `which` selects, and wait until PostgreSQL has closed them."""
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    who = f"FROM pg_stat_activity WHERE {which} AND datname = current_database()"
    try:
        assert await conn.fetchval("SELECT count(*) " + who) == expect
        await conn.execute("SELECT pg_terminate_backend(pid) " + who)
        for _ in range(500):  # PostgreSQL ends a terminated backend asynchronously
            if not await conn.fetchval("SELECT count(*) " + who):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the connections were not closed")
    finally:
        await conn.close()


async def _cut_notifications(pg_url: str) -> None:
    """Terminate the replicas' notification connections, and wait until PostgreSQL has closed them."""
    await _terminate(pg_url, "application_name = 'inferplex-key-changes'", expect=2)


def test_a_change_made_outside_the_gateways_reaches_both_at_once(replicas: list[str], pg_url: str) -> None:
    """Replicas keep key records between changes; a change by any writer (here SQL by hand) must still
    take effect on the very next request, also while a replica's notification connection is being cut."""
    admin = Admin(replicas[0], MASTER)
    first, second = admin.create_key(credits_micros=100_000), admin.create_key(credits_micros=100_000)
    for url in replicas * 2:  # looked up, then served from what each replica keeps
        assert _models(url, first["key"]) == 200 and _models(url, second["key"]) == 200
    asyncio.run(_sql(pg_url, "UPDATE api_keys SET scopes = '[\"chat\"]' WHERE id = $1", first["id"]))
    for url in replicas:
        r = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {first['key']}"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "scope_not_allowed"
    # Cut the notification connections, and change a key at once: no replica may serve its old record.
    asyncio.run(_cut_notifications(pg_url))
    asyncio.run(_sql(pg_url, "UPDATE api_keys SET revoked_at = 1 WHERE id = $1", second["id"]))
    assert [_models(url, second["key"]) for url in replicas] == [401, 401]
    time.sleep(0.5)  # reconnected by now: kept records are used again, and still dropped on a change
    assert [_models(url, first["key"]) for url in replicas * 2] == [403] * 4
    asyncio.run(_sql(pg_url, "UPDATE api_keys SET revoked_at = 1 WHERE id = $1", first["id"]))
    assert [_models(url, first["key"]) for url in replicas] == [401, 401]
    admin.close()


def test_db_upgrade_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"server": {"data_dir": str(tmp_path)}}))
    out = subprocess.run(
        [sys.executable, "-m", "inferplex", "db", "upgrade", "--config", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 0 and "newest schema" in out.stdout, out.stderr
    assert (tmp_path / "inferplex.db").exists()


def test_limits_hold_through_a_redis_restart(replicas: list[str]) -> None:
    """Redis drops every gateway connection that ran a limits script and forgets its scripts (what a restart
    does): the next requests are still counted, on both replicas, with nothing admitted unlimited."""
    admin = Admin(replicas[0], MASTER)
    key = admin.create_key(credits_micros=100_000, rpm=3)["key"]
    admin.close()

    def call(url: str) -> int:
        return asyncio.run(_status(url, key))

    assert call(replicas[0]) == 200
    assert restart_redis_scripts(), "the gateways should hold connections that ran their limit scripts"
    assert [call(replicas[1]), call(replicas[0]), call(replicas[1])] == [200, 200, 429]


async def _status(url: str, key: str) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        return (await _post(client, url, key, "priced")).status_code  # type: ignore[attr-defined]
