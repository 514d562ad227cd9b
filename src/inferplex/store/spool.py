"""The spool: ledger moves and usage rows the database could not take, kept on local disk until it can.

When a settlement or a usage batch cannot be written (the database unreachable, the connection broken, or
silent past `storage.timeout_s`), what it carried is appended here, in an SQLite file of the replica's own
in the data directory (`spool.db`), committed with `synchronous=FULL` before the failure is reported. So a
store outage loses nothing the gateway already answered for, and neither does a restart: the next process
with the same data directory writes what the last one left (store/recovery.py). The spool is written only
when a store write fails, so the hot path never touches it.

Items leave the spool only after the database has taken them. A write that may have committed before its
connection broke is written again idempotently (`Ledger.replay`, `UsageStore.append_once`), so each item
lands exactly once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

MOVE, USAGE = "move", "usage"  # what an item is: a ledger move to replay, or a usage row


class Spool:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One connection, used from the event loop's thread and (rarely) from a shutdown's: the lock keeps
        # each transaction whole. Only failures write here, so it is never contended on the hot path.
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")  # a spooled settlement survives a power cut too
        self._conn.execute("CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, body BLOB)")
        self._count = {kind: self._counted(kind) for kind in (MOVE, USAGE)}

    def _counted(self, kind: str) -> int:
        return int(self._conn.execute("SELECT count(*) FROM items WHERE kind = ?", (kind,)).fetchone()[0])

    def put(self, kind: str, items: Iterable[dict[str, Any]]) -> int:
        """Append `items` durably (one transaction); how many went in."""
        bodies = [(kind, orjson.dumps(item)) for item in items]
        if bodies:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("INSERT INTO items (kind, body) VALUES (?, ?)", bodies)
                self._conn.execute("COMMIT")
                self._count[kind] += len(bodies)
        return len(bodies)

    def take(self, kind: str, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The oldest `limit` items of `kind` with their ids; they stay until `forget`."""
        if not self._count[kind]:
            return []
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, body FROM items WHERE kind = ? ORDER BY id LIMIT ?", (kind, limit)
            ).fetchall()
        return [(int(i), orjson.loads(body)) for i, body in rows]

    def forget(self, kind: str, ids: list[int]) -> None:
        """Drop items the database has taken."""
        if ids:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("DELETE FROM items WHERE id = ?", [(i,) for i in ids])
                self._conn.execute("COMMIT")
                self._count[kind] = self._counted(kind)

    def pending(self, kind: str) -> int:
        return self._count[kind]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
