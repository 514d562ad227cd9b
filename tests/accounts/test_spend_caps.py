"""Monthly spending caps per account and per key (issue 21, Inferada's 402).

The cap is decided in the ledger's atomic step, beside the balance (store/moves.py): the rule is held equal on
both engines here (a table, the month's rollover, seeded random batches against a plain reference, the
spool's replay and the sweeper), then shown through HTTP: a 402 in each dialect's shape before any upstream
call, exactness under 30 concurrent requests (one gateway on each engine, and two gateway processes sharing
PostgreSQL), and no drift between the balance, the month's spend and the usage rows.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
import sqlalchemy
import yaml
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy.ext.asyncio import create_async_engine

from inferplex.accounts.keys import key_digest
from inferplex.store.backend import MIGRATIONS, Database
from inferplex.store.keys import KeyRecord, KeyStore
from inferplex.store.ledger import Ledger
from inferplex.store.moves import CapReached, Move, month_of
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.replicas import serve

# `priced` costs 3 micro-USD per output token and nothing per input: with max_tokens=2 the fake answers 2
# tokens, so a request reserves exactly what it then costs, 6 micro-USD.
COST = 6


def _utc(*when: int) -> float:
    return datetime(*when, tzinfo=UTC).timestamp()  # type: ignore[misc]


# ---- the rule, on both engines -----------------------------------------------------------------------------


@pytest.fixture
def db(migrated_db: Database) -> Database:
    return migrated_db


async def _account(ledger: Ledger, balance: int, cap: int | None = None) -> str:
    account = await ledger.create_account("a", monthly_cap_micros=cap)
    if balance:
        await ledger.credit(account.id, balance)
    return account.id


async def _key(db: Database, account_id: str, cap: int | None) -> str:
    secret = "ipx-" + secrets.token_urlsafe(12)
    record = KeyRecord(
        id="key_" + secrets.token_hex(6), hash=key_digest(secret), prefix=secret[:8], name="k", account_id=account_id
    )
    record.monthly_cap_micros = cap
    await KeyStore(db).create(record)
    return record.id


async def _month(ledger: Ledger, account_id: str) -> tuple[int, int]:
    found = await ledger.account(account_id)
    assert found is not None
    return found.month_spent_micros, found.month_reserved_micros


async def test_an_account_cap_counts_the_months_spend_and_what_is_reserved(db: Database) -> None:
    ledger = Ledger(db)
    acct = await _account(ledger, 1000, cap=100)
    assert await ledger.reserve(acct, 60, request_id="r1", key_id=None) == 940
    assert await ledger.reserve(acct, 50, request_id="r2", key_id=None) == CapReached("account", 100, 0, 60)
    assert await ledger.reserve(acct, 40, request_id="r3", key_id=None) == 900  # exactly up to the cap
    assert await ledger.settle(acct, 60, 30, request_id="r1", key_id=None) == 930
    assert await _month(ledger, acct) == (30, 40)
    assert await ledger.reserve(acct, 31, request_id="r4", key_id=None) == CapReached("account", 100, 30, 40)
    assert await ledger.reserve(acct, 30, request_id="r5", key_id=None) == 900
    kinds = [(e["request_id"], e["kind"]) for e in reversed(await ledger.entries(acct))]
    assert kinds == [(None, "topup"), ("r1", "reserve"), ("r3", "reserve"), ("r1", "settle"), ("r5", "reserve")]
    found = await ledger.account(acct)
    assert found is not None and found.balance_micros == await ledger.ledger_sum(acct) == 900


async def test_a_key_cap_holds_that_key_only_and_the_balance_still_comes_first(db: Database) -> None:
    ledger = Ledger(db)
    acct = await _account(ledger, 100)
    capped, other = await _key(db, acct, 50), await _key(db, acct, None)
    assert await ledger.reserve(acct, 50, request_id="r1", key_id=capped) == 50
    assert await ledger.reserve(acct, 1, request_id="r2", key_id=capped) == CapReached("key", 50, 0, 50)
    assert await ledger.reserve(acct, 51, request_id="r3", key_id=other) is None  # the balance refuses first
    assert await ledger.reserve(acct, 50, request_id="r4", key_id=other) == 0
    await ledger.settle(acct, 50, 20, request_id="r1", key_id=capped)
    months = await ledger.key_months([capped, other, "key_never_used"])
    assert (months[capped].month_spent_micros, months[capped].month_reserved_micros) == (20, 0)
    assert (months[other].month_spent_micros, months[other].month_reserved_micros) == (0, 50)
    assert "key_never_used" not in months
    assert await _month(ledger, acct) == (20, 50)


async def test_the_month_rolls_over_at_midnight_utc_on_the_first(db: Database) -> None:
    """Spend counts in the month of its settlement; what is reserved carries over; a replica whose clock is
    behind (still in the old month) neither resets nor rolls back the new month."""
    last, first = _utc(2025, 1, 31, 23, 59, 59), _utc(2025, 2, 1)
    assert (month_of(last), month_of(first), month_of(first - 0.001)) == (202501, 202502, 202501)
    ledger = Ledger(db)
    acct = await _account(ledger, 0, cap=100)
    key = await _key(db, acct, 100)
    assert await db.apply_moves([Move(acct, "topup", 1000)], last) == [1000]  # all in January 2025

    def reserve(amount: int, request: str) -> Move:
        return Move(acct, "reserve", -amount, True, request, key, hold=amount)

    def settle(reserved: int, actual: int, request: str) -> Move:
        return Move(acct, "settle", reserved - actual, False, request, key, hold=-reserved, spend=actual)

    assert await db.apply_moves([reserve(90, "r1"), reserve(10, "r2")], last) == [910, 900]
    assert await db.apply_moves([settle(90, 90, "r1"), reserve(1, "r3")], last) == [
        900,
        CapReached("account", 100, 90, 10),
    ]
    # One second later it is February: January's 90 no longer counts, r2's 10 is still reserved.
    assert await db.apply_moves([reserve(91, "r4"), reserve(90, "r5")], first) == [
        CapReached("account", 100, 0, 10),
        810,
    ]
    assert await db.apply_moves([settle(10, 4, "r2")], first) == [816]
    # A lagging replica: still January by its clock, it counts into February and checks against it.
    assert await db.apply_moves([reserve(7, "r6")], last) == [CapReached("account", 100, 4, 90)]
    assert await db.apply_moves([settle(90, 0, "r5"), reserve(7, "r7")], last) == [906, 899]
    months = await ledger.key_months([key])  # read now: February 2025 is long past
    assert (months[key].month_spent_micros, months[key].month_reserved_micros) == (0, 7)
    assert await _month(ledger, acct) == (0, 7)
    assert await db.apply_moves([reserve(100, "r8")], time.time()) == [CapReached("account", 100, 0, 7)]


def _by_the_rule(
    balances: dict[str, int], caps: dict[str, int | None], months: dict[str, list[int]], moves: list[Move]
) -> list[Any]:
    """The rule with caps written out plainly (store/moves.py): the reference both engines must match.
    `months` holds [spent, reserved] per account and per key, all in one month."""
    out: list[Any] = [None] * len(moves)
    for account in sorted({m.account_id for m in moves}):
        if account not in balances:
            continue
        mine = [i for i, m in enumerate(moves) if m.account_id == account]
        for i in [i for i in mine if not moves[i].conditional] + [i for i in mine if moves[i].conditional]:
            m = moves[i]
            owners = [("account", account)] + ([("key", m.key_id)] if m.key_id else [])
            if m.conditional:
                if balances[account] + m.amount < 0:
                    continue
                over = [
                    (who, o)
                    for who, o in owners
                    if caps.get(o) is not None and sum(months[o]) + m.hold > caps[o]  # type: ignore[operator]
                ]
                if over:
                    who, o = over[0]
                    out[i] = CapReached(who, caps[o], *months[o])  # type: ignore[arg-type]
                    continue
            balances[account] += m.amount
            out[i] = balances[account]
            for _, o in owners:
                months[o] = [months[o][0] + m.spend, max(0, months[o][1] + m.hold)]
    return out


async def test_the_rule_with_caps_on_seeded_random_batches(db: Database) -> None:
    """Both engines get the same batches from one seed: every answer (balances and cap refusals) and every
    month as the plain reference computes it."""
    rng = random.Random(21)
    ledger = Ledger(db)
    accounts = {n: await _account(ledger, b, cap=c) for n, b, c in (("a", 500, 300), ("b", 200, None), ("c", 0, 50))}
    keys = {
        "ka": await _key(db, accounts["a"], None),
        "kb": await _key(db, accounts["b"], 120),
        "kb2": await _key(db, accounts["b"], 0),
        "kc": await _key(db, accounts["c"], 40),
    }
    owners = {"a": ["ka", None], "b": ["kb", "kb2", None], "c": ["kc", None], "x": [None]}
    balances = {accounts[n]: b for n, b in (("a", 500), ("b", 200), ("c", 0))}
    caps: dict[str, int | None] = {accounts["a"]: 300, accounts["b"]: None, accounts["c"]: 50}
    caps.update({keys["ka"]: None, keys["kb"]: 120, keys["kb2"]: 0, keys["kc"]: 40})
    months = {o: [0, 0] for o in caps}
    for batch in range(40):
        moves = []
        for i in range(rng.randint(0, 10)):
            name = rng.choice("aabbcx")
            account = accounts.get(name, "acct_missing")
            key_name = rng.choice(owners[name])
            key = keys[key_name] if key_name else None
            kind = rng.choice(("reserve", "reserve", "settle", "topup"))
            if kind == "reserve":
                hold = rng.randint(0, 60)
                moves.append(Move(account, kind, -hold, True, f"r{batch}_{i}", key, hold=hold))
            elif kind == "settle":
                reserved, actual = rng.randint(0, 60), rng.randint(0, 70)
                moves.append(
                    Move(account, kind, reserved - actual, False, f"r{batch}_{i}", key, hold=-reserved, spend=actual)
                )
            else:
                moves.append(Move(account, kind, rng.randint(-20, 80)))
        assert await ledger.move_many(moves) == _by_the_rule(balances, caps, months, moves), f"batch {batch}"
    for name, account in accounts.items():
        found = await ledger.account(account)
        assert found is not None and found.balance_micros == balances[account] == await ledger.ledger_sum(account)
        assert [found.month_spent_micros, found.month_reserved_micros] == months[account], name
    stored = await ledger.key_months(list(keys.values()))
    for key in keys.values():
        got = stored.get(key)
        assert ([got.month_spent_micros, got.month_reserved_micros] if got else [0, 0]) == months[key]


async def test_the_spools_replay_and_the_sweeper_keep_the_month(db: Database) -> None:
    """What an outage leaves for later (store/recovery.py) moves the month as the batch would have: a
    replayed settlement counts its cost and frees its reservation, once; the sweeper's release frees it."""
    ledger = Ledger(db)
    acct = await _account(ledger, 1000, cap=500)
    key = await _key(db, acct, 200)
    assert await ledger.reserve(acct, 100, request_id="r1", key_id=key) == 900
    assert await ledger.reserve(acct, 50, request_id="r2", key_id=key) == 850
    settled = {"account_id": acct, "amount": 60, "request_id": "r1", "key_id": key, "note": None,
               "if_reserved": False, "hold": -100, "spend": 40}  # fmt: skip
    await ledger.replay([settled])
    await ledger.replay([settled])  # already settled: skipped
    assert await _month(ledger, acct) == (40, 50)
    months = await ledger.key_months([key])
    assert (months[key].month_spent_micros, months[key].month_reserved_micros) == (40, 50)
    releases, _ = await ledger.orphans(0, time.time() + 1)
    assert [(r["request_id"], r["hold"]) for r in releases if r["account_id"] == acct] == [("r2", -50)]
    await ledger.replay(releases)
    assert await _month(ledger, acct) == (40, 0)
    assert (await ledger.key_months([key]))[key].month_reserved_micros == 0
    assert await ledger.reserve(acct, 161, request_id="r3", key_id=key) == CapReached("key", 200, 40, 0)


