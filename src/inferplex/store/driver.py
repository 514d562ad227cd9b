"""Statements compiled once by SQLAlchemy and run on the database driver itself, for the per-request path.

SQLAlchemy Core stays the one definition of every statement; these helpers only skip its per-execution
machinery (compiled-cache lookup, parameter and result processing, and on PostgreSQL the async greenlet
layer), which cost more than the query itself for the three statements every keyed request runs: the key
lookup, the reservation and the settlement (docs/benchmarks.md). JSON columns come back decoded: asyncpg
through a codec on its pool, SQLite (where JSON is stored as text) by `row_of`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
from sqlalchemy import JSON
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement


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
