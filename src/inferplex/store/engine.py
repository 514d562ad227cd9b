"""Which database a URL names: the one place the engine is chosen, once, at start-up.

`sqlite...` URLs (`sqlite:///path`, and `sqlite+aiosqlite://`, read the same way) open store/sqlite.py; any
other opens store/postgres.py (`postgresql+asyncpg://...`). Everything after this works through the
`Database` interface (store/backend.py) and never asks which engine it has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from inferplex.config import StorageConfig
from inferplex.store.backend import DEFAULT_TIMEOUT_S, Database
from inferplex.store.postgres import PostgresDatabase
from inferplex.store.sqlite import SQLiteDatabase


def default_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir) / 'inferplex.db'}"


def open_database(
    url: str,
    pool_size: int = 20,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    direct_url: str | None = None,
    pooler: Literal["none", "transaction"] = "none",
) -> Database:
    """The database at `url`; `pool_size` and `timeout_s` (storage.*) bound PostgreSQL's connections and calls,
    and `pooler`/`direct_url` say whether `url` is a transaction pooler and where PostgreSQL itself is."""
    if url.startswith("sqlite"):
        return SQLiteDatabase(url)
    return PostgresDatabase(url, pool_size, timeout_s, direct_url=direct_url, pooler=pooler)


def open_storage(url: str, storage: StorageConfig) -> Database:
    """The database at `url` (`storage.database_url`, or the default SQLite file) as `storage` configures it:
    what every caller that opens the gateway's store from its config uses, so none leaves a setting out."""
    return open_database(
        url,
        storage.pool_size,
        storage.timeout_s,
        direct_url=storage.direct_database_url,
        pooler=storage.pooler,
    )