def _alembic(conn: Any, step: str, revision: str) -> None:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    getattr(command, step)(cfg, revision)


async def test_the_migration_downgrades_and_upgrades_again(db: Database) -> None:
    """0008 down (through the later ones) to 0007, whose batch function serves again, then back up."""
    if db.dialect.name == "sqlite":
        engine = sqlalchemy.create_engine(db.url)
        for step, revision in (("downgrade", "0007"), ("upgrade", "head")):
            with engine.begin() as conn:
                _alembic(conn, step, revision)
                if revision == "0007":
                    columns = {c["name"] for c in sqlalchemy.inspect(conn).get_columns("accounts")}
                    assert "monthly_cap_micros" not in columns
        engine.dispose()
    else:
        engine = create_async_engine(db.url)
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "downgrade", "0007")
            old = "SELECT * FROM inferplex_ledger_batch('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0)"
            await conn.execute(sqlalchemy.text(old))
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
        await engine.dispose()
    ledger = Ledger(db)
    acct = await _account(ledger, 10, cap=5)
    assert await ledger.reserve(acct, 6, request_id="r1", key_id=None) == CapReached("account", 5, 0, 0)


# ---- through HTTP: one gateway on each engine ------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("caps")
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    with GatewayServer(billing_config(fake_openai, tmp, url)) as gw:
        yield gw


