"""Which database a URL names: the one place the engine is chosen, once, at start-up.

`sqlite...` URLs (`sqlite:///path`, and `sqlite+aiosqlite://`, read the same way) open store/sqlite.py; any
other opens store/postgres.py (`postgresql+asyncpg://...`). Everything after this works through the
`Database` interface (store/backend.py) and never asks which engine it has.
"""

from __future__ import annotations

from pathlib import Path

from inferplex.store.backend import DEFAULT_TIMEOUT_S, Database
from inferplex.store.postgres import PostgresDatabase
from inferplex.store.sqlite import SQLiteDatabase


def default_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir) / 'inferplex.db'}"


def open_database(url: str, pool_size: int = 20, timeout_s: float = DEFAULT_TIMEOUT_S) -> Database:
    """The database at `url`; `pool_size` and `timeout_s` (storage.*) bound PostgreSQL's connections and calls."""
    if url.startswith("sqlite"):
        return SQLiteDatabase(url)
    return PostgresDatabase(url, pool_size, timeout_s)
