"""The gateway with its PostgreSQL behind PgBouncer in transaction mode (`storage.pooler: transaction`).

Through such a pooler every statement may run on another server session than the one before, so what
lives in a session breaks: asyncpg's and SQLAlchemy's statements prepared by name ("prepared statement
__asyncpg_stmt_1__ does not exist"), a LISTEN (notifications reach whoever holds the session next), a session
advisory lock (left held on a session the pooler lends to others). These tests run the whole request path
through HTTP with two gateway apps sharing one database that way.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import openai
import pytest
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory

from inferplex.store.backend import MIGRATIONS
from inferplex.store.moves import Move
from inferplex.store.postgres import ADVISORY_LOCK, PostgresDatabase
from tests.accounts.conftest import Admin, own_database
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.pgbouncer.conftest import MASTER, SERVER_SESSIONS, Bouncer, eventually, pooled_config, start_together

PRICE = 3  # `priced`: micro-USD per output token, nothing per input token


@pytest.fixture
def admins(apps: list[GatewayServer]) -> Iterator[list[Admin]]:
    both = [Admin(app.url, MASTER) for app in apps]
    yield both
    for a in both:
        a.close()


async def _call(base_url: str, key: str, stream: bool, max_tokens: int) -> int:
    """One chat call with the openai SDK to the app at `base_url` (its /v1): the cost its usage reports."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)
    messages: Any = [{"role": "user", "content": "one two three four five six"}]
    try:
        if not stream:
            done = await client.chat.completions.create(model="priced", messages=messages, max_tokens=max_tokens)
            assert done.usage is not None
            return PRICE * done.usage.completion_tokens
        chunks = await client.chat.completions.create(
            model="priced",
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [c.usage async for c in chunks if c.usage is not None]
        assert len(usage) == 1
        return PRICE * usage[0].completion_tokens
    finally:
        await client.close()


def _usage_rows(admins: list[Admin], key_id: str) -> int:
    """Usage rows of `key_id`, once each app has flushed its usage log (each flushes its own when asked)."""
    for a in admins:
        rows = a.usage(key_id=key_id, limit=1000)
    return len(rows)


def test_keyed_calls_buffered_and_streamed_on_both_apps_are_billed_exactly(
    apps: list[GatewayServer], admins: list[Admin]
) -> None:
    """60 concurrent calls over two apps, through 3 server sessions: every one answers, each is reserved and
    settled once, and the balance is the credits less what the responses' usage reported."""
    created = admins[0].create_key(credits_micros=1_000_000)
    rng = random.Random(25)
    plan = [(i % 2, rng.random() < 0.5, rng.randint(1, 5)) for i in range(60)]

    async def burst() -> list[int]:
        return await asyncio.gather(*(_call(apps[i].base_url, created["key"], s, n) for i, s, n in plan))

    costs = asyncio.run(burst())
    account = created["account_id"]

    def settled() -> bool:
        balance: int = admins[1].account(account)["balance_micros"]
        return balance == 1_000_000 - sum(costs)

    eventually(settled)
    entries = admins[0].ledger(account)
    kinds = [e["kind"] for e in entries]
    assert (kinds.count("reserve"), kinds.count("settle")) == (60, 60)
    assert sum(e["amount_micros"] for e in entries) == 1_000_000 - sum(costs)
    assert _usage_rows(admins, created["id"]) == 60


def test_a_key_revoked_on_one_app_is_refused_on_the_other_at_once(
    apps: list[GatewayServer], admins: list[Admin]
) -> None:
    """The second app keeps the key cached after its first call; the revocation through the first app
    reaches it by NOTIFY on its direct LISTEN connection before the revoking call returns."""
    for _ in range(5):
        created = admins[0].create_key(credits_micros=1_000)
        other = apps[1].base_url
        assert asyncio.run(_call(other, created["key"], False, 1)) == PRICE
        assert asyncio.run(_call(other, created["key"], True, 1)) == PRICE
        r = admins[0].client.post(f"/admin/keys/{created['id']}/revoke")
        assert r.status_code == 200, r.text
        with pytest.raises(openai.AuthenticationError):
            asyncio.run(_call(other, created["key"], False, 1))


def test_the_apps_hold_no_session_state_on_the_pooler(admins: list[Admin], bouncer: Bouncer, database: str) -> None:
    """Each app's key-change listener is a session on PostgreSQL itself, not one of the pooler's server
    sessions (which it would hand to other clients), and no advisory lock is left held in the database."""

    async def look() -> tuple[set[int], list[Any], int]:
        direct = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{database}")
        try:
            listeners = await direct.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'inferplex-key-changes'",
                database,
            )
            locks = await direct.fetchval(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND d.datname = $1",
                database,
            )
        finally:
            await direct.close()
        pooled = {int(row["remote_pid"]) for row in bouncer.show("SERVERS") if row["database"] == database}
        return pooled, [r["pid"] for r in listeners], locks

    admins[0].create_key(credits_micros=10)  # the apps are up and have done some work
    pooled, listeners, locks = asyncio.run(look())
    assert pooled and len(listeners) == 2 and not pooled & set(listeners)
    assert locks == 0


