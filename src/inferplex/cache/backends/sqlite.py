"""The response cache in an SQLite file of its own: the embedded default, shared by one server's workers.

A file of its own (`cache.sqlite_path`, default `<server.data_dir>/cache.sqlite3`), never the gateway's
database: SQLite has one writer per file, and the ledger's reservations and settlements must never wait
behind a cache write (nor a cache sweep behind a settlement). Entries can be thrown away at any time, so the
schema is not migrated: a file written by another schema version is emptied and rebuilt (`SCHEMA_VERSION`).

Reads and writes take the paths the store takes (store/sqlite.py), measured for the cache's own rows
(docs/benchmarks.md):
- A `get` is one primary-key lookup on the event loop's own read-only connection (timeout 0): under WAL it
  never waits for a writer and costs about 6 us (12 us for a 16 KiB answer), where a hop to a reader thread
  and back costs about 43 us. Only if SQLite says the file is busy (a checkpoint truncating the WAL) does
  the read go to a reader thread.
  A partition's new vectors (`vectors`) are read the same way, a page at a time on the loop; a long catch-up
  (a replica's first) reads the rest on the reader thread.
- Writes (`put`, `add_vector`, `purge`, the sweep) run on one writer thread, with store/group_commit.py's
  group commit: the puts that queue while a commit runs share the next one. A put costs the loop one hop.
- Expired rows read as absent at once, and are deleted in the background at open and every `sweep_s`, a
  thousand at a time so other writes interleave. The file is not bounded by size (the in-process backend
  is); its free pages are reused by later entries, so expired answers do not grow it forever.

Vectors carry `seq` (AUTOINCREMENT: never reused, even after the newest row is deleted) as the cursor a
replica's in-process index passes to `vectors` to read only what was filed since; SQLite commits one write
transaction at a time, so a reader never sees a seq committed after a larger one it already passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import QueuePool

from inferplex.cache.base import BackendStats, Entry, Purge
from inferplex.store.group_commit import GroupCommitWriter

T = TypeVar("T")
log = logging.getLogger("inferplex.cache")

SCHEMA_VERSION = 1  # PRAGMA user_version: another value (an older or newer gateway's) empties the file
SWEEP_S = 60.0
SWEEP_BATCH = 1000  # rows per sweep transaction, so puts interleave with a long sweep
PAGE = 256  # vectors read on the event loop per call; a longer catch-up reads the rest on the reader thread

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
  id TEXT PRIMARY KEY,
  value BLOB NOT NULL,
  created_at REAL NOT NULL,
  expires_at REAL NOT NULL,
  model TEXT NOT NULL,
  scope TEXT NOT NULL,
  namespace TEXT,
  key_id TEXT,
  partition TEXT,
  size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at, size);
CREATE INDEX IF NOT EXISTS entries_model ON entries (model);
CREATE INDEX IF NOT EXISTS entries_namespace ON entries (namespace);
CREATE INDEX IF NOT EXISTS entries_key ON entries (key_id);
CREATE INDEX IF NOT EXISTS entries_scope ON entries (scope);
CREATE TABLE IF NOT EXISTS vectors (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  partition TEXT NOT NULL,
  entry_id TEXT NOT NULL,
  vector BLOB NOT NULL,
  expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS vectors_partition ON vectors (partition, seq);
CREATE INDEX IF NOT EXISTS vectors_entry ON vectors (entry_id);
CREATE INDEX IF NOT EXISTS vectors_expiry ON vectors (expires_at);
"""

_GET = (
    "SELECT value, created_at, expires_at, model, scope, namespace, key_id, partition FROM entries "
    "WHERE id = ? AND expires_at > ?"
)
_PUT = (
    "INSERT OR REPLACE INTO entries (id, value, created_at, expires_at, model, scope, namespace, key_id, "
    "partition, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_ADD_VECTOR = "INSERT INTO vectors (partition, entry_id, vector, expires_at) VALUES (?, ?, ?, ?)"
# the partition's rows older than its newest `max` (the index reads at most that many: settings.semantic)
_TRIM = (
    "DELETE FROM vectors WHERE partition = ? AND seq <= "
    "(SELECT seq FROM vectors WHERE partition = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)"
)
_VECTORS = "SELECT seq, entry_id, vector FROM vectors WHERE partition = ? AND seq > ? AND expires_at > ? ORDER BY seq"
_VECTORS_PAGE = f"{_VECTORS} LIMIT {PAGE}"
_SWEEP = {
    table: f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE expires_at <= ? LIMIT {SWEEP_BATCH})"
    for table in ("entries", "vectors")
}
_SELECTORS = (("entry", "id"), ("model", "model"), ("namespace", "namespace"), ("key_id", "key_id"),
              ("scope", "scope"))  # fmt: skip


