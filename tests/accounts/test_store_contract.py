"""The store contract: every SQL engine (SQLite file, PostgreSQL) passes the same tests."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from inferplex.accounts.keys import key_digest
from inferplex.store import tables as t
from inferplex.store.backend import Database
from inferplex.store.engine import open_database
from inferplex.store.keys import KeyRecord, KeyStore
from inferplex.store.ledger import Ledger
from inferplex.store.moves import Move
from inferplex.store.sqlite import SQLiteDatabase
from inferplex.store.usage import UsageFilter, UsageStore
from tests.accounts.conftest import sqlite_url


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    # Two replicas starting at once both migrate: the lock makes that safe.
    first, second = open_database(url), open_database(url)
    await asyncio.gather(first.migrate(), second.migrate())
    await second.aclose()
    if not isinstance(first, SQLiteDatabase):  # PostgreSQL's database is shared by the module: empty its tables
        await first.write(lambda conn: conn.execute(text("TRUNCATE accounts, api_keys, ledger, usage")))
    yield first
    await first.aclose()


def _key(secret: str, **kw: object) -> KeyRecord:
    return KeyRecord(id="key_" + secret[-6:], hash=key_digest(secret), prefix=secret[:8], name="k", **kw)  # type: ignore[arg-type]


async def test_migrating_again_changes_nothing_and_keeps_data(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 5)
    await db.migrate()
    found = await ledger.account(account.id)
    assert found is not None and found.balance_micros == 5


async def test_keys_are_found_by_digest_and_carry_their_account_limits(db: Database) -> None:
    ledger, keys = Ledger(db), KeyStore(db)
    account = await ledger.create_account("team", rpm=7, max_concurrent=2)
    record = _key("ipx-secret-aaaaaa", account_id=account.id, scopes=["chat"], allowed_models=["gpt-*"], rpm=3)
    await keys.create(record)
    found = await keys.by_hash(key_digest("ipx-secret-aaaaaa"))
    assert found is not None
    got, limits = found
    assert (got.id, got.scopes, got.allowed_models, got.rpm) == (record.id, ["chat"], ["gpt-*"], 3)
    assert (limits.rpm, limits.tpm, limits.max_concurrent) == (7, None, 2)
    assert await keys.by_hash(key_digest("ipx-other")) is None
    by_id = await keys.by_id_with_account(record.id)
    assert by_id is not None and by_id[0].hash == record.hash


async def test_keys_update_revoke_and_rotate(db: Database) -> None:
    keys = KeyStore(db)
    record = _key("ipx-secret-bbbbbb")
    await keys.create(record)
    with pytest.raises(ValueError, match="not editable: hash"):  # refused whole, never skipped quietly
        await keys.update(record.id, {"name": "renamed", "hash": "ignored"})
    updated = await keys.update(record.id, {"name": "renamed", "tpm": 100})
    assert updated is not None and (updated.name, updated.tpm, updated.hash) == ("renamed", 100, record.hash)
    rotated = await keys.rotate(record.id, key_digest("ipx-new"), "ipx-new")
    assert rotated is not None and await keys.by_hash(record.hash) is None
    assert await keys.by_hash(key_digest("ipx-new")) is not None
    revoked = await keys.revoke(record.id)
    assert revoked is not None and revoked.revoked_at is not None
    assert await keys.rotate(record.id, key_digest("ipx-3"), "ipx-3") is None  # a revoked key stays revoked
    assert [k.id for k in await keys.list()] == [record.id]


async def test_ledger_reserve_settle_and_balance_equals_ledger_sum(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    assert await ledger.credit(account.id, 1000) == 1000
    assert await ledger.reserve(account.id, 600, request_id="r1", key_id="k") == 400
    assert await ledger.reserve(account.id, 600, request_id="r2", key_id="k") is None  # refused, nothing changed
    assert await ledger.settle(account.id, 600, 250, request_id="r1", key_id="k") == 750
    assert await ledger.credit(account.id, 50, kind="refund", note="goodwill") == 800
    entries = await ledger.entries(account.id)
    assert [(e["kind"], e["amount_micros"]) for e in reversed(entries)] == [
        ("topup", 1000),
        ("reserve", -600),
        ("settle", 350),
        ("refund", 50),
    ]
    found = await ledger.account(account.id)
    assert found is not None and found.balance_micros == await ledger.ledger_sum(account.id) == 800


async def test_concurrent_reservations_never_overdraw(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 50 * 7)
    results = await asyncio.gather(
        *(ledger.reserve(account.id, 7, request_id=f"r{i}", key_id=None) for i in range(200))
    )
    assert sum(r is not None for r in results) == 50
    found = await ledger.account(account.id)
    assert found is not None and found.balance_micros == 0 == await ledger.ledger_sum(account.id)


async def test_a_batch_of_moves_is_applied_one_by_one_settlements_first(db: Database) -> None:
    """What concurrent requests' reservations and settlements do when they share one batch: each applied as
    if alone (a refused reservation leaves room for a smaller one after it), credit given back first."""
    ledger = Ledger(db)
    a, b = await ledger.create_account("a"), await ledger.create_account("b")
    await ledger.credit(a.id, 100)
    await ledger.credit(b.id, 100)
    moves = [
        Move(a.id, "reserve", -80, True, "r1"),
        Move(b.id, "reserve", -60, True, "r2"),
        Move(a.id, "reserve", -30, True, "r3"),  # refused: 20 left
        Move(a.id, "reserve", -20, True, "r4"),  # fits what is left
        Move(b.id, "reserve", -60, True, "r5"),  # fits only because the settlement below comes first
        Move(b.id, "settle", 50, False, "r0"),
        Move("acct_missing", "settle", 5, False, "r6"),
    ]
    assert await ledger.move_many(moves) == [20, 90, None, 0, 30, 150, None]
    for account, balance in ((a.id, 0), (b.id, 30)):
        found = await ledger.account(account)
        assert found is not None and found.balance_micros == balance == await ledger.ledger_sum(account)
    kinds = [(e["request_id"], e["amount_micros"]) for e in reversed(await ledger.entries(b.id))]
    assert kinds == [(None, 100), ("r0", 50), ("r2", -60), ("r5", -60)]


@pytest.mark.parametrize(
    "text",
    ["plain", 'with "quotes"', "back\\slash", "a,b{c}", "NULL", "", " spaced ", "Grüße 🎉", "tab\tnewline\n"],
)
async def test_ledger_rows_keep_any_request_id_key_id_and_note_exactly(db: Database, text: str) -> None:
    """Notes come from admins (the admin API's top-ups), and ids must not depend on our own format: whatever
    characters they hold, the ledger row holds the same string (the batch's arrays go to PostgreSQL as text
    literals)."""
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    moves = [
        Move(account.id, "topup", 100, note=text),
        Move(account.id, "reserve", -30, True, request_id=text, key_id=text),
        Move(account.id, "settle", 10, request_id=text, key_id=None, note=None),
    ]
    assert await ledger.move_many(moves) == [100, 80, 110]  # settlements first, then the reservation
    rows = [(e["kind"], e["request_id"], e["key_id"], e["note"]) for e in reversed(await ledger.entries(account.id))]
    assert rows == [("topup", None, None, text), ("settle", text, None, None), ("reserve", text, text, None)]


async def _cancel_after(call: Coroutine[Any, Any, object], turns: int) -> None:
    """Start `call`, let the event loop turn `turns` times, then cancel it: its caller has hung up."""
    caller = asyncio.create_task(call)
    for _ in range(turns):
        await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def _books(ledger: Ledger, account_id: str) -> tuple[list[tuple[str, int]], int]:
    """The account's ledger rows (kind, amount), oldest first, and its balance, which must be their sum."""
    entries = [(e["kind"], e["amount_micros"]) for e in reversed(await ledger.entries(account_id))]
    found = await ledger.account(account_id)
    assert found is not None and found.balance_micros == await ledger.ledger_sum(account_id)
    return entries, found.balance_micros


async def test_a_reservation_whose_caller_is_cancelled_in_flight_is_given_back(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 1000)
    # Three turns: the caller queues its move, and the batch is sent.
    await _cancel_after(ledger.reserve(account.id, 600, request_id="r1", key_id=None), 3)
    await ledger.aclose()  # the batch lands, and the orphaned reservation is refunded
    assert await _books(ledger, account.id) == ([("topup", 1000), ("reserve", -600), ("settle", 600)], 1000)


async def test_a_settlement_whose_caller_is_cancelled_before_it_is_sent_is_still_booked(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 1000)
    assert await ledger.reserve(account.id, 600, request_id="r1", key_id=None) == 400
    # One turn: the caller queued its move; the batch has not left yet.
    await _cancel_after(ledger.settle(account.id, 600, 250, request_id="r1", key_id=None), 1)
    await ledger.aclose()
    assert await _books(ledger, account.id) == ([("topup", 1000), ("reserve", -600), ("settle", 350)], 750)


async def test_usage_rows_filters_and_totals(db: Database) -> None:
    store = UsageStore(db)
    now = time.time()

    def row(i: int, model: str, key: str, tags: list[str]) -> dict[str, object]:
        return {
            "request_id": f"req_{i}",
            "created_at": now + i,
            "key_id": key,
            "account_id": "acct",
            "model": model,
            "provider": "p",
            "deployment": "d",
            "status": 200,
            "prompt_tokens": 10,
            "completion_tokens": i,
            "cached_tokens": 1,
            "estimated": 0,
            "cost_micros": 100 * i,
            "total_ms": 1.0,
            "upstream_ms": 0.5,
            "ttft_ms": None,
            "queued_ms": 0.0,
            "tags": tags,
            "end_user": "u",
            "request_body": None,
            "response_body": None,
        }

    with_bodies = {**row(3, "m2", "k1", []), "request_body": {"messages": [{"content": "é"}]}, "response_body": [1]}
    await store.append([row(1, "m1", "k1", ["a"]), row(2, "m1", "k2", ["a", "b"]), with_bodies])
    rows = await store.rows(UsageFilter(key_id="k1"))
    assert [r["request_id"] for r in rows] == ["req_3", "req_1"]
    assert (rows[0]["request_body"], rows[0]["response_body"], rows[1]["tags"]) == (
        {"messages": [{"content": "é"}]},
        [1],
        ["a"],
    )
    assert [r["request_id"] for r in await store.rows(UsageFilter(model="m1", since=now + 2))] == ["req_2"]
    by_model = {r["group"]: r for r in await store.totals("model", UsageFilter())}
    assert (by_model["m1"]["requests"], by_model["m1"]["cost_micros"], by_model["m2"]["completion_tokens"]) == (
        2,
        300,
        3,
    )
    by_tag = {r["group"]: r["requests"] for r in await store.totals("tag", UsageFilter())}
    assert by_tag == {"a": 2, "b": 1}
    by_key = {r["group"]: r["requests"] for r in await store.totals("key", UsageFilter())}
    assert by_key == {"k1": 2, "k2": 1}
    days = await store.totals("day", UsageFilter())
    assert sum(d["requests"] for d in days) == 3 and all(len(d["group"]) == 10 for d in days)


async def test_concurrent_writes_commit_each_one_whole_or_not_at_all(db: Database) -> None:
    """SQLite commits concurrent writes as a group: one that fails must still leave nothing behind, and the
    others must all be written (each caller hears of its own result)."""

    def account(i: int, fail: bool = False) -> Callable[[Connection], int]:
        def run(conn: Connection) -> int:
            conn.execute(t.accounts.insert().values(id=f"gc{i}", name="g", balance_micros=i, created_at=time.time()))
            if fail:
                raise RuntimeError("this write fails after its insert")
            return i

        return run

    writes = [db.write(account(i, fail=i == 7)) for i in range(30)]
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[7], RuntimeError)
    assert [r for i, r in enumerate(results) if i != 7] == [i for i in range(30) if i != 7]
    rows = await db.read(lambda conn: conn.execute(text("SELECT id FROM accounts WHERE id LIKE 'gc%'")).all())
    assert {r[0] for r in rows} == {f"gc{i}" for i in range(30) if i != 7}