def _chat(url: str, key: str, **extra: Any) -> httpx.Response:
    body = {"model": "priced", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2, **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _sql(server: GatewayServer, statement: str) -> None:
    url = server.config.storage.database_url
    assert url is not None
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1])
        conn.execute(statement)
        conn.commit()
        conn.close()
        return

    async def run() -> None:
        pg = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        await pg.execute(statement)
        await pg.close()

    asyncio.run(run())


def _account_with_key(admin: Admin, credits: int, **caps: int | None) -> tuple[str, dict[str, Any]]:
    """An account (its cap: `account_cap`) holding `credits`, and a key on it (its cap: `key_cap`)."""
    r = admin.client.post(
        "/admin/accounts",
        json={"name": "capped", "credits_micros": credits, "monthly_cap_micros": caps.get("account_cap")},
    )
    assert r.status_code == 201, r.text
    account = r.json()
    assert (account["monthly_cap_micros"], account["month_spent_micros"]) == (caps.get("account_cap"), 0)
    key = admin.create_key(account_id=account["id"], monthly_cap_micros=caps.get("key_cap"))
    return account["id"], key


def assert_no_drift(admin: Admin, account_id: str, credits: int) -> list[dict[str, Any]]:
    """The account's balance and month's spend are what its usage rows add up to, and nothing stays held."""
    account = admin.account(account_id)
    rows = admin.usage(account_id=account_id, limit=1000)
    spent = sum(r["cost_micros"] for r in rows)
    assert account["balance_micros"] == credits - spent == sum(e["amount_micros"] for e in admin.ledger(account_id))
    assert (account["month_spent_micros"], account["month_reserved_micros"]) == (spent, 0)
    return rows


