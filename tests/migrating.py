"""Walk the migrations up, down and up again on a real database, looking at the schema after each step: the
proof that a migration's downgrade undoes its upgrade on SQLite and on PostgreSQL alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def down_and_up(url: str, down_to: str, look: Callable[[Any], T]) -> list[T]:
    """`look(inspector)` after upgrading to head, downgrading to `down_to`, and upgrading to head again."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.ext.asyncio import create_async_engine

    from inferplex.store.backend import MIGRATIONS

    def step(conn: Any, target: str, up: bool) -> T:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        (command.upgrade if up else command.downgrade)(cfg, target)
        return look(inspect(conn))

    targets = (("head", True), (down_to, False), ("head", True))
    if url.startswith("sqlite"):
        sync = create_engine(url)
        try:
            seen = []
            for target, up in targets:
                with sync.begin() as conn:
                    seen.append(step(conn, target, up))
            return seen
        finally:
            sync.dispose()

    async def run() -> list[T]:
        engine = create_async_engine(url)
        seen = []
        try:
            for target, up in targets:
                async with engine.begin() as conn:
                    seen.append(await conn.run_sync(step, target, up))
        finally:
            await engine.dispose()
        return seen

    return asyncio.run(run())


def usage_rows_at(url: str, revision: str, rows: list[dict[str, Any]], later: set[str]) -> None:
    """Migrate a fresh database to `revision` and log `rows` into `usage` as that version did: without the
    columns a later migration added (`later`), so that migration's upgrade meets rows written before it."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import Column, MetaData, Table, create_engine, insert
    from sqlalchemy.ext.asyncio import create_async_engine

    from inferplex.store import tables as t
    from inferplex.store.backend import MIGRATIONS

    old = [{k: v for k, v in row.items() if k not in later} for row in rows]
    names = [c.name for c in t.usage.columns if c.name not in later]
    table = Table("usage", MetaData(), *(Column(n, t.usage.c[n].type) for n in names))

    def upgrade_and_log(conn: Any) -> None:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.execute(insert(table), old)

    if url.startswith("sqlite"):
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                upgrade_and_log(conn)
        finally:
            engine.dispose()
        return

    async def run() -> None:
        async_engine = create_async_engine(url)
        try:
            async with async_engine.begin() as conn:
                await conn.run_sync(upgrade_and_log)
        finally:
            await async_engine.dispose()

    asyncio.run(run())