async def test_driver_writes_beside_sqlalchemy_writes_each_commit_whole_or_not_at_all(tmp_path: Path) -> None:
    """SQLite: the writes every request makes run on the sqlite3 connection itself, in a transaction of
    their own beside the admin API's SQLAlchemy writes queued with them; a failing one of either kind
    leaves nothing behind and costs the others nothing."""
    db = SQLiteDatabase(sqlite_url(tmp_path))
    await db.migrate()

    def insert(conn: Any, i: int) -> None:
        sql = "INSERT INTO accounts (id, name, balance_micros, created_at) VALUES (?, 'g', ?, ?)"
        if isinstance(conn, sqlite3.Connection):
            conn.execute(sql, (f"gc{i}", i, time.time()))
        else:
            conn.exec_driver_sql(sql, (f"gc{i}", i, time.time()))

    def write(i: int) -> Awaitable[int]:
        def run(conn: Any) -> int:
            insert(conn, i)
            if i in (7, 8):
                raise RuntimeError("this write fails after its insert")
            return i

        return db.write_driver(run) if i % 2 else db.write(run)

    try:
        results = await asyncio.gather(*(write(i) for i in range(30)), return_exceptions=True)
        assert all(isinstance(results[i], RuntimeError) for i in (7, 8))
        assert [r for i, r in enumerate(results) if i not in (7, 8)] == [i for i in range(30) if i not in (7, 8)]
        rows = await db.read(lambda conn: conn.execute(text("SELECT id FROM accounts WHERE id LIKE 'gc%'")).all())
        assert {r[0] for r in rows} == {f"gc{i}" for i in range(30) if i not in (7, 8)}
    finally:
        await db.aclose()


