"""The database: SQLAlchemy Core, migrated at start; one transaction = one function run on the right thread.

Stores hand `read` / `write` a plain synchronous function of a SQLAlchemy `Connection`:

- SQLite (the default, a file under the data directory): the function runs on a single writer thread with
  the standard `sqlite3` driver, inside BEGIN IMMEDIATE, with the writes queued meanwhile sharing one
  commit (store/group_commit.py). One thread means writes are serialized inside the process with no lock,
  one thread hop per *transaction* (aiosqlite hops once per statement, which made a reservation cost four
  wake-ups of the event loop); BEGIN IMMEDIATE makes other processes sharing the file wait on SQLite's own
  lock instead of failing a read-then-write. Reads run on their own threads (WAL lets them proceed beside
  a writer).
- PostgreSQL (asyncpg): the same function runs through `AsyncConnection.run_sync`; atomicity comes from
  single conditional statements (see store/ledger.py).

On both, the statements every keyed request runs (the key lookup, the reservation, the settlement) are
compiled once by SQLAlchemy and run on the driver itself (store/driver.py): asyncpg on a pool of its own,
or the sqlite3 handle of the thread's connection. SQLAlchemy's per-execution work (and on PostgreSQL its
async greenlet layer) cost several times the query itself (docs/benchmarks.md).

Every call to PostgreSQL has a deadline (`storage.timeout_s`): a database that goes silent (packets dropped,
no reset) costs a request at most that long, then a 503 `store_unavailable`, instead of holding it until
TCP gives up. The per-request calls take the shared `Deadline` (one timer per event loop), and a connection
whose call failed or ran out of time is closed, never reused; SQLAlchemy's connections (admin calls) take
asyncpg's own connect and command timeouts, and are pinged when taken from the pool, so the first admin call
after an outage gets a fresh connection rather than one the outage broke.

Migrations run through Alembic with a programmatic config (no alembic.ini): under a PostgreSQL advisory
lock, or an exclusive file lock beside the SQLite file, so replicas starting together upgrade once.
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

import asyncpg
import sqlalchemy.exc
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, QueuePool
from sqlalchemy.sql import ClauseElement

from inferplex.deadlines import Deadline
from inferplex.store.driver import (
    DriverStatement,
    OwnConnection,
    compile_for,
    first_row,
    json_codecs,
    keep_session,
    row_of,
)
from inferplex.store.group_commit import GroupCommitWriter

T = TypeVar("T")
MIGRATIONS = Path(__file__).parent / "migrations"
_ADVISORY_LOCK = 0x1F3A_C0DE  # any fixed 64-bit number, the same in every replica
ADMIN_POOL = 4  # SQLAlchemy's connections per replica on PostgreSQL, beside `pool_size` for requests
BATCH_CONNECTION = "inferplex-ledger"  # the application_name of the ledger batcher's own connection
USAGE_CONNECTION = "inferplex-usage"  # and of the usage log writer's
DEFAULT_TIMEOUT_S = 5.0  # storage.timeout_s: the longest any one call to PostgreSQL may take


class StoreUnavailable(Exception):
    """The database could not be reached, or dropped the connection, for a statement a request waits on:
    the request is answered 503, not 500."""


# What a driver raises when the database cannot be reached or dropped the connection (not a bad statement):
# refused, lost or timed-out sockets (TimeoutError is an OSError), asyncpg's closed-connection and
# connection-class errors, SQLite's I/O and lock failures.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    sqlite3.OperationalError,
)


def unreachable(exc: BaseException) -> BaseException | None:
    """The error in `exc`'s chain (itself, what SQLAlchemy wraps as `.orig`, its causes) that says the
    database could not be reached or dropped the connection, or None if it is another failure. SQLAlchemy
    wraps the driver's error, or lets a refused connect's OSError through as it is; either way the caller
    (the admin API, a key lookup) answers 503, not 500 (edge.endpoint)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (StoreUnavailable, sqlalchemy.exc.TimeoutError, *UNREACHABLE)):
            return e
        if isinstance(e, sqlalchemy.exc.DBAPIError) and e.connection_invalidated:
            return e
        orig = getattr(e, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, e.__cause__, e.__context__]
    return None


def default_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir) / 'inferplex.db'}"


def _sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


