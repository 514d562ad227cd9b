"""Migration 0019 creates the `replicas` table as store/liveness.py describes it, and its downgrade removes
it, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.store.liveness import replicas
from tests.accounts.conftest import own_database, sqlite_url
from tests.migrating import down_and_up


def _look(inspector: Any) -> tuple[set[str], list[str]] | None:
    if replicas.name not in inspector.get_table_names():
        return None
    columns = {c["name"] for c in inspector.get_columns(replicas.name)}
    return columns, sorted(inspector.get_pk_constraint(replicas.name)["constrained_columns"])


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with own_database("inferplex_replicas_") as found:
        yield found


def test_0019_up_down_up(url: str) -> None:
    up, down, again = down_and_up(url, "0018", _look)
    assert up == ({c.name for c in replicas.columns}, ["id"])
    assert down is None
    assert again == up
