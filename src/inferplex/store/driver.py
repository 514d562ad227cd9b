"""Statements compiled once by SQLAlchemy and run on the database driver itself, for the per-request path.

SQLAlchemy Core stays the one definition of every statement; these helpers only skip its per-execution
machinery (compiled-cache lookup, parameter and result processing, and on PostgreSQL the async greenlet
layer), which cost more than the query itself for the three statements every keyed request runs: the key
lookup, the reservation and the settlement (docs/benchmarks.md). JSON columns come back decoded: asyncpg
through a codec on its pool, SQLite (where JSON is stored as text) by `row_of`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import orjson
from sqlalchemy import JSON
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A statement compiled for one dialect: its SQL, the order of its named parameters, and the result
    columns that hold JSON."""

    sql: str
    names: tuple[str, ...]
    json_columns: frozenset[str] = frozenset()

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[n] for n in self.names]


def compile_for(dialect: Dialect, statement: ClauseElement) -> DriverStatement:
    compiled = statement.compile(dialect=dialect)
    columns = getattr(statement, "selected_columns", None) or getattr(statement, "_returning", None) or ()
    json_columns = frozenset(c.key for c in columns if isinstance(getattr(c, "type", None), JSON))
    return DriverStatement(compiled.string, tuple(getattr(compiled, "positiontup", None) or ()), json_columns)


def row_of(conn: Connection, statement: DriverStatement, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """SQLite: run `statement` on the connection's sqlite3 handle; its first row as a dict, or None."""
    return first_row(conn.connection.driver_connection, statement, params)  # type: ignore[arg-type]


def first_row(
    handle: sqlite3.Connection, statement: DriverStatement, params: Mapping[str, Any]
) -> dict[str, Any] | None:
    """`row_of` on a sqlite3 connection itself (the event loop's reader has no SQLAlchemy around it)."""
    cursor = handle.execute(statement.sql, statement.args(params))
    rows = cursor.fetchall()  # to the end: an UPDATE ... RETURNING is then complete
    if not rows:
        return None
    row = rows[0]
    out = {d[0]: v for d, v in zip(cursor.description, row, strict=True)}
    for name in statement.json_columns:
        if isinstance(out.get(name), str):
            out[name] = orjson.loads(out[name])
    return out


async def json_codecs(conn: asyncpg.Connection) -> None:
    """asyncpg pool set-up: json and jsonb in and out as Python values, like SQLAlchemy's JSON type."""
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads, schema="pg_catalog"
        )


async def keep_session(conn: asyncpg.Connection) -> None:
    """asyncpg pool release: nothing to reset. The pool runs single statements that leave no session state
    (no SET, LISTEN or advisory lock), and asyncpg's default reset is one more round trip per statement."""


class PooledConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg's connection for a transaction pooler: its look-up of a type it has not seen runs in a
    transaction.

    To learn a type (an array's, the first time a statement returns one), asyncpg turns JIT off for the
    session, runs its catalog query, then turns JIT back on: three statements, which a transaction pooler
    may hand to three server sessions. The catalog query then runs with JIT on, which can compile for
    seconds (past `storage.timeout_s`: a 503), and one session is left with JIT off for whoever gets it
    next. In a transaction the three run on one session. A look-up happens once per type and connection,
    so the transaction's two round trips are paid once, not per statement. (`_introspect_types` is
    asyncpg's own, private: constraints.txt pins the version it is tested with.)"""

    async def _introspect_types(self, typeoids: Any, timeout: Any) -> Any:  # noqa: ASYNC109 (asyncpg's signature)
        if self.is_in_transaction():
            return await super()._introspect_types(typeoids, timeout)
        async with self.transaction():
            return await super()._introspect_types(typeoids, timeout)


class OwnConnection:
    """One asyncpg connection kept for a single serial caller (the ledger's batcher, the usage log's writer).

    Such a caller has at most one call in flight, so it needs no pool: taking a connection from asyncpg's
    pool and giving it back cost more client CPU than a batch call (about 60 µs of 100, docs/benchmarks.md).
    A call that fails or is cancelled halfway closes the connection, since its state is then unknown; the
    next call opens another (so PostgreSQL ending it, a restart, costs nothing more)."""

    def __init__(
        self,
        dsn: str,
        name: str,
        setup: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
        timeout_s: float = 60.0,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._dsn = dsn
        self._name = name
        self._setup = setup
        self._timeout_s = timeout_s  # the connect timeout (the caller bounds the whole call: Database)
        self._options = dict(options or {})  # more of asyncpg.connect's arguments (no statement cache: a pooler)
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()  # uncontended when its one caller is serial

    async def run(self, call: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        async with self._lock:
            conn = self._conn
            if conn is None or conn.is_closed():
                conn = await asyncpg.connect(
                    self._dsn,
                    server_settings={"application_name": self._name},
                    timeout=self._timeout_s,
                    **self._options,
                )
                if self._setup is not None:
                    await self._setup(conn)
                self._conn = conn
            try:
                return await call(conn)
            except BaseException:
                self._conn = None
                conn.terminate()
                raise

    async def close(self) -> None:
        """Close gracefully if the database answers within the connect timeout, else drop the socket."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close(timeout=self._timeout_s)
            except Exception:
                conn.terminate()