def test_replicas_migrating_at_once_through_the_pooler_leave_no_lock_behind(bouncer: Bouncer) -> None:
    """Three replicas migrate a fresh database together with no direct URL: through the pooler. The lock
    that makes one of them do the work is the transaction's, so it goes with the commit; a session lock
    would stay held on whichever server session ran it, and the next replica to start would wait for ever."""
    with own_database("inferplex_pgbouncer_migrate_") as url:
        name = url.rsplit("/", 1)[1]

        async def migrate_three_times() -> tuple[str, int]:
            dbs = [PostgresDatabase(bouncer.url(name), 2, 10.0, pooler="transaction") for _ in range(3)]
            try:
                await asyncio.wait_for(asyncio.gather(*(db.migrate() for db in dbs)), 60)
                await asyncio.wait_for(dbs[0].migrate(), 20)  # again, later: nothing to do, nothing to wait for
            finally:
                for db in dbs:
                    await db.aclose()
            conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}")
            try:
                version = await conn.fetchval("SELECT version_num FROM alembic_version")
                locks = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = $1",
                    ADVISORY_LOCK,
                )
            finally:
                await conn.close()
            return version, locks

        version, locks = asyncio.run(migrate_three_times())
    assert (version, locks) == (_head(), 0)


def test_without_a_direct_url_the_key_cache_is_off_and_said_so(
    fake_openai: FakeOpenAI, bouncer: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two apps on a fresh database through the pooler only: they migrate it together, serve keyed calls,
    and with nothing to LISTEN on they keep no key records: a revocation is seen at once all the same."""
    with own_database("inferplex_pgbouncer_nodirect_") as url, caplog.at_level(logging.WARNING, "inferplex.store"):
        name = url.rsplit("/", 1)[1]
        configs = [pooled_config(fake_openai, name, bouncer, direct=False) for _ in range(2)]
        apps = start_together(configs)
        try:
            assert any("the key cache is off" in r.getMessage() for r in caplog.records)
            admin = Admin(apps[0].url, MASTER)
            created = admin.create_key(credits_micros=1_000)

            async def burst() -> list[int]:  # each call reads its key through the pooler
                calls = [_call(apps[i % 2].base_url, created["key"], i % 3 == 0, 2) for i in range(40)]
                return await asyncio.gather(*calls)

            assert asyncio.run(burst()) == [2 * PRICE] * 40
            assert admin.client.post(f"/admin/keys/{created['id']}/revoke").status_code == 200
            with pytest.raises(openai.AuthenticationError):
                asyncio.run(_call(apps[1].base_url, created["key"], False, 1))
            eventually(lambda: admin.account(created["account_id"])["balance_micros"] == 1_000 - 40 * 2 * PRICE)
            admin.close()
        finally:
            for app in apps:
                app.stop()


def test_type_lookups_through_the_pooler_run_on_one_server_session(bouncer: Bouncer) -> None:
    """The first ledger batch of a connection returns arrays, whose types asyncpg looks up: JIT off, its
    catalog query, JIT back on. Through the pooler the three must run on one server session, else the
    catalog query is JIT-compiled (in this database every query is: its `jit_above_cost` is 0) and another session
    keeps `jit = off` for whoever borrows it next."""
    with own_database("inferplex_pgbouncer_jit_") as url:
        name = url.rsplit("/", 1)[1]

        async def run() -> set[str]:
            setup = PostgresDatabase(bouncer.url(name), 1, 10.0, direct_url=url, pooler="transaction")
            await setup.migrate()  # on PostgreSQL itself: the pooler opens its sessions after the ALTER below
            await setup.aclose()
            conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}")
            try:
                await conn.execute(f'ALTER DATABASE "{name}" SET jit_above_cost = 0')
            finally:
                await conn.close()
            await _open_every_server_session(bouncer.url(name))
            settings: set[str] = set()
            db = PostgresDatabase(bouncer.url(name), 1, 30.0, pooler="transaction")
            try:
                assert await db.apply_moves([Move("acct_none", "topup", 1)], time.time()) == [None]
            finally:
                await db.aclose()
            probe = await asyncpg.connect(bouncer.url(name).replace("+asyncpg", ""), statement_cache_size=0)
            try:
                for _ in range(4 * SERVER_SESSIONS):  # round robin: every server session, several times
                    settings.add(await probe.fetchval("SELECT current_setting('jit')"))
            finally:
                await probe.close()
            return settings

        assert asyncio.run(run()) == {"on"}


async def _open_every_server_session(url: str) -> None:
    """Make the pooler open all its server sessions for the database (it opens them only when clients wait),
    so that its round robin sends consecutive statements of one client to different sessions."""
    dsn = url.replace("+asyncpg", "")
    conns = [await asyncpg.connect(dsn, statement_cache_size=0) for _ in range(SERVER_SESSIONS)]
    try:

        async def hold(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await conn.execute("SELECT pg_sleep(0.2)")

        await asyncio.gather(*(hold(c) for c in conns))
    finally:
        for c in conns:
            await c.close()


def _head() -> str:
    """The newest migration's revision."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None
    return head