def _replay_item(account: str, amount: int, request: str, *, if_reserved: bool = False) -> dict[str, Any]:
    return {"account_id": account, "amount": amount, "request_id": request, "key_id": None, "note": None,
            "if_reserved": if_reserved}  # fmt: skip


async def test_a_replayed_settlement_lands_once_and_a_release_only_if_its_reservation_did(db: Database) -> None:
    """What the spool writes back after an outage (store/recovery.py): its batch may have committed or not."""
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 1000)
    assert await ledger.reserve(account.id, 600, request_id="r1", key_id=None) == 400
    settle_r1 = _replay_item(account.id, 350, "r1")
    never_reserved = _replay_item(account.id, 100, "r2", if_reserved=True)
    await ledger.replay([settle_r1, never_reserved])
    await ledger.replay([settle_r1, _replay_item(account.id, 600, "r1", if_reserved=True)])  # both: settled
    assert await _books(ledger, account.id) == ([("topup", 1000), ("reserve", -600), ("settle", 350)], 750)


async def test_the_sweeper_finds_old_reservations_with_no_settlement(db: Database) -> None:
    ledger = Ledger(db)
    account = await ledger.create_account("a")
    await ledger.credit(account.id, 1000)
    for request in ("r1", "r2"):
        await ledger.reserve(account.id, 100, request_id=request, key_id=None)
    await ledger.settle(account.id, 100, 40, request_id="r2", key_id=None)
    assert await ledger.orphans(0, time.time() - 60) == ([], 0)  # none old enough yet
    releases, upto = await ledger.orphans(0, time.time() + 1)
    assert [(r["request_id"], r["amount"]) for r in releases] == [("r1", 100)]
    assert upto == 0  # the last window: looked at again next time
    newest = max(e["id"] for e in await ledger.entries(account.id))
    # ids newest-3 to newest: top-up, r1, r2, settlement of r2. A full window of old rows is passed over after.
    assert await ledger.orphans(0, time.time() + 1, window=2) == (releases, newest - 2)
    await ledger.replay(releases)
    await ledger.replay(releases)  # a second sweeper (another replica) finds it released: nothing more
    assert (await ledger.orphans(0, time.time() + 1))[0] == []
    assert (await _books(ledger, account.id))[1] == 1000 - 40


