"""Migration 0018 creates the alert outbox's tables as observe/alerts_outbox.py describes them, and its
downgrade removes them, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.observe.alerts_outbox import alert_attempts, alert_deliveries, alert_marks
from tests.accounts.conftest import own_database, sqlite_url
from tests.migrating import down_and_up

TABLES = (alert_deliveries, alert_attempts, alert_marks)


def _look(inspector: Any) -> dict[str, tuple[set[str], set[str], list[str]]]:
    names = inspector.get_table_names()
    return {
        table.name: (
            {c["name"] for c in inspector.get_columns(table.name)},
            {i["name"] for i in inspector.get_indexes(table.name)},
            sorted(inspector.get_pk_constraint(table.name)["constrained_columns"]),
        )
        for table in TABLES
        if table.name in names
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with own_database("inferplex_alerts_") as found:
        yield found


def test_0018_up_down_up(url: str) -> None:
    up, down, again = down_and_up(url, "0017", _look)
    assert up == {
        t.name: ({c.name for c in t.columns}, {str(i.name) for i in t.indexes}, sorted(c.name for c in t.primary_key))
        for t in TABLES
    }
    assert down == {}
    assert again == up