def test_a_cap_reached_is_a_402_in_each_dialects_shape_before_any_upstream_call(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    account_id, key = _account_with_key(admin, 1000, account_cap=2 * COST)
    assert [_chat(server.url, key["key"]).status_code for _ in range(2)] == [200, 200]
    sent = len(fake_openai.state.requests)

    r = _chat(server.url, key["key"])  # OpenAI's error object, status 402
    assert r.status_code == 402
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "spending_cap_reached")
    month = time.strftime("%Y-%m", time.gmtime())
    assert (
        f"the account's cap is {2 * COST} micro-USD and it has spent {2 * COST} micro-USD in {month}"
        in (error["message"])
    )

    headers = {"x-api-key": key["key"], "anthropic-version": "2023-06-01"}
    body = {"model": "priced", "max_tokens": 2, "messages": [{"role": "user", "content": "a b c"}]}
    r = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == 402  # Anthropic's error shape; its type for a 402 is billing_error
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "billing_error"
    assert "Monthly spending cap reached" in r.json()["error"]["message"]

    r = _chat(server.url, key["key"], inferada={"processors": []})  # Inferada's clients on the shared route
    assert r.status_code == 402 and set(r.json()) == {"error", "request_id"}
    assert r.json()["request_id"] == r.headers["x-request-id"] and "cap" in r.json()["error"]

    ula = {"provider": "fake", "model": "priced", "max_tokens": 2, "messages": [{"role": "user", "content": "a"}]}
    r = httpx.post(
        server.url + "/v1/ula/chat/completions", json=ula, headers={"X-API-KEY": key["key"]}, timeout=30
    )  # OneInfer's envelope, with the status its table gives a credit refusal
    assert r.status_code == 403 and r.json()["api_details"]["api_status"] == "error"
    assert r.json()["error"]["code"] == "spending_cap_reached"

    assert len(fake_openai.state.requests) == sent  # no upstream call for any of them
    rows = assert_no_drift(admin, account_id, 1000)
    assert sorted(r["status"] for r in rows) == [200, 200, 402, 402, 402, 402]
    assert [e["kind"] for e in admin.ledger(account_id)].count("reserve") == 2  # nothing reserved when refused


