"""Migration 0011 creates `media_files` as media_store/files.py describes it (with 0015's owner index), and
its downgrade removes it, on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferplex.media_store.files import media_files
from tests.accounts.conftest import sqlite_url
from tests.migrating import down_and_up


def _look(inspector: Any) -> tuple[bool, set[str], set[str]]:
    if "media_files" not in inspector.get_table_names():
        return False, set(), set()
    columns = {c["name"] for c in inspector.get_columns("media_files")}
    indexes = {i["name"] for i in inspector.get_indexes("media_files")}
    return True, columns, indexes


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_0011_up_down_up(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = sqlite_url(tmp_path) if engine == "sqlite" else request.getfixturevalue("pg_url")
    up, down, again = down_and_up(url, "0010", _look)
    expected = {c.name for c in media_files.columns}
    assert up == (True, expected, {i.name for i in media_files.indexes})
    assert up[2] == {"ix_media_files_expires_at", "ix_media_files_owner_created"}
    assert down == (False, set(), set())
    assert again == up
