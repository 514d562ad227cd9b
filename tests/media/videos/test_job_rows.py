"""The job rows' leases on each engine: concurrent claims never share a job, a lapsed lease passes the job on
and fences out its old holder, the concurrent-job limit is exact under concurrent inserts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.accounts.guard import AccountGuard, Deferred
from inferplex.config import AccountsConfig
from inferplex.jobs.rows import JobRows, Seats, new_job_id
from inferplex.limits.memory import MemoryLimits
from inferplex.limits.slots import FairSlots
from inferplex.store.backend import Database
from inferplex.store.engine import open_database
from inferplex.store.ledger import Ledger


@pytest.fixture(params=["sqlite", "postgresql"])
async def rows(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobRows]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    db: Database = open_database(url)
    await db.migrate()
    yield JobRows(db)
    await db.aclose()


def _values(owner: str = "acct_1", **over: Any) -> dict[str, Any]:
    now = time.time()
    return {
        "id": new_job_id(), "kind": "video", "owner": owner, "account_id": owner, "key_id": "key_1",
        "model": "sora-2", "deployment": "sora-a/sora-2", "status": "queued", "progress": 0, "prompt": "p",
        "seconds": "4", "size": "720x1280", "request_id": "req_" + new_job_id(), "reserved_micros": 400_000,
        "settled": False, "created_at": now, "next_poll_at": now - 1, "polls": 0, **over,
    }  # fmt: skip


async def test_concurrent_claims_share_no_job(rows: JobRows) -> None:
    for _ in range(30):
        assert await rows.insert(_values(), Seats()) is None
    now = time.time()
    claims = await asyncio.gather(*(rows.claim(f"token{i}", now, 30, 7) for i in range(6)))
    ids = [job.id for claim in claims for job in claim]
    assert len(ids) == len(set(ids)) == 30
    assert await rows.claim("late", now, 30, 50) == []  # every one is leased


async def test_a_lapsed_lease_passes_the_job_on_and_fences_the_old_holder(rows: JobRows) -> None:
    await rows.insert(_values(), Seats())
    now = time.time()
    (job,) = await rows.claim("first", now, 0.2, 10)
    assert await rows.claim("second", now, 5, 10) == []
    (again,) = await rows.claim("second", now + 1, 5, 10)
    assert again.id == job.id
    assert not await rows.fenced(job.id, "first", {"progress": 50})
    assert await rows.fenced(job.id, "second", {"progress": 60}, statuses=("queued",))
    assert not await rows.fenced(job.id, "second", {"progress": 70}, statuses=("completed",))
    got = await rows.get(job.id)
    assert got is not None and got.progress == 60


async def test_the_concurrent_job_limit_is_exact_under_concurrent_inserts(rows: JobRows) -> None:
    seats = Seats((("key_id", "key_1", 10), ("account_id", "acct_1", 3)))
    results = await asyncio.gather(*(rows.insert(_values(), seats) for _ in range(12)))
    assert results.count(None) == 3 and results.count("account_id") == 9
    theirs = Seats((("key_id", "key_2", 10), ("account_id", "acct_2", 3)))
    assert await rows.insert(_values("acct_2", account_id="acct_2", key_id="key_2"), theirs) is None


async def test_delete_cancels_an_active_job_and_hides_it(rows: JobRows) -> None:
    values = _values()
    await rows.insert(values, Seats())
    before = await rows.delete(values["id"], "acct_1", time.time(), time.time() + 5)
    assert before is not None and before.status == "queued"
    assert await rows.get(values["id"]) is None
    assert await rows.delete(values["id"], "acct_1", time.time(), time.time()) is None
    assert await rows.page("acct_1", None, 10, "desc") == ([], False)


class _Usage:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


async def test_a_jobs_reservation_is_settled_once_however_often_it_is_asked(rows: JobRows) -> None:
    """What a replica that died between settling and marking its row settled leaves: the next one settles
    again, and the ledger takes it once (concurrent tries too); a release after it changes nothing."""
    ledger = Ledger(rows.db)
    account = await ledger.create_account("videos")
    await ledger.credit(account.id, 1_000_000)
    assert await ledger.reserve(account.id, 400_000, request_id="req_job", key_id=None) == 600_000
    limits = MemoryLimits()
    usage = _Usage()
    guard = AccountGuard(ledger, limits, FairSlots(limits, 0.25), usage, AccountsConfig())  # type: ignore[arg-type]
    held = Deferred(account.id, None, 400_000, "req_job")
    await asyncio.gather(*(guard.settle_deferred(held, 300_000, {"status": 200}) for _ in range(5)))
    await guard.settle_deferred(held, None, {"status": 502})
    found = await ledger.account(account.id)
    assert found is not None and found.balance_micros == 700_000 and found.month_spent_micros == 300_000
    assert [e["kind"] for e in await ledger.entries(account.id)].count("settle") == 1
    assert await ledger.ledger_sum(account.id) == 700_000
    await ledger.aclose()
