"""Migration 0014 creates `batches` and `batch_lines` as batches/rows.py describes them (the worker's tables),
and its downgrade removes them, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.batches.rows import batch_lines, batches
from tests.accounts.conftest import own_database, sqlite_url
from tests.migrating import down_and_up


def _look(inspector: Any) -> dict[str, tuple[set[str], set[str]]]:
    return {
        table: (
            {c["name"] for c in inspector.get_columns(table)},
            {i["name"] for i in inspector.get_indexes(table)},
        )
        for table in ("batches", "batch_lines")
        if table in inspector.get_table_names()
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with own_database("inferplex_batches_") as found:
        yield found


def test_0014_up_down_up(url: str) -> None:
    up, down, again = down_and_up(url, "0013", _look)
    assert up == {
        table.name: ({c.name for c in table.columns}, {str(i.name) for i in table.indexes})
        for table in (batches, batch_lines)
    }
    assert down == {}
    assert again == up
