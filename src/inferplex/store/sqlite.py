"""SQLite, the default database (a file under the data directory): one writer thread, and reads beside it.

Every transaction runs on a single writer thread with the standard `sqlite3` driver, inside BEGIN
IMMEDIATE, with the writes queued meanwhile sharing one commit (store/group_commit.py). One thread means
writes are serialized inside the process with no lock, one thread hop per *transaction* (aiosqlite hops
once per statement, which made a reservation cost four wake-ups of the event loop); BEGIN IMMEDIATE makes
other processes sharing the file wait on SQLite's own lock instead of failing a read-then-write. Reads run
on their own threads (WAL lets them proceed beside a writer), and the key lookup on the event loop's own
read-only connection.

The ledger's rule (store/moves.py) runs here in Python: the writer holds the write lock for the whole
batch, so each account's balance is read once, the moves applied to it in order, and written back once.
Migrations run under an exclusive file lock beside the database file, so processes starting together
upgrade once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, Table, bindparam, create_engine, event, insert, make_url, select, update
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.pool import QueuePool

from inferplex.store import tables as t
from inferplex.store.backend import BulkInsert, Database, upgrade
from inferplex.store.driver import DriverStatement, first_row, row_of
from inferplex.store.group_commit import GroupCommitWriter
from inferplex.store.key_cache import CountedKeyCache, KeyCache
from inferplex.store.moves import ENTRY_COLUMNS, Move, Result, Spend, apply_rule, month_of
from inferplex.store.sqlite_rollups import append_rolled_up, roll_up_from

T = TypeVar("T")

# The ledger's statements, built once at import (statement construction is most of the CPU of a move here),
# compiled for SQLite once per database and run on the sqlite3 handle (store/driver.py).
_acc = t.accounts.c
_BALANCE = select(
    _acc.balance_micros, _acc.monthly_cap_micros, _acc.spend_month, _acc.month_spent_micros, _acc.month_reserved_micros
).where(_acc.id == bindparam("account"))
_ADD = (
    update(t.accounts)
    .where(_acc.id == bindparam("account"))
    .values(
        balance_micros=_acc.balance_micros + bindparam("amount"),
        spend_month=bindparam("month"),
        month_spent_micros=bindparam("spent"),
        month_reserved_micros=bindparam("reserved"),
    )
    .returning(_acc.balance_micros)
)
_KEY = (
    select(t.api_keys.c.monthly_cap_micros, t.key_spend.c.spend_month, t.key_spend.c.month_spent_micros,
           t.key_spend.c.month_reserved_micros)
    .select_from(t.api_keys.outerjoin(t.key_spend, t.key_spend.c.key_id == t.api_keys.c.id))
    .where(t.api_keys.c.id == bindparam("key"))
)  # fmt: skip
_KEY_SPEND = select(
    t.key_spend.c.spend_month, t.key_spend.c.month_spent_micros, t.key_spend.c.month_reserved_micros
).where(t.key_spend.c.key_id == bindparam("key"))
_KEY_WRITE = (
    "INSERT INTO key_spend (key_id, spend_month, month_spent_micros, month_reserved_micros) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key_id) DO UPDATE SET spend_month = excluded.spend_month, "
    "month_spent_micros = excluded.month_spent_micros, month_reserved_micros = excluded.month_reserved_micros"
)
_ENTRY = insert(t.ledger).values({c: bindparam(c) for c in ENTRY_COLUMNS})


def _spend(row: Mapping[str, Any] | None, cap: int | None, month: int) -> Spend:
    """A month as stored (none yet: nothing spent), rolled to `month`."""
    if row is None or row["spend_month"] is None:
        return Spend(cap, month, 0, 0)
    return Spend(
        cap, int(row["spend_month"]), int(row["month_spent_micros"]), int(row["month_reserved_micros"])
    ).rolled(month)


def sqlite_path(url: str) -> Path | None:
    """The database file a `sqlite://` URL names, or None for an in-memory database."""
    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


class SQLiteDatabase(Database):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        path = sqlite_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        sync_url = make_url(url).set(drivername="sqlite")
        kw: dict[str, Any] = {"connect_args": {"timeout": 30, "check_same_thread": False}, "poolclass": QueuePool}
        self._sync = create_engine(sync_url, **kw)
        _pragmas(self._sync, immediate=True)
        self._reader = create_engine(sync_url, **kw)
        _pragmas(self._reader, immediate=False)
        self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="inferplex-db-write")
        self._writer = GroupCommitWriter(self._sync, self._writer_thread)
        self._reader_threads = ThreadPoolExecutor(2, thread_name_prefix="inferplex-db-read")
        self._loop_reader = _loop_reader(path) if path is not None else None
        self._balance, self._add, self._entry = (self.driver_statement(q) for q in (_BALANCE, _ADD, _ENTRY))
        self._key, self._key_spend = self.driver_statement(_KEY), self.driver_statement(_KEY_SPEND)

    @property
    def dialect(self) -> Dialect:
        return self._sync.dialect

    async def fetchrow(self, statement: DriverStatement, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """On the event loop's own connection, which under WAL never waits for a writer and answers an indexed
        lookup in microseconds, far less than a hop to a reader thread and back; only if SQLite reports the
        file busy (a checkpoint truncating the WAL) does the read go to a reader thread, which may wait."""
        if self._loop_reader is not None:
            with contextlib.suppress(sqlite3.OperationalError):
                return first_row(self._loop_reader, statement, params)
        return await self._on_reader(lambda conn: row_of(conn, statement, params))

    async def write(self, fn: Callable[[Connection], T]) -> T:
        return await self._writer.write(fn)

    async def write_driver(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`write` for a function of the sqlite3 connection itself (store/group_commit.py)."""
        return await self._writer.write_raw(fn)

    async def single(self, fn: Callable[[Connection], T]) -> T:
        return await self._on_reader(fn)

    async def apply_moves(self, moves: Sequence[Move], now: float) -> list[Result]:
        """The rule (store/moves.apply_rule) on the writer thread, which holds the write lock for the whole
        batch: each account's balance and month, and each key's month, read once and written back once."""
        month = month_of(now)

        def run(conn: sqlite3.Connection) -> list[Result]:
            balances: dict[str, int] = {}
            accounts: dict[str, Spend] = {}
            for account in {m.account_id for m in moves}:
                row = first_row(conn, self._balance, {"account": account})
                if row is not None:
                    balances[account] = int(row["balance_micros"])
                    accounts[account] = _spend(row, row["monthly_cap_micros"], month)
            named = {m.key_id for m in moves if m.key_id is not None and m.account_id in balances}
            keys = {k: self._key_month(conn, k, month) for k in named if k is not None}
            start = dict(balances)
            out, applied = apply_rule(moves, balances, accounts, keys)
            for account, balance in balances.items():
                s = accounts[account]
                if balance != start[account] or s.dirty:
                    params = {"account": account, "amount": balance - start[account], "month": s.month}
                    first_row(conn, self._add, {**params, "spent": s.spent, "reserved": s.reserved})
            written = [(k, s.month, s.spent, s.reserved) for k, s in keys.items() if s.dirty]
            if written:
                conn.executemany(_KEY_WRITE, written)
            if applied:
                entries = []
                for i in applied:
                    m = moves[i]
                    values = (m.account_id, m.kind, m.amount, m.request_id, m.key_id, m.note, now)
                    entries.append(self._entry.args(dict(zip(ENTRY_COLUMNS, values, strict=True))))
                conn.executemany(self._entry.sql, entries)
            return out

        return await self._writer.write_raw(run)

    def _key_month(self, conn: sqlite3.Connection, key: str, month: int) -> Spend:
        """A key's cap and month (a key id with no key: no cap, its month still counted)."""
        row = first_row(conn, self._key, {"key": key})
        if row is None:
            return _spend(first_row(conn, self._key_spend, {"key": key}), None, month)
        return _spend(row, row["monthly_cap_micros"], month)

    def usage_inserted(self, conn: Connection, row_id: int) -> None:
        roll_up_from(conn, row_id)

    def bulk_insert(self, table: Table, columns: Sequence[str]) -> BulkInsert:
        """An executemany on the sqlite3 handle, in a transaction of the writer's own: SQLAlchemy's per-row
        parameter processing cost more CPU than SQLite's insert itself (docs/benchmarks.md)."""
        quote = self.dialect.identifier_preparer
        names = ", ".join(quote.quote(c) for c in columns)
        sql = f"INSERT INTO {quote.format_table(table)} ({names}) VALUES ({', '.join('?' * len(columns))})"

        if table.name == "usage":  # rolled up once per batch (store/sqlite_rollups.py): SQLite has no trigger for it

            async def append_usage(rows: list[tuple[Any, ...]]) -> None:
                await self._writer.write_raw(lambda conn: append_rolled_up(conn, sql, rows))

            return append_usage

        async def append(rows: list[tuple[Any, ...]]) -> None:
            await self._writer.write_raw(lambda conn: conn.executemany(sql, rows))

        return append

    def key_cache(self) -> KeyCache:
        return CountedKeyCache(self.key_generation)

    def key_generation(self) -> int | None:
        """`key_changes.generation` (migration 0003) read on the event loop's own connection, or None if it
        cannot be read right now (the file busy, or no file)."""
        if self._loop_reader is None:
            return None
        try:
            row = self._loop_reader.execute("SELECT generation FROM key_changes").fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else int(row[0])

    async def _on_reader(self, fn: Callable[[Connection], T]) -> T:
        def run() -> T:
            with self._reader.connect() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._reader_threads, run)

    async def migrate(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._writer_thread, self._migrate)

    def _migrate(self) -> None:
        path = sqlite_path(self.url)
        lock = open(str(path) + ".migrate.lock", "w") if path else None
        try:
            if lock is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            with self._sync.connect() as conn:
                upgrade(conn)
                conn.commit()
        finally:
            if lock is not None:
                lock.close()

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer_thread, self._writer.close)
        await loop.run_in_executor(self._writer_thread, self._sync.dispose)
        await loop.run_in_executor(self._reader_threads, self._reader.dispose)
        self._writer_thread.shutdown(wait=True)
        self._reader_threads.shutdown(wait=True)
        if self._loop_reader is not None:
            self._loop_reader.close()


def _loop_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the event loop's thread: fails at once (timeout 0) rather than block it."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA query_only=1")
    return conn


def _pragmas(engine: Engine, *, immediate: bool) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (reads: none, autocommit)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    if immediate:

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