class SqliteBackend:
    name = "sqlite"

    def __init__(self, path: Path, *, max_vectors_per_partition: int | None, sweep_s: float) -> None:
        self.path = path
        self._max_vectors = max_vectors_per_partition
        self._sweep_s = sweep_s
        self._engine = _engine(path)
        self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="inferplex-cache-write")
        self._writer = GroupCommitWriter(self._engine, self._writer_thread)
        self._reader_thread = ThreadPoolExecutor(1, thread_name_prefix="inferplex-cache-read")
        self._reader: sqlite3.Connection | None = None  # opened on the reader thread when first needed
        self._loop_reader: sqlite3.Connection | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, path: str, *, max_vectors_per_partition: int | None = None, sweep_s: float = SWEEP_S
    ) -> SqliteBackend:
        """The cache file at `path` (created with its directory if need be), its expired rows swept in the
        background now and every `sweep_s`. `max_vectors_per_partition`: each partition keeps its newest that
        many vectors (settings.semantic.max_entries_per_partition)."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        backend = cls(file, max_vectors_per_partition=max_vectors_per_partition, sweep_s=sweep_s)
        try:
            await backend._writer.write_raw(_create)
            backend._loop_reader = _connect(file, timeout=0)
            backend._loop_reader.execute("PRAGMA query_only=1")
        except BaseException:
            await backend.aclose()
            raise
        backend._sweeper = asyncio.get_running_loop().create_task(backend._sweep_every(), name="cache-sqlite-sweep")
        return backend

    # ---- reads ------------------------------------------------------------------------------------------------

    async def get(self, entry_id: str) -> Entry | None:
        # fetchall, not fetchone: the statement runs to its end, so no read transaction stays open on the
        # loop's connection (one would hold back the WAL's checkpoints)
        rows = await self._read(lambda conn: conn.execute(_GET, (entry_id, time.time())).fetchall())
        if not rows:
            return None
        value, created_at, expires_at, model, scope, namespace, key_id, partition = rows[0]
        return Entry(entry_id, value, created_at, expires_at, model, scope, namespace, key_id, partition)

    async def vectors(self, partition: str, after: int) -> tuple[list[tuple[str, bytes]], int]:
        now = time.time()
        rows: list[tuple[int, str, bytes]] = await self._read(
            lambda conn: conn.execute(_VECTORS_PAGE, (partition, after, now)).fetchall()
        )
        if len(rows) == PAGE:  # a long catch-up: the rest off the loop
            last = rows[-1][0]
            rows += await self._on_reader(lambda conn: conn.execute(_VECTORS, (partition, last, now)).fetchall())
        cursor = rows[-1][0] if rows else after
        return [(entry_id, vector) for _, entry_id, vector in rows], cursor

    async def stats(self) -> BackendStats:
        def count(conn: sqlite3.Connection) -> tuple[int, int, int]:
            now = time.time()
            entries, size = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries WHERE expires_at > ?", (now,)
            ).fetchone()
            (vectors,) = conn.execute("SELECT COUNT(*) FROM vectors WHERE expires_at > ?", (now,)).fetchone()
            return int(entries), int(size), int(vectors)

        entries, size, vectors = await self._on_reader(count)
        return BackendStats(self.name, entries, size, vectors)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the event loop's connection, or on the reader thread if SQLite reports the file busy."""
        if self._loop_reader is not None:
            with contextlib.suppress(sqlite3.OperationalError):
                return fn(self._loop_reader)
        return await self._on_reader(fn)

    async def _on_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._reader is None:
                self._reader = _connect(self.path, timeout=30)
                self._reader.execute("PRAGMA query_only=1")
            return fn(self._reader)

        return await asyncio.get_running_loop().run_in_executor(self._reader_thread, run)

    # ---- writes -----------------------------------------------------------------------------------------------

    async def put(self, entry: Entry) -> None:
        row = (
            entry.id, entry.value, entry.created_at, entry.expires_at, entry.model, entry.scope, entry.namespace,
            entry.key_id, entry.partition, len(entry.value),
        )  # fmt: skip
        await self._writer.write_raw(lambda conn: conn.execute(_PUT, row))

    async def add_vector(self, partition: str, entry_id: str, vector: bytes, expires_at: float) -> None:
        limit = self._max_vectors

        def add(conn: sqlite3.Connection) -> None:
            conn.execute(_ADD_VECTOR, (partition, entry_id, vector, expires_at))
            if limit is not None:
                conn.execute(_TRIM, (partition, partition, limit))

        await self._writer.write_raw(add)

    async def purge(self, selector: Purge) -> int:
        where, args = _where(selector)

        def purge(conn: sqlite3.Connection) -> int:
            (live,) = conn.execute(f"SELECT COUNT(*) FROM entries WHERE {where} AND expires_at > ?",
                                   (*args, time.time())).fetchone()  # fmt: skip
            if selector == Purge():
                conn.execute("DELETE FROM vectors")
            else:
                conn.execute(f"DELETE FROM vectors WHERE entry_id IN (SELECT id FROM entries WHERE {where})", args)
                if selector.entry is not None:  # filed for an entry that was never stored, or already swept
                    conn.execute("DELETE FROM vectors WHERE entry_id = ?", (selector.entry,))
            conn.execute(f"DELETE FROM entries WHERE {where}", args)
            return int(live)

        return await self._writer.write_raw(purge)

    async def sweep(self) -> int:
        """Delete the expired rows, a batch per transaction; how many entries were deleted."""
        deleted = 0
        for table, statement in _SWEEP.items():
            while True:
                n: int = await self._writer.write_raw(partial(_delete_expired, statement, time.time()))
                if table == "entries":
                    deleted += n
                if n < SWEEP_BATCH:
                    break
        return deleted

    async def _sweep_every(self) -> None:
        """A sweep at once (what expired while the gateway was down: in the background, so a large file does
        not hold up the start), then every `sweep_s`."""
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # a busy or broken file: the next sweep tries again
                log.warning("cache: sweeping %s failed: %s", self.path, exc)
            await asyncio.sleep(self._sweep_s)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(BaseException):
                await self._sweeper
            self._sweeper = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer_thread, self._writer.close)
        await loop.run_in_executor(self._writer_thread, self._engine.dispose)
        if self._reader is not None:
            await loop.run_in_executor(self._reader_thread, self._reader.close)
            self._reader = None
        self._writer_thread.shutdown(wait=True)
        self._reader_thread.shutdown(wait=True)
        if self._loop_reader is not None:
            self._loop_reader.close()
            self._loop_reader = None