# The ledger's rule (store/moves.py) exists twice: Python on SQLite (store/sqlite.py), PL/pgSQL on PostgreSQL
# (migration 0004). The table below, and the seeded batches after it, hold both to the same answers.
# A row: the balances before; the batch, as (account, kind, amount) with reservations conditional (account
# "x" does not exist); for each move the balance after it, or None; and the moves applied, in the order
# their ledger rows are written (per account, the only order a reader can rely on).
_RULE: list[tuple[str, dict[str, int], list[tuple[str, str, int]], list[int | None], list[int]]] = [
    (
        "a reservation the balance covers (exactly too), and one it does not",
        {"a": 100},
        [("a", "reserve", -60), ("a", "reserve", -40), ("a", "reserve", -1)],
        [40, 0, None],
        [0, 1],
    ),
    (
        "settlements and top-ups before reservations, whatever their arrival",
        {"a": 10},
        [("a", "reserve", -50), ("a", "settle", 30), ("a", "topup", 20)],
        [10, 40, 60],
        [1, 2, 0],
    ),
    (
        "a refused reservation leaves room for a smaller one after it",
        {"a": 50},
        [("a", "reserve", -30), ("a", "reserve", -30), ("a", "reserve", -20)],
        [20, None, 0],
        [0, 2],
    ),
    (
        "an overrun settlement goes below zero; no reservation after it, not even of zero",
        {"a": 10},
        [("a", "settle", -25), ("a", "reserve", -1), ("a", "reserve", 0)],
        [-15, None, None],
        [0],
    ),
    ("a reservation of zero on an empty balance is applied", {"a": 0}, [("a", "reserve", 0)], [0], [0]),
    (
        "moves on an account that does not exist are not applied, and cost the others nothing",
        {"a": 5},
        [("x", "settle", 10), ("a", "reserve", -5), ("x", "reserve", -1)],
        [None, 0, None],
        [1],
    ),
    (
        "accounts are independent, each applies its own moves in the rule's order",
        {"a": 10, "b": 10},
        [("b", "reserve", -10), ("a", "reserve", -10), ("b", "settle", 5), ("a", "reserve", -1), ("b", "reserve", -5)],
        [5, 0, 15, None, 0],
        [2, 0, 4, 1],
    ),
    (
        "a negative top-up (an adjustment) is applied whatever the balance",
        {"a": 3},
        [("a", "topup", -5), ("a", "refund", 1)],
        [-2, -1],
        [0, 1],
    ),
    ("an empty batch", {"a": 7}, [], [], []),
    (
        "a reservation on the lowest balance an admin can set is refused, not an overflow",
        {"a": -(2**63 - 1)},
        [("a", "reserve", -1), ("a", "refund", 1)],
        [None, -(2**63 - 2)],
        [1],
    ),
]


