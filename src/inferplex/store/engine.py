"""The database: an async SQLAlchemy engine, migrated at start, with serialized writes on SQLite.

- SQLite (the default, a file under the data directory): every transaction starts with BEGIN IMMEDIATE,
  so a read-then-write can never deadlock, and one asyncio lock per process queues transactions instead of
  letting threads spin on the busy timeout. Other processes sharing the file wait on SQLite's own lock.
- PostgreSQL: a pool; atomicity comes from single conditional statements (see store/ledger.py).

Migrations run through Alembic with a programmatic config (no alembic.ini): under a PostgreSQL advisory
lock, or an exclusive file lock next to the SQLite file, so replicas starting together upgrade once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).parent / "migrations"
_ADVISORY_LOCK = 0x1F3A_C0DE  # any fixed 64-bit number, the same in every replica


def default_url(data_dir: str) -> str:
    return f"sqlite+aiosqlite:///{Path(data_dir) / 'inferplex.db'}"


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite"):
        return None
    _, _, path = url.partition(":///")
    return Path(path) if path and path != ":memory:" else None


class Database:
    """One engine and the write discipline its dialect needs. `begin()` yields a connection in a transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {}
        if self.is_sqlite:
            path = _sqlite_path(url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"timeout": 30}
        else:
            kwargs.update(pool_size=10, max_overflow=20, pool_pre_ping=False)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        self._lock = asyncio.Lock() if self.is_sqlite else None
        self.reader: AsyncEngine = self.engine
        if self.is_sqlite:
            _sqlite_immediate(self.engine)
            # Reads (a key lookup on every request) skip the write lock: WAL lets them run beside a writer.
            self.reader = create_async_engine(url, **kwargs)
            _sqlite_autocommit(self.reader)

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        if self._lock is None:
            async with self.engine.begin() as conn:
                yield conn
            return
        async with self._lock, self.engine.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads only: a consistent snapshot per statement, never blocked by writers."""
        async with self.reader.connect() as conn:
            yield conn

    async def migrate(self) -> None:
        """Upgrade to the newest schema; safe when several replicas start at once."""
        if self.is_sqlite:
            path = _sqlite_path(self.url)
            lock_file = open(str(path) + ".migrate.lock", "w") if path else None  # noqa: ASYNC230
            try:
                if lock_file is not None:
                    await asyncio.to_thread(fcntl.flock, lock_file.fileno(), fcntl.LOCK_EX)
                async with self.engine.connect() as conn:
                    await conn.run_sync(_upgrade)
                    await conn.commit()
            finally:
                if lock_file is not None:
                    lock_file.close()
            return
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK})
            await conn.commit()
            try:
                await conn.run_sync(_upgrade)
                await conn.commit()
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK})
                await conn.commit()

    async def aclose(self) -> None:
        await self.engine.dispose()
        if self.reader is not self.engine:
            await self.reader.dispose()


def _upgrade(connection: Connection) -> None:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


def _sqlite_autocommit(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # let us issue BEGIN ourselves (or, for reads, none at all)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


def _sqlite_immediate(engine: AsyncEngine) -> None:
    _sqlite_autocommit(engine)

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
