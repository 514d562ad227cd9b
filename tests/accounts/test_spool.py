"""The spool keeps what a store outage could not take, on disk, until it is written: across a restart too."""

from __future__ import annotations

from pathlib import Path

from inferplex.store.spool import MOVE, USAGE, Spool


def test_items_survive_a_reopen_and_leave_only_when_forgotten(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool.put(MOVE, [{"request_id": "r1", "amount": 5}, {"request_id": "r2", "amount": -3}])
    spool.put(USAGE, [{"request_id": "r1", "end_user": "a\u0000b", "tags": ["x"]}])
    spool.close()
    again = Spool(tmp_path / "spool.db")  # the next process, same data directory
    assert (again.pending(MOVE), again.pending(USAGE)) == (2, 1)
    moves = again.take(MOVE, 10)
    assert [item for _, item in moves] == [{"request_id": "r1", "amount": 5}, {"request_id": "r2", "amount": -3}]
    again.forget(MOVE, [moves[0][0]])
    assert [item["request_id"] for _, item in again.take(MOVE, 10)] == ["r2"]
    assert again.take(USAGE, 10)[0][1]["end_user"] == "a\u0000b"
    again.close()
