"""PostgreSQL through asyncpg: SQLAlchemy for admin work and migrations, the driver itself for the hot path.

Statements built with SQLAlchemy run through `AsyncConnection.run_sync` (admin reads and writes); atomicity
comes from single conditional statements and row locks (store/ledger.py). The statements every keyed
request runs go around SQLAlchemy, whose per-execution work and async greenlet layer cost several times the
query itself (docs/benchmarks.md): the key lookup on an asyncpg pool of `pool_size` connections, the ledger's
batches and the usage log's COPY each on one connection of their own (driver.OwnConnection), since each has
one caller with one call in flight.

Every call has a deadline (`storage.timeout_s`): a database that goes silent (packets dropped, no reset)
costs a request at most that long, then a 503 `store_unavailable`, instead of holding it until TCP gives
up. The per-request calls take the shared `Deadline` (one timer per event loop), and a connection whose
call failed or ran out of time is closed, never reused; SQLAlchemy's connections (admin calls) take
asyncpg's own connect and command timeouts, and are pinged when taken from the pool, so the first admin call
after an outage gets a fresh connection rather than one the outage broke.

The ledger's rule (store/moves.py) runs in the database, in the function of migration 0008: one round trip
per batch, which locks each account row once. Migrations run in one transaction that first takes an advisory
lock, so replicas starting together upgrade once.

Behind a transaction pooler (`storage.pooler: transaction`, PgBouncer's `pool_mode = transaction`), each
transaction, and each statement outside one, may run on another server session than the one before, so
nothing may count on a session: no statement is prepared by name (asyncpg's statement cache and SQLAlchemy's
prepared-statement cache are off, and asyncpg then prepares each statement unnamed and parses it again in
the message that runs it: a second round trip per statement, docs/deploy.md), and what does need a session
goes to `storage.direct_database_url`, PostgreSQL itself: the key cache's LISTEN and the migrations. The
migrations' lock is transaction-scoped, so it holds through a pooler too when there is no direct URL; the
key cache then cannot listen and is off (store/key_cache.py). Every other statement here is a single
statement or one transaction: the ledger's batch, the usage log's COPY, SQLAlchemy's admin calls, the row
leases of store/leasing.py and jobs/rows.py's `pg_advisory_xact_lock`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import asyncpg
from sqlalchemy import Table, make_url, text
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from inferplex.deadlines import Deadline
from inferplex.store.backend import DEFAULT_TIMEOUT_S, UNREACHABLE, BulkInsert, Database, unreachable, upgrade
from inferplex.store.driver import DriverStatement, OwnConnection, PooledConnection, json_codecs, keep_session
from inferplex.store.key_cache import KeyCache, NoKeyCache, NotifiedKeyCache
from inferplex.store.moves import CapReached, Move, Result, month_of

T = TypeVar("T")
log = logging.getLogger("inferplex.store")
ADVISORY_LOCK = 0x1F3A_C0DE  # any fixed 64-bit number, the same in every replica
ADMIN_POOL = 4  # SQLAlchemy's connections per replica, beside `pool_size` for requests
BATCH_CONNECTION = "inferplex-ledger"  # the application_name of the ledger batcher's own connection
USAGE_CONNECTION = "inferplex-usage"  # and of the usage log writer's

# The arrays go as text (`text_array`, `int_array`, `bool_array`), cast by PostgreSQL's own parser, and the
# results come back as two arrays in one row: asyncpg's array encoder checks each element against three
# collections ABCs (is it a nested array?), and a row per move is a Record each; together about 10 µs of
# client CPU per move, this way about 4.5 (docs/benchmarks.md).
LEDGER_BATCH = (
    "SELECT array_agg(item) FILTER (WHERE capped IS NULL) AS items, "
    "array_agg(balance) FILTER (WHERE capped IS NULL) AS balances, "
    "array_agg(item) FILTER (WHERE capped IS NOT NULL) AS capped_items, "
    "array_agg(capped || ':' || cap || ':' || spent || ':' || reserved) FILTER (WHERE capped IS NOT NULL) AS caps "
    "FROM inferplex_ledger_batch("
    "$1::text::text[], $2::text::text[], $3::text::bigint[], $4::text::boolean[], "
    "$5::text::text[], $6::text::text[], $7::text::text[], $8, $9::text::bigint[], $10::text::bigint[], $11)"
)


def _cap_reached(text: str) -> CapReached:
    """A refusal as the batch query folds it (`owner:cap:spent:reserved`): one text array, empty (NULL) in
    the batches no cap refuses, which is nearly all."""
    owner, cap, spent, reserved = text.split(":")
    return CapReached(owner, int(cap), int(spent), int(reserved))


def _quoted(value: str | None) -> str:
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy URL (`postgresql+asyncpg://...`) as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# asyncpg.connect's arguments for a connection through a transaction pooler: no statement cache, so every
# statement is prepared unnamed and parsed again where it runs, and type look-ups in a transaction
# (driver.PooledConnection); SQLAlchemy's dialect takes its own prepared-statement cache size from the same
# arguments (its docs, "Prepared Statement Cache") and hands the rest to asyncpg.connect.
UNNAMED_STATEMENTS: dict[str, Any] = {"statement_cache_size": 0, "connection_class": PooledConnection}
SQLALCHEMY_UNNAMED: dict[str, Any] = {**UNNAMED_STATEMENTS, "prepared_statement_cache_size": 0}


def text_array(values: Sequence[str | None]) -> str:
    """A PostgreSQL text[] literal (`{"a","b",NULL}`): each string quoted and escaped, so any string (a
    caller's request id, a note) comes back as it went."""
    return "{" + ",".join([_quoted(v) for v in values]) + "}"


def int_array(values: Sequence[int]) -> str:
    return "{" + ",".join([str(v) for v in values]) + "}"


def bool_array(values: Sequence[bool]) -> str:
    return "{" + ",".join(["t" if v else "f" for v in values]) + "}"


class PostgresDatabase(Database):
    def __init__(
        self,
        url: str,
        pool_size: int = 20,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        direct_url: str | None = None,
        pooler: Literal["none", "transaction"] = "none",
    ) -> None:
        super().__init__(url)
        self.pool_size = pool_size
        self.timeout_s = timeout_s
        self.direct_url = direct_url  # PostgreSQL itself, for what needs a session (`url` may be a pooler)
        self.pooled = pooler == "transaction"
        self._driver_options = UNNAMED_STATEMENTS if self.pooled else {}
        self._driver_pool: asyncpg.Pool | None = None
        self._driver_lock = asyncio.Lock()
        # No overflow: connections beyond the pool would be opened and closed per burst (TLS set-up included),
        # the dominant cost under load (docs/benchmarks.md); waiting for one is cheaper. Admin reads and
        # writes and migrations only: requests use the driver pool (`fetchrow`), the ledger's and the usage
        # log's batches a connection each of their own. Pre-ping: a connection an outage broke is replaced
        # when taken, not reported as a 503 after it.
        self._async = create_async_engine(
            url,
            pool_size=ADMIN_POOL,
            max_overflow=0,
            pool_timeout=timeout_s,
            pool_pre_ping=True,
            connect_args={
                "timeout": timeout_s,
                "command_timeout": timeout_s,
                **(SQLALCHEMY_UNNAMED if self.pooled else {}),
            },
        )
        # Reads and single-statement writes need no BEGIN/COMMIT round trips.
        self._autocommit = self._async.execution_options(isolation_level="AUTOCOMMIT")
        options = self._driver_options
        self._batch_conn = OwnConnection(self.dsn, BATCH_CONNECTION, json_codecs, timeout_s, options)
        self._copy_conn = OwnConnection(self.dsn, USAGE_CONNECTION, None, timeout_s, options)

    @property
    def dialect(self) -> Dialect:
        return self._async.sync_engine.dialect

    @property
    def dsn(self) -> str:
        """The URL as asyncpg takes it."""
        return asyncpg_dsn(self.url)

    async def fetchrow(self, statement: DriverStatement, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """On asyncpg's own pool."""
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
            pool = self._driver_pool or await self._open_driver_pool()
            conn = await pool.acquire()
            try:
                row: Mapping[str, Any] | None = await conn.fetchrow(sql, *args)
            except BaseException:
                conn.terminate()
                raise
            finally:
                await pool.release(conn)
        return row

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
                    **self._driver_options,
                )
            return self._driver_pool

    async def apply_moves(self, moves: Sequence[Move], now: float) -> list[Result]:
        """One call of the batch function, on the batcher's own connection (driver.OwnConnection), within
        the deadline."""
        args = (
            text_array([m.account_id for m in moves]),
            text_array([m.kind for m in moves]),
            int_array([m.amount for m in moves]),
            bool_array([m.conditional for m in moves]),
            text_array([m.request_id for m in moves]),
            text_array([m.key_id for m in moves]),
            text_array([m.note for m in moves]),
            now,
            int_array([m.hold for m in moves]),
            int_array([m.spend for m in moves]),
            month_of(now),
        )
        with Deadline(self.timeout_s):
            (row,) = await self._batch_conn.run(lambda conn: conn.fetch(LEDGER_BATCH, *args))
        out: list[Result] = [None] * len(moves)
        for item, balance in zip(row["items"] or (), row["balances"] or (), strict=True):
            out[item - 1] = balance
        for item, refusal in zip(row["capped_items"] or (), row["caps"] or (), strict=True):
            out[item - 1] = _cap_reached(refusal)
        return out

    def usage_inserted(self, conn: Connection, row_id: int) -> None:
        pass  # the statement trigger of migration 0016 rolled it up

    def bulk_insert(self, table: Table, columns: Sequence[str]) -> BulkInsert:
        """COPY on the usage writer's own connection: a third of the client CPU of a multi-row INSERT and two
        thirds of the database's (docs/benchmarks.md). JSON columns are passed as text, which binary COPY
        takes as it is."""
        name, names = table.name, list(columns)

        async def append(rows: list[tuple[Any, ...]]) -> None:
            with Deadline(self.timeout_s):
                await self._copy_conn.run(lambda conn: conn.copy_records_to_table(name, records=rows, columns=names))

        return append

    def key_cache(self) -> KeyCache:
        """Listening on PostgreSQL itself: the direct URL if there is one, else `url` unless that is a
        transaction pooler, which cannot carry a LISTEN (then no cache, said once in the log)."""
        if self.direct_url is not None:
            return NotifiedKeyCache(asyncpg_dsn(self.direct_url))
        if self.pooled:
            log.warning(
                "storage.pooler is transaction and storage.direct_database_url is not set: the key cache is off "
                "(it needs a LISTEN, which a transaction pooler cannot carry), so every keyed request reads its key"
            )
            return NoKeyCache()
        return NotifiedKeyCache(self.dsn)

    async def write(self, fn: Callable[[Connection], T]) -> T:
        return await self._bounded(fn, transaction=True)

    async def single(self, fn: Callable[[Connection], T]) -> T:
        return await self._bounded(fn, transaction=False)

    async def _bounded(self, fn: Callable[[Connection], T], *, transaction: bool) -> T:
        """`fn` on a SQLAlchemy connection (in a transaction, or autocommit), the whole call (the wait for a
        pooled connection, its ping, the statements, the commit) within the deadline. A connection that ran
        out of time or lost the database is invalidated (closed at once, not pinged or rolled back on a
        network that may be silent), so it never comes back from the pool."""
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
            # A call cancelled (or timed out) while the connection was being opened has none to close: closing
            # it would raise, and replace the cancellation the caller has to see (a loop that stops on it).
            if conn.sync_connection is not None:
                await conn.close()

    async def migrate(self) -> None:
        """Every migration in one transaction that first takes the advisory lock: a replica that starts while
        another upgrades waits for its commit, then finds nothing to do. The lock is the transaction's, so it
        is released by the commit (or a rollback, or the connection's loss) wherever the transaction ran:
        on PostgreSQL itself (`direct_url`) or through a transaction pooler, where a session lock would stay
        behind on a server session the pooler lends to others."""
        # A connection of its own, without the per-call deadline: a migration (an index built on a long
        # table), or the wait for another replica's, may rightly take longer than any request's call.
        url = self.direct_url or self.url
        options = SQLALCHEMY_UNNAMED if self.pooled and self.direct_url is None else {}
        engine = create_async_engine(url, poolclass=NullPool, connect_args={"timeout": self.timeout_s, **options})
        try:
            async with engine.begin() as conn:  # Alembic runs inside it: it begins no transaction of its own
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})
                await conn.run_sync(upgrade)
        finally:
            await engine.dispose()

    async def aclose(self) -> None:
        for own in (self._batch_conn, self._copy_conn):
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
