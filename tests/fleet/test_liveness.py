"""A lost replica's reservations, released by a survivor once its liveness lease lapses (store/liveness.py), on
both engines: only its reservations, only those with no settlement, exactly once, the books whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import delete

from inferplex.store.backend import Database
from inferplex.store.ledger import Ledger
from inferplex.store.liveness import Liveness, replicas
from inferplex.store.spool import Spool

LEASE_S = 1.0


async def _outlive(survivor: Liveness, seconds: float) -> None:
    """Let `seconds` pass while `survivor` renews its lease as its replica would (every third of it)."""
    for _ in range(round(seconds / (LEASE_S / 3)) + 1):
        await survivor.renew()
        await asyncio.sleep(LEASE_S / 3)
    await survivor.renew()


async def _replica(db: Database, data: Path) -> tuple[Ledger, Liveness]:
    data.mkdir()  # noqa: ASYNC240 (a test's tmp dir)
    ledger = Ledger(db, Spool(data / "spool.db"))
    liveness = Liveness(db, ledger, LEASE_S)
    await liveness.renew()
    return ledger, liveness


async def test_a_survivor_releases_what_a_lost_replica_held_once_its_lease_lapses(
    migrated_db: Database, tmp_path: Path
) -> None:
    db = migrated_db
    await db.write(lambda conn: conn.execute(delete(replicas)))  # the module's database: earlier tests' rows
    lost_ledger, lost = await _replica(db, tmp_path / "lost")
    ledger, survivor = await _replica(db, tmp_path / "survivor")
    acct = (await ledger.create_account("fleet")).id
    await ledger.credit(acct, 1000)
    assert await lost_ledger.reserve(acct, 100, request_id="open", key_id=None) == 900
    assert await lost_ledger.reserve(acct, 50, request_id="answered", key_id=None) == 850
    assert await lost_ledger.settle(acct, 50, 20, request_id="answered", key_id=None) == 880
    assert await ledger.reserve(acct, 10, request_id="the-survivors", key_id=None) == 870
    await lost.renew()

    assert await survivor.take_over() == 0  # its lease runs: it is not lost
    await _outlive(survivor, LEASE_S)  # it renews no more
    assert await survivor.take_over() == 1
    account = await ledger.account(acct)
    assert account is not None
    assert (account.balance_micros, account.month_reserved_micros) == (970, 10)  # the survivor's 10 still held
    assert account.balance_micros == await ledger.ledger_sum(acct)
    released = [e for e in await ledger.entries(acct) if e["request_id"] == "open" and e["kind"] == "settle"]
    assert [(e["amount_micros"], e["note"]) for e in released] == [(100, f"released: replica {lost.id} was lost")]

    assert await survivor.take_over() == 0  # its row is gone: once only
    # Its settlement, if it comes after all (it was not lost, only cut off): skipped, not a second refund.
    assert await lost_ledger.settle(acct, 100, 40, request_id="open", key_id=None) == 970
    assert await ledger.ledger_sum(acct) == 970
    await lost_ledger.aclose()
    await ledger.aclose()


async def test_a_replica_that_comes_back_registers_again_and_a_clean_stop_leaves_nothing(
    migrated_db: Database, tmp_path: Path
) -> None:
    db = migrated_db
    await db.write(lambda conn: conn.execute(delete(replicas)))
    slow_ledger, slow = await _replica(db, tmp_path / "slow")
    ledger, survivor = await _replica(db, tmp_path / "survivor")
    acct = (await ledger.create_account("fleet")).id
    await ledger.credit(acct, 1000)
    await _outlive(survivor, LEASE_S)
    assert await survivor.take_over() == 0  # nothing held: its row goes all the same
    lapsed = slow.id
    await slow.renew()  # it was only slow: back in the fleet, under a new id (the old one's holdings may be gone)
    assert slow.id != lapsed and slow_ledger.holding.holder == slow.id
    assert await slow_ledger.reserve(acct, 100, request_id="r1", key_id=None) == 900
    await slow.aclose(settled=True)  # a clean stop: its row goes, and with it what a survivor would release
    await _outlive(survivor, LEASE_S)
    assert await survivor.take_over() == 0
    assert await slow_ledger.settle(acct, 100, 30, request_id="r1", key_id=None) == 970
    await slow_ledger.aclose()
    await ledger.aclose()