def _delete_expired(statement: str, now: float, conn: sqlite3.Connection) -> int:
    return conn.execute(statement, (now,)).rowcount


def _where(selector: Purge) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition for a purge: every field given must match (none given: every row)."""
    given = [(column, getattr(selector, field)) for field, column in _SELECTORS if getattr(selector, field) is not None]
    if not given:
        return "1", ()
    return " AND ".join(f"{column} = ?" for column, _ in given), tuple(value for _, value in given)


def _create(conn: sqlite3.Connection) -> None:
    """The schema, on the writer thread inside BEGIN IMMEDIATE (so workers starting together agree); a file
    of another schema version is emptied first."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version != SCHEMA_VERSION:
        for table in ("entries", "vectors"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    for statement in _SCHEMA.split(";"):  # one by one: executescript would COMMIT the writer's transaction
        if statement.strip():
            conn.execute(statement)


def _connect(path: Path, *, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)


def _engine(path: Path) -> Engine:
    """The writer's connection source (store/group_commit.py takes an engine): WAL, so the loop's reads never
    wait for a write; synchronous NORMAL, so a commit does not wait for the disk (a crash may lose the last
    commits, which for a cache is a few misses)."""
    engine = create_engine(
        f"sqlite:///{path}", connect_args={"timeout": 30, "check_same_thread": False}, poolclass=QueuePool
    )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # the group commit issues BEGIN itself
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    return engine