class Database:
    def __init__(self, url: str, pool_size: int = 20, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.pool_size = pool_size
        self.timeout_s = timeout_s
        self._driver_pool: asyncpg.Pool | None = None
        self._driver_lock = asyncio.Lock()
        self._batch_conn: OwnConnection | None = None  # PostgreSQL: the ledger batcher's own connection
        self._copy_conn: OwnConnection | None = None  # PostgreSQL: the usage log writer's
        self._async: AsyncEngine | None = None
        self._sync: Engine | None = None
        self._reader: Engine | None = None
        self._loop_reader: sqlite3.Connection | None = None
        if self.is_sqlite:
            path = _sqlite_path(url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            sync_url = make_url(url).set(drivername="sqlite")
            kw: dict[str, Any] = {"connect_args": {"timeout": 30, "check_same_thread": False}, "poolclass": QueuePool}
            self._sync = create_engine(sync_url, **kw)
            _sqlite_pragmas(self._sync, immediate=True)
            self._reader = create_engine(sync_url, **kw)
            _sqlite_pragmas(self._reader, immediate=False)
            self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="inferplex-db-write")
            self._writer = GroupCommitWriter(self._sync, self._writer_thread)
            self._reader_threads = ThreadPoolExecutor(2, thread_name_prefix="inferplex-db-read")
            self._loop_reader = _loop_reader(path) if path is not None else None
        else:
            # No overflow: connections beyond the pool would be opened and closed per burst (TLS set-up
            # included), the dominant cost under load (docs/benchmarks.md); waiting for one is cheaper.
            # Admin reads and writes and migrations only: requests use the driver pool (`fetchrow`), the
            # ledger's and the usage log's batches a connection each of their own.
            # Pre-ping: a connection an outage broke is replaced when taken, not reported as a 503 after it.
            self._async = create_async_engine(
                url,
                pool_size=ADMIN_POOL,
                max_overflow=0,
                pool_timeout=timeout_s,
                pool_pre_ping=True,
                connect_args={"timeout": timeout_s, "command_timeout": timeout_s},
            )
            # Reads and single-statement writes need no BEGIN/COMMIT round trips.
            self._autocommit = self._async.execution_options(isolation_level="AUTOCOMMIT")
            self._batch_conn = OwnConnection(self.dsn, BATCH_CONNECTION, json_codecs, timeout_s)
            self._copy_conn = OwnConnection(self.dsn, USAGE_CONNECTION, None, timeout_s)

    @property
    def dialect(self) -> Dialect:
        engine = self._sync if self._async is None else self._async.sync_engine
        assert engine is not None
        return engine.dialect

    def driver_statement(self, statement: ClauseElement) -> DriverStatement:
        return compile_for(self.dialect, statement)

    async def fetchrow(self, statement: DriverStatement, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Run one read that needs no transaction around it on the driver; its first row, or None.

        PostgreSQL: asyncpg on its own pool. SQLite: on the event loop's own connection, which under WAL never
        waits for a writer and answers an indexed lookup in microseconds, far less than a hop to a reader
        thread and back; only if SQLite reports the file busy (a checkpoint truncating the WAL) does the read
        go to a reader thread, which may wait."""
        if self._async is None:
            assert self._reader is not None
            if self._loop_reader is not None:
                with contextlib.suppress(sqlite3.OperationalError):
                    return first_row(self._loop_reader, statement, params)
            return await self._on(self._reader_threads, self._reader, lambda conn: row_of(conn, statement, params))
        args = statement.args(params)
        try:
            return await self._fetchrow(statement.sql, args)
        except UNREACHABLE as exc:
            if isinstance(exc, TimeoutError):  # silent past the deadline: asking again would only wait again
                raise
            # A read may be asked twice: a connection the outage broke shows it only when next used.
            return await self._fetchrow(statement.sql, args)

    async def _fetchrow(self, sql: str, args: list[Any]) -> Mapping[str, Any] | None:
        """One read on a pooled driver connection, within the deadline; a connection whose read failed or
        ran out of time is closed, not given back to serve the next request (asyncpg would wait to cancel
        its statement, which on a silent network is as long as the outage)."""
        with Deadline(self.timeout_s):
            pool = await self._pool()
            conn = await pool.acquire()
            try:
                row: Mapping[str, Any] | None = await conn.fetchrow(sql, *args)
            except BaseException:
                conn.terminate()
                raise
            finally:
                await pool.release(conn)
        return row

    async def fetch_batch(self, sql: str, *args: Any) -> list[Mapping[str, Any]]:
        """PostgreSQL: run `sql` (asyncpg's $n placeholders) for a batcher (batching.py); all its rows. On a
        connection of the batcher's own (driver.OwnConnection), within the deadline."""
        assert self._batch_conn is not None
        with Deadline(self.timeout_s):
            rows: list[Mapping[str, Any]] = await self._batch_conn.run(lambda conn: conn.fetch(sql, *args))
        return rows

    async def copy_rows(self, table: str, columns: Sequence[str], records: list[tuple[Any, ...]]) -> None:
        """PostgreSQL: append `records` to `table` with COPY, on the one writer's own connection. COPY cost a
        third of the client CPU of a multi-row INSERT and two thirds of the database's (docs/benchmarks.md);
        JSON columns are passed as text, which binary COPY takes as it is."""
        assert self._copy_conn is not None
        with Deadline(self.timeout_s):
            await self._copy_conn.run(lambda conn: conn.copy_records_to_table(table, records=records, columns=columns))

    def key_generation(self) -> int | None:
        """SQLite: `key_changes.generation` (migration 0003) read on the event loop's own connection, or None
        if it cannot be read right now (the file busy, or no file)."""
        if self._loop_reader is None:
            return None
        try:
            row = self._loop_reader.execute("SELECT generation FROM key_changes").fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else int(row[0])

    @property
    def dsn(self) -> str:
        """PostgreSQL: the URL as asyncpg takes it."""
        return make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def _pool(self) -> asyncpg.Pool:
        return self._driver_pool or await self._open_driver_pool()

    async def _open_driver_pool(self) -> asyncpg.Pool:
        async with self._driver_lock:
            if self._driver_pool is None:
                self._driver_pool = await asyncpg.create_pool(
                    self.dsn,
                    min_size=1,
                    max_size=self.pool_size,
                    init=json_codecs,
                    reset=keep_session,
                    timeout=self.timeout_s,
                )
            return self._driver_pool

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one transaction, committed if it returns, rolled back if it raises."""
        if self._async is not None:
            return await self._bounded(fn, transaction=True)
        return await self._writer.write(fn)

    async def write_driver(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: `write` for a function of the sqlite3 connection itself (store/group_commit.py)."""
        assert self.is_sqlite
        return await self._writer.write_raw(fn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` for reads only (on PostgreSQL without a transaction: each statement sees committed data)."""
        return await self.single(fn)

    async def single(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn`, which issues ONE statement (atomic by itself): no transaction round trips around it."""
        if self._async is not None:
            return await self._bounded(fn, transaction=False)
        assert self._reader is not None
        return await self._on(self._reader_threads, self._reader, fn)

    async def _bounded(self, fn: Callable[[Connection], T], *, transaction: bool) -> T:
        """PostgreSQL: `fn` on a SQLAlchemy connection (in a transaction, or autocommit), the whole call (the
        wait for a pooled connection, its ping, the statements, the commit) within the deadline. A connection
        that ran out of time or lost the database is invalidated (closed at once, not pinged or rolled back
        on a network that may be silent), so it never comes back from the pool."""
        assert self._async is not None
        conn = (self._async if transaction else self._autocommit).connect()
        try:
            with Deadline(self.timeout_s):
                await conn.start()
                if not transaction:
                    return await conn.run_sync(fn)
                async with conn.begin():
                    return await conn.run_sync(fn)
        except BaseException as exc:
            if conn.sync_connection is not None and (
                isinstance(exc, (TimeoutError, asyncio.CancelledError)) or unreachable(exc) is not None
            ):
                await conn.invalidate()
            raise
        finally:
            await conn.close()

    @staticmethod
    async def _on(pool: ThreadPoolExecutor, engine: Engine, fn: Callable[[Connection], T]) -> T:
        def run() -> T:
            with engine.connect() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(pool, run)

    async def migrate(self) -> None:
        """Upgrade to the newest schema; safe when several replicas start at once."""
        if self._async is None:
            await asyncio.get_running_loop().run_in_executor(self._writer_thread, self._migrate_sqlite)
            return
        # A connection of its own, without the per-call deadline: a migration (an index built on a long
        # table), or the wait for another replica's, may rightly take longer than any request's call.
        engine = create_async_engine(self.url, poolclass=NullPool, connect_args={"timeout": self.timeout_s})
        try:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK})
                await conn.commit()
                try:
                    await conn.run_sync(_upgrade)
                    await conn.commit()
                finally:
                    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK})
                    await conn.commit()
        finally:
            await engine.dispose()

    def _migrate_sqlite(self) -> None:
        assert self._sync is not None
        path = _sqlite_path(self.url)
        lock = open(str(path) + ".migrate.lock", "w") if path else None
        try:
            if lock is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            with self._sync.connect() as conn:
                _upgrade(conn)
                conn.commit()
        finally:
            if lock is not None:
                lock.close()

    async def aclose(self) -> None:
        if self._async is not None:
            for own in (self._batch_conn, self._copy_conn):
                if own is not None:
                    await own.close()
            # Graceful if the database answers; a silent one must not hold the shutdown past the deadline.
            if self._driver_pool is not None:
                try:
                    await asyncio.wait_for(self._driver_pool.close(), self.timeout_s)
                except Exception:
                    self._driver_pool.terminate()
            try:
                await asyncio.wait_for(self._async.dispose(), self.timeout_s)
            except Exception:
                await self._async.dispose(close=False)
            return
        assert self._sync is not None and self._reader is not None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer_thread, self._writer.close)
        await loop.run_in_executor(self._writer_thread, self._sync.dispose)
        await loop.run_in_executor(self._reader_threads, self._reader.dispose)
        self._writer_thread.shutdown(wait=True)
        self._reader_threads.shutdown(wait=True)
        if self._loop_reader is not None:
            self._loop_reader.close()


def _upgrade(connection: Connection) -> None:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


def _loop_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the event loop's thread: fails at once (timeout 0) rather than block it."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA query_only=1")
    return conn


def _sqlite_pragmas(engine: Engine, *, immediate: bool) -> None:
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
