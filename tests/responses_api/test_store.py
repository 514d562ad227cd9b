"""The stored responses' rows (responses_api/store.py) on SQLite and PostgreSQL: owner scoping, the background
lease (claimed once, fenced by its token, taken over when it lapses), events appended only while the run
holds a running row, the finished row written with its last events, cancel, and the retention sweep."""

from __future__ import annotations

import asyncio
from typing import Any

from inferplex.responses_api.store import ResponseRows, StoredResponse, dumps, new_response_id, response_events
from inferplex.store.backend import Database
from tests.accounts.conftest import migrated_db, pg_url  # noqa: F401


def _row(owner: str = "acct-1", **values: Any) -> dict[str, Any]:
    response_id = new_response_id()
    row = {
        "id": response_id, "owner": owner, "account_id": owner, "key_id": "key-1", "scopes": dumps(["chat"]),
        "model": "m", "status": "completed", "background": False, "previous_response_id": None,
        "request": dumps({"model": "m", "input": "hi"}), "input_items": dumps([{"id": "msg_1"}]),
        "response": dumps({"id": response_id, "status": "completed"}), "history": dumps([{"id": "msg_1"}]),
        "request_id": "req_1", "cost_micros": 7, "created_at": 1000.0, "completed_at": 1001.0,
        "expires_at": 5000.0, "next_run_at": None, "attempts": 0, "claimed_by": None, "claimed_until": None,
    }  # fmt: skip
    return row | values


def _ids(rows: list[StoredResponse]) -> list[str]:
    return [r.id for r in rows]


def _queued(**values: Any) -> dict[str, Any]:
    return _row(status="queued", background=True, history=None, cost_micros=None, next_run_at=100.0, **values)


async def test_rows_are_their_owners(migrated_db: Database) -> None:  # noqa: F811
    rows = ResponseRows(migrated_db)
    values = _row()
    await rows.insert(values)
    found = await rows.get(values["id"], "acct-1")
    assert found is not None and found.history == [{"id": "msg_1"}] and found.scopes == frozenset({"chat"})
    assert found.cost_micros == 7 and found.background is False
    assert await rows.get(values["id"], "acct-2") is None
    assert await rows.delete(values["id"], "acct-2") is None
    assert await rows.delete(values["id"], "acct-1") is not None
    assert await rows.get(values["id"]) is None


async def test_a_due_row_is_claimed_once_and_fenced_by_its_token(migrated_db: Database) -> None:  # noqa: F811
    rows = ResponseRows(migrated_db)
    values = _queued()
    await rows.insert(values)
    first, second = await asyncio.gather(rows.claim("a" * 32, 200.0, 10.0, 50), rows.claim("b" * 32, 200.0, 10.0, 50))
    claimed = [r for r in (*first, *second) if r.id == values["id"]]
    assert len(claimed) == 1 and claimed[0].attempts == 1
    holder, other = ("a" * 32, "b" * 32) if first else ("b" * 32, "a" * 32)
    assert values["id"] not in _ids(await rows.claim(other, 205.0, 10.0, 50))  # held until 210
    assert not await rows.fenced(values["id"], other, {"status": "in_progress"})
    assert await rows.fenced(values["id"], holder, {"status": "in_progress"})
    taken = [r for r in await rows.claim(other, 211.0, 10.0, 50) if r.id == values["id"]]  # the lease lapsed
    assert len(taken) == 1 and taken[0].status == "in_progress" and taken[0].attempts == 2
    assert not await rows.append_events(values["id"], holder, [(0, "{}")], 230.0)  # the stale run writes nothing
    assert await rows.event_count(values["id"]) == 0


async def test_events_append_until_the_row_finishes_or_is_cancelled(migrated_db: Database) -> None:  # noqa: F811
    rows = ResponseRows(migrated_db)
    values = _queued()
    await rows.insert(values)
    token = "c" * 32
    await rows.claim(token, 200.0, 10.0, 50)
    assert await rows.fenced(values["id"], token, {"status": "in_progress"})
    assert await rows.append_events(values["id"], token, [(0, '{"n":0}'), (1, '{"n":1}')], 215.0)
    assert await rows.events_after(values["id"], 0) == [(1, '{"n":1}')]
    final = {"status": "completed", "response": dumps({"status": "completed"}), "next_run_at": None}
    assert await rows.append_events(values["id"], token, [(2, '{"n":2}')], None, final)
    done = await rows.get(values["id"])
    assert done is not None and done.status == "completed" and done.next_run_at is None
    assert await rows.event_count(values["id"]) == 3
    assert not await rows.append_events(values["id"], token, [(3, "{}")], None)  # finished: nothing more

    other = _queued()
    await rows.insert(other)
    await rows.claim(token, 300.0, 10.0, 50)
    cancelled = await rows.cancel(other["id"], "acct-1")
    assert cancelled is not None and cancelled.status == "cancelled" and cancelled.next_run_at is None
    assert not await rows.append_events(other["id"], token, [(0, "{}")], 320.0)  # the run sees it and stops
    assert other["id"] not in _ids(await rows.claim("d" * 32, 400.0, 10.0, 50))  # never runs again


async def test_the_sweep_deletes_expired_finished_rows_with_their_events(migrated_db: Database) -> None:  # noqa: F811
    rows = ResponseRows(migrated_db)
    old, young, running = _row(expires_at=10.0), _row(expires_at=10**10), _queued(expires_at=10.0)
    for values in (old, young, running):
        await rows.insert(values)
    token = "e" * 32
    await rows.claim(token, 200.0, 10.0, 50)
    await rows.append_events(running["id"], token, [(0, "{}")], 215.0)
    await rows.update(old["id"], {"background": True})

    def add_event(conn: Any) -> None:
        conn.execute(response_events.insert().values(response_id=old["id"], seq=0, data="{}"))

    await migrated_db.write(add_event)
    assert await rows.sweep(100.0) >= 1
    assert await rows.get(old["id"]) is None and await rows.event_count(old["id"]) == 0
    assert await rows.get(young["id"]) is not None
    assert await rows.get(running["id"]) is not None  # unfinished: kept until it finishes
