"""Migration 0016 on SQLite and PostgreSQL: its downgrade undoes its upgrade (the usage table's new columns, the
rollup tables and their trigger), and the usage rows logged before it are rolled up by it, once, so the
console's charts cover what came before the upgrade too."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.store import tables as t
from inferplex.store.engine import open_database
from inferplex.store.rollups import GROUPS, Rollups
from tests.accounts.conftest import own_database, sqlite_url
from tests.migrating import down_and_up, usage_rows_at
from tests.observe.usage_reference import aggregate, random_rows, same, usage_rows

NEW_COLUMNS = {"route", "operation", "error_type", "attempts", "attempt_errors"}
LATER_COLUMNS = {"cache"}  # 0020: the response cache's outcome


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with own_database("inferplex_usage_migration_") as found:
        yield found


def _look(inspector: Any) -> dict[str, Any]:
    tables = set(inspector.get_table_names())
    return {
        "usage": {c["name"] for c in inspector.get_columns("usage")} & NEW_COLUMNS,
        "indexes": {i["name"] for i in inspector.get_indexes("usage")},
        "rollups": {
            name: {c["name"] for c in inspector.get_columns(name)}
            for name in ("usage_hourly", "usage_daily")
            if name in tables
        },
    }


def test_0016_up_down_up(url: str) -> None:
    up, down, again = down_and_up(url, "0015", _look)
    assert up["usage"] == NEW_COLUMNS
    assert "ix_usage_attempt_errors" in up["indexes"]
    assert up["rollups"] == {table.name: {c.name for c in table.columns} for table in (t.usage_hourly, t.usage_daily)}
    assert down["usage"] == set() and down["rollups"] == {}
    assert "ix_usage_attempt_errors" not in down["indexes"]
    assert again == up


def test_0016_rolls_up_the_rows_logged_before_it(url: str) -> None:
    rows = random_rows(11, 700, 1_763_000_000.5, 3)
    usage_rows_at(url, "0015", rows, NEW_COLUMNS | LATER_COLUMNS)  # as 0015 logged them

    async def upgraded() -> list[tuple[str, str | None, list[dict[str, Any]]]]:
        db = open_database(url)
        try:
            await db.migrate()
            rollups = Rollups(db)
            return [
                (grain, group_by, await rollups.series(grain, 1_762_990_000, 1_763_300_000, group_by))
                for grain in ("hour", "day")
                for group_by in (None, *GROUPS)
            ]
        finally:
            await db.aclose()

    answers = asyncio.run(upgraded())
    plain = usage_rows(url)
    assert len(plain) == 700 and all(row["attempt_errors"] == 0 for row in plain)
    for grain, group_by, got in answers:
        same(got, aggregate(plain, 3600 if grain == "hour" else 86400, group_by))