async def _accounts(ledger: Ledger, balances: dict[str, int]) -> dict[str, str]:
    """Accounts named as in a table row, with those balances (a top-up each); "x" names none."""
    ids = {"x": "acct_missing"}
    for name, balance in balances.items():
        ids[name] = (await ledger.create_account(name)).id
        await ledger.credit(ids[name], balance)
    return ids


@pytest.mark.parametrize(("case", "before", "batch", "after", "written"), _RULE, ids=[r[0] for r in _RULE])
async def test_the_ledger_rule_on_a_table_of_batches(
    db: Database,
    case: str,
    before: dict[str, int],
    batch: list[tuple[str, str, int]],
    after: list[int | None],
    written: list[int],
) -> None:
    ledger = Ledger(db)
    ids = await _accounts(ledger, before)
    moves = [
        Move(ids[a], kind, amount, kind == "reserve", f"req_{i}", "key") for i, (a, kind, amount) in enumerate(batch)
    ]
    assert await ledger.move_many(moves) == after
    for name in before:
        rows = [(e["kind"], e["amount_micros"], e["request_id"]) for e in reversed(await ledger.entries(ids[name]))]
        wanted = [(m.kind, m.amount, m.request_id) for m in (moves[i] for i in written) if m.account_id == ids[name]]
        assert rows == [("topup", before[name], None), *wanted]
        found = await ledger.account(ids[name])
        assert found is not None and found.balance_micros == await ledger.ledger_sum(ids[name])
        assert found.balance_micros == before[name] + sum(
            m.amount for m in (moves[i] for i in written) if m.account_id == ids[name]
        )


def _by_the_rule(balances: dict[str, int], moves: list[Move]) -> list[int | None]:
    """The rule written out plainly, as the reference both engines must match (store/moves.py)."""
    out: list[int | None] = [None] * len(moves)
    for account in sorted({m.account_id for m in moves}):
        if account not in balances:
            continue
        mine = [i for i, m in enumerate(moves) if m.account_id == account]
        for i in [i for i in mine if not moves[i].conditional] + [i for i in mine if moves[i].conditional]:
            if not moves[i].conditional or balances[account] + moves[i].amount >= 0:
                balances[account] += moves[i].amount
                out[i] = balances[account]
    return out


async def test_the_ledger_rule_on_seeded_random_batches(db: Database) -> None:
    """Many batches drawn from one seed, so both engines get the same ones: every answer and every balance as
    the plain reference computes it."""
    rng = random.Random(20)
    ledger = Ledger(db)
    ids = await _accounts(ledger, {"a": 50, "b": 0, "c": 500})
    balances = {ids[n]: b for n, b in (("a", 50), ("b", 0), ("c", 500))}
    kinds = ("reserve", "reserve", "reserve", "settle", "topup")
    for batch in range(40):
        moves = []
        for i in range(rng.randint(0, 12)):
            kind = rng.choice(kinds)
            amount = -rng.randint(0, 120) if kind == "reserve" else rng.randint(-40, 100)
            moves.append(Move(ids[rng.choice("aabcx")], kind, amount, kind == "reserve", f"r{batch}_{i}"))
        assert await ledger.move_many(moves) == _by_the_rule(balances, moves), f"batch {batch}"
    for account, balance in balances.items():
        found = await ledger.account(account)
        assert found is not None and found.balance_micros == balance == await ledger.ledger_sum(account)


async def test_a_bulk_insert_takes_its_values_in_the_order_of_its_columns(db: Database) -> None:
    """The usage log's append (executemany on SQLite, COPY on PostgreSQL), made for any order of columns."""
    insert = db.bulk_insert(t.accounts, ("name", "balance_micros", "id", "created_at"))
    await insert([("first", 5, "bulk1", 1.0), ("second", 7, "bulk2", 2.0)])
    await insert([])
    ledger = Ledger(db)
    found = [await ledger.account(i) for i in ("bulk1", "bulk2")]
    assert [(a.id, a.name, a.balance_micros) for a in found if a is not None] == [
        ("bulk1", "first", 5),
        ("bulk2", "second", 7),
    ]
