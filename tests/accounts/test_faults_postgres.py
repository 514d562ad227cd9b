"""PostgreSQL faults under concurrent load, through a TCP proxy: a cut (connections reset, new ones refused),
a silent partition (packets dropped, no reset), and a gateway restarted while the outage lasts.

After each: every answered request is charged exactly what its response reported, refused ones nothing,
balance = ledger sum, one usage row per answered request, and the first admin call once the database is
back answers 200. Each test takes a few seconds of load and converges within the spool's flush interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from inferplex.store.ledger import Ledger
from inferplex.store.postgres import PostgresDatabase
from inferplex.store.spool import MOVE, USAGE, Spool
from tests.accounts.conftest import Admin, billing_config
from tests.accounts.faults import Load, books, converged, expected, postgres_running, wait_for
from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway_server import GatewayServer

pytestmark = pytest.mark.skipif(not postgres_running(), reason="PostgreSQL is not running on 127.0.0.1:5432")

CREDITS = 10_000_000
STORAGE = {"timeout_s": 1.0, "spool_flush_s": 0.5}


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    with TcpProxy(5432) as p:
        yield p


def _config(fake: FakeOpenAI, tmp: Path, pg_url: str, proxy: TcpProxy, **storage: Any) -> dict[str, Any]:
    url = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    return billing_config(fake, tmp, url, storage={**STORAGE, **storage})


def _account(admin: Admin) -> tuple[str, str]:
    created = admin.create_key(credits_micros=CREDITS)
    return created["key"], created["account_id"]


def _assert_converged(admin: Admin, account: str, load: Load) -> None:
    got = converged(admin, account, load, CREDITS)
    want = expected(load, CREDITS)
    assert load.errors == []  # no request hung past the client's limit
    assert got["balance"] == want["balance"] == got["ledger_sum"], got
    assert got["usage"] == want["usage"]  # one usage row per answered request, none lost
    assert got["settled"] == sorted(set(got["settled"]))  # no request settled twice


def test_a_cut_under_load_loses_no_settlement_and_no_usage_row(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, proxy: TcpProxy
) -> None:
    with GatewayServer(_config(fake_openai, tmp_path, pg_url, proxy)) as server:
        admin = Admin(server.url, server.master_key)
        key, account = _account(admin)
        with Load(server.url, key) as load:
            time.sleep(1.0)
            proxy.cut()  # requests in flight now settle, and log, while the database is gone
            time.sleep(2.0)
            proxy.restore()
            time.sleep(1.0)
        assert load.count(200) > 20 and load.count(503) > 0
        first = admin.client.get(f"/admin/accounts/{account}")
        assert first.status_code == 200, first.text  # the pool dropped its broken connections
        _assert_converged(admin, account, load)
        admin.close()


def test_connections_reset_under_load_lose_nothing(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, proxy: TcpProxy
) -> None:
    """Flaps: every connection to PostgreSQL aborted three times while the proxy keeps listening. A ledger
    batch cut mid-way may or may not have committed; either way it lands once, and the next call (an admin
    read, a key lookup) reconnects instead of failing."""
    with GatewayServer(_config(fake_openai, tmp_path, pg_url, proxy)) as server:
        admin = Admin(server.url, server.master_key)
        key, account = _account(admin)
        with Load(server.url, key) as load:
            for _ in range(3):
                time.sleep(0.7)
                proxy.reset()
            time.sleep(0.7)
        assert load.count(200) > 20
        after = admin.client.get(f"/admin/accounts/{account}")
        assert after.status_code == 200, after.text
        _assert_converged(admin, account, load)
        admin.close()


def test_a_silent_partition_answers_503_within_the_store_deadline(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, proxy: TcpProxy
) -> None:
    with GatewayServer(_config(fake_openai, tmp_path, pg_url, proxy)) as server:
        admin = Admin(server.url, server.master_key)
        key, account = _account(admin)
        with Load(server.url, key, timeout_s=15) as load:
            time.sleep(1.0)
            proxy.silence()
            time.sleep(1.0)
            start = time.monotonic()
            during = admin.client.get(f"/admin/accounts/{account}")
            admin_seconds = time.monotonic() - start
            time.sleep(max(0.0, 3.0 - admin_seconds))
            proxy.restore()
            time.sleep(1.0)
        assert load.count(200) > 20 and load.count(503) > 0
        # Bounded: the sleep-300 upstream, plus a key lookup and a reservation that each wait the store's
        # deadline at most (1 s here), plus the pool's wait behind them.
        assert max(a.seconds for a in load.answers) < 10
        assert during.status_code == 503 and during.json()["error"]["code"] == "store_unavailable", during.text
        assert admin_seconds < 5, admin_seconds  # the deadline (1 s) for the ping, and for the read
        silent_admin = admin.client.get(f"/admin/accounts/{account}")
        assert silent_admin.status_code == 200, silent_admin.text
        _assert_converged(admin, account, load)
        admin.close()


def test_rows_spooled_when_the_gateway_stops_are_written_by_the_next_one(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, proxy: TcpProxy
) -> None:
    config = _config(fake_openai, tmp_path, pg_url, proxy)
    with GatewayServer(config) as first:
        admin = Admin(first.url, first.master_key)
        key, account = _account(admin)
        admin.close()
        with Load(first.url, key, clients=10) as load:
            assert wait_for(lambda: load.count(200) >= 10, 10)
            proxy.cut()  # ten requests are in flight: they settle, and log, into the spool
            time.sleep(0.5)
        # stopped while the database is still gone: what it could not write stays in its data directory
    assert load.count(200) > 0
    spool = Spool(tmp_path / "spool.db")
    left = (spool.pending(MOVE), spool.pending(USAGE))
    spool.close()
    assert left[0] > 0 and left[1] > 0, left  # settlements and usage rows the first gateway could not write
    proxy.restore()
    with GatewayServer(config) as second:
        admin = Admin(second.url, second.master_key)
        _assert_converged(admin, account, load)
        admin.close()


def test_a_reservation_left_by_a_crashed_gateway_is_released_by_the_sweeper(
    fake_openai: FakeOpenAI, tmp_path: Path, pg_url: str, proxy: TcpProxy
) -> None:
    """A replica that reserved and died before settling (no spool left behind): another one gives the
    reservation back once it is older than `orphan_release_s`, exactly once."""
    config = _config(fake_openai, tmp_path, pg_url, proxy, orphan_release_s=2.0)
    with GatewayServer(config) as server:
        admin = Admin(server.url, server.master_key)
        key, account = _account(admin)
        body = {"model": "sleep-300", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
        spent = int(r.headers["x-inferplex-cost-micros"])
        # what the dead replica left: a reservation, and nothing after it
        _reserve_without_settling(pg_url, account, "req_dead_replica", 1234)
        assert admin.account(account)["balance_micros"] == CREDITS - spent - 1234
        assert wait_for(lambda: admin.account(account)["balance_micros"] == CREDITS - spent, 10)
        time.sleep(1.0)  # more sweeps: still released once
        got = books(admin, account)
        assert got["balance"] == got["ledger_sum"] == CREDITS - spent
        assert got["settled"].count("req_dead_replica") == 1
        admin.close()


def _reserve_without_settling(pg_url: str, account: str, request_id: str, amount: int) -> None:
    async def run() -> None:
        db = PostgresDatabase(pg_url)
        ledger = Ledger(db)
        try:
            assert await ledger.reserve(account, amount, request_id=request_id, key_id=None) is not None
            # as the dead replica wrote it: long enough ago to count as orphaned
            aged = text("UPDATE ledger SET created_at = created_at - 5 WHERE request_id = :r")
            await db.single(lambda conn: conn.execute(aged, {"r": request_id}))
        finally:
            await ledger.aclose()
            await db.aclose()

    asyncio.run(run())