def test_a_key_cap_is_shown_patched_and_cleared_through_the_admin_api(server: GatewayServer, admin: Admin) -> None:
    account_id, key = _account_with_key(admin, 1000, key_cap=COST)
    assert key["monthly_cap_micros"] == COST and key["month_spent_micros"] == 0
    assert _chat(server.url, key["key"]).status_code == 200
    r = _chat(server.url, key["key"])
    assert r.status_code == 402 and "the key's cap is 6 micro-USD and it has spent 6" in r.json()["error"]["message"]
    shown = admin.client.get(f"/admin/keys/{key['id']}").json()
    assert (shown["monthly_cap_micros"], shown["month_spent_micros"], shown["month_reserved_micros"]) == (COST, COST, 0)
    listed = admin.client.get("/admin/keys", params={"account_id": account_id}).json()["data"]
    assert [(k["id"], k["month_spent_micros"]) for k in listed] == [(key["id"], COST)]

    for bad in (-1, True, "6", 2**63):
        r = admin.client.patch(f"/admin/keys/{key['id']}", json={"monthly_cap_micros": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "monthly_cap_micros", bad
    r = admin.client.patch(f"/admin/keys/{key['id']}", json={"monthly_cap_micros": None})  # null: no cap
    assert r.status_code == 200 and r.json()["monthly_cap_micros"] is None
    assert _chat(server.url, key["key"]).status_code == 200

    r = admin.client.patch(f"/admin/accounts/{account_id}", json={"monthly_cap_micros": 2 * COST})
    assert r.status_code == 200 and r.json()["monthly_cap_micros"] == 2 * COST
    r = _chat(server.url, key["key"])
    assert r.status_code == 402 and "the account's cap is 12" in r.json()["error"]["message"]
    assert admin.account(account_id)["month_spent_micros"] == 2 * COST
    assert_no_drift(admin, account_id, 1000)


def test_the_month_rolls_over_and_the_cap_admits_again(server: GatewayServer, admin: Admin) -> None:
    """The stored month made last month's (as if the 1st had come): it reads as 0 spent and admits."""
    account_id, key = _account_with_key(admin, 1000, account_cap=COST, key_cap=COST)
    assert [_chat(server.url, key["key"]).status_code for _ in range(2)] == [200, 402]
    earlier = month_of(time.time()) - 1 if month_of(time.time()) % 100 > 1 else month_of(time.time()) - 89
    _sql(server, f"UPDATE accounts SET spend_month = {earlier} WHERE id = '{account_id}'")
    _sql(server, f"UPDATE key_spend SET spend_month = {earlier} WHERE key_id = '{key['id']}'")
    assert admin.account(account_id)["month_spent_micros"] == 0
    assert admin.client.get(f"/admin/keys/{key['id']}").json()["month_spent_micros"] == 0
    assert [_chat(server.url, key["key"]).status_code for _ in range(2)] == [200, 402]
    assert admin.account(account_id)["month_spent_micros"] == COST


async def _burst(urls: list[str], key: str, n: int) -> list[httpx.Response]:
    body = {"model": "priced", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
        calls = [
            client.post(
                urls[i % len(urls)] + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            )
            for i in range(n)
        ]
        return await asyncio.gather(*calls)


def _exactly(responses: list[httpx.Response], admitted: int) -> None:
    statuses = [r.status_code for r in responses]
    assert (statuses.count(200), statuses.count(402)) == (admitted, len(responses) - admitted), statuses
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 402} == {"spending_cap_reached"}


def test_30_concurrent_requests_against_a_cap_that_fits_exactly_11(server: GatewayServer, admin: Admin) -> None:
    account_id, key = _account_with_key(admin, 10_000, account_cap=11 * COST)
    _exactly(asyncio.run(_burst([server.url], key["key"], 30)), 11)
    rows = assert_no_drift(admin, account_id, 10_000)
    assert sum(r["cost_micros"] for r in rows) == 11 * COST
    _, keyed = _account_with_key(admin, 10_000, key_cap=7 * COST)
    _exactly(asyncio.run(_burst([server.url], keyed["key"], 30)), 7)


# ---- two gateway processes sharing PostgreSQL --------------------------------------------------------------

MASTER = "ipx-caps-replica-master"


@pytest.fixture(scope="module")
def replicas(fake_openai: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("cap-replicas")
    config = billing_config(fake_openai, tmp, pg_url, storage={"pool_size": 3})
    config["server"]["master_key"] = "env:INFERPLEX_TEST_MASTER"
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}
    with serve([path, path], env) as urls:
        yield urls


def _drained(urls: list[str], account_id: str) -> None:
    """Each replica writes what it has queued (settlements, usage rows) before its admin API answers."""
    for url in urls:
        other = Admin(url, MASTER)
        other.account(account_id)
        other.usage(account_id=account_id)
        other.close()


def test_a_cap_is_exact_across_two_replicas_sharing_postgresql(replicas: list[str]) -> None:
    """30 requests at once, alternating between the replicas, against an account's cap that fits exactly 13
    and then a key's that fits exactly 4: each replica batches its reservations, and the caps still hold."""
    admin = Admin(replicas[0], MASTER)
    account_id, key = _account_with_key(admin, 100_000, account_cap=13 * COST)
    _exactly(asyncio.run(_burst(replicas, key["key"], 30)), 13)
    _drained(replicas, account_id)
    rows = assert_no_drift(admin, account_id, 100_000)
    assert sorted({r["status"] for r in rows}) == [200, 402] and len(rows) == 30
    other_account, keyed = _account_with_key(admin, 100_000, key_cap=4 * COST)
    _exactly(asyncio.run(_burst(replicas, keyed["key"], 30)), 4)
    _drained(replicas, other_account)
    shown = admin.client.get(f"/admin/keys/{keyed['id']}").json()
    assert (shown["month_spent_micros"], shown["month_reserved_micros"]) == (4 * COST, 0)
    assert_no_drift(admin, other_account, 100_000)
    admin.close()
