"""What the stores need from a database engine: the `Database` interface, and the errors every engine shares.

The stores (keys, ledger, usage, recovery) are written once, over this interface; each engine implements it
in a module of its own, chosen once at start-up from the URL (`store/engine.open_database`):

- `store/sqlite.py`: a file under the data directory (the default); one writer thread with group commit.
- `store/postgres.py`: asyncpg, with the per-request statements on a driver pool of their own.

What both share is here: statements built with SQLAlchemy Core and run as a plain function of a SQLAlchemy
`Connection` (`read`, `single`, `write`), the hot statements compiled once and run on the driver itself
(`driver_statement`, `fetchrow`: store/driver.py), and Alembic's migrations. What differs, and so is a method
each engine implements, is how a call reaches the database, the ledger's batch (`apply_moves`: the rule in
store/moves.py), how usage rows are appended (`bulk_insert`), and how a replica learns that keys changed
(`key_cache`).
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import sqlalchemy.exc
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Table
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from inferplex.store.driver import DriverStatement, compile_for
from inferplex.store.key_cache import KeyCache
from inferplex.store.moves import Move, Result

T = TypeVar("T")
MIGRATIONS = Path(__file__).parent / "migrations"
DEFAULT_TIMEOUT_S = 5.0  # storage.timeout_s: the longest any one call to PostgreSQL may take

# Appends rows (tuples in the order of the columns it was made for) to one table, in one transaction.
BulkInsert = Callable[[list[tuple[Any, ...]]], Awaitable[None]]


class StoreUnavailable(Exception):
    """The database could not be reached, or dropped the connection, for a statement a request waits on:
    the request is answered 503, not 500."""


# What a driver raises when the database cannot be reached or dropped the connection (not a bad statement):
# refused, lost or timed-out sockets (TimeoutError is an OSError), asyncpg's closed-connection and
# connection-class errors, PostgreSQL refusing more clients (SQLSTATE 53300: `max_connections` or a role's
# limit taken by other servers or workers: unavailable for now, not a bad statement), SQLite's I/O and lock
# failures.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
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


def upgrade(connection: Connection) -> None:
    """Run Alembic's migrations to the newest schema on `connection` (no alembic.ini: a programmatic config)."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


class Database(ABC):
    """One SQL database, as the stores use it."""

    def __init__(self, url: str) -> None:
        self.url = url

    @abstractmethod
    def usage_inserted(self, conn: Connection, row_id: int) -> None:
        """After the usage row `row_id` was inserted on `conn` outside `bulk_insert` (the spool's replay):
        whatever the engine does not do by itself for it. PostgreSQL's trigger keeps the rollups (migration
        0016), so nothing; SQLite rolls it up (store/sqlite_rollups.py)."""

    @property
    @abstractmethod
    def dialect(self) -> Dialect:
        """SQLAlchemy's dialect of the engine, to compile statements for it."""

    def driver_statement(self, statement: ClauseElement) -> DriverStatement:
        return compile_for(self.dialect, statement)

    @abstractmethod
    async def fetchrow(self, statement: DriverStatement, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Run one read that needs no transaction around it on the driver itself; its first row, or None.
        The per-request key lookup: the engine's fastest way to a row."""

    @abstractmethod
    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one transaction, committed if it returns, rolled back if it raises."""

    @abstractmethod
    async def single(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn`, which issues ONE statement (atomic by itself): no transaction round trips around it."""

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` for reads only (each statement sees committed data; no transaction needed)."""
        return await self.single(fn)

    @abstractmethod
    async def apply_moves(self, moves: Sequence[Move], now: float) -> list[Result]:
        """Apply a batch of ledger moves by the rule of store/moves.py, in one transaction, their rows dated
        `now` and their spend counted in `now`'s month: for each move the balance after it, a `CapReached`
        for a reservation a monthly cap refused, or None if it was not applied."""

    @abstractmethod
    def bulk_insert(self, table: Table, columns: Sequence[str]) -> BulkInsert:
        """The engine's cheapest append of many rows to `table` (values in the order of `columns`), made once."""

    @abstractmethod
    def key_cache(self) -> KeyCache:
        """How a replica keeps key records between changes on this engine (store/key_cache.py)."""

    @abstractmethod
    async def migrate(self) -> None:
        """Upgrade to the newest schema; safe when several replicas start at once."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close every connection and thread the database holds."""
