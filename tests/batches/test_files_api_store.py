"""`MediaStore.page`, the Files API's list, on each engine: one owner's unexpired files of the purposes asked
for, in creation order either way, after a cursor, with whether more follow; the gateway's other media (an
image result), another owner's files and expired ones are never in it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from inferplex.config import parse_config
from inferplex.media_store.files import StoredFile
from inferplex.media_store.store import MediaStore
from inferplex.store.backend import Database
from tests.accounts.conftest import migrated_db, pg_url  # noqa: F401 (fixtures)

FILES = frozenset({"batch", "user_data", "batch_output"})


@pytest.fixture
async def media(migrated_db: Database, tmp_path: Path) -> AsyncIterator[MediaStore]:  # noqa: F811
    store = await MediaStore.open(parse_config({"server": {"data_dir": str(tmp_path)}}, "<test>"), migrated_db)
    yield store
    await store.aclose()


def owner() -> str:
    """An owner of its own (PostgreSQL's database is the module's, shared by its tests)."""
    return "acct-" + secrets.token_hex(6)


async def _save(media: MediaStore, owner: str, purpose: str, ttl_s: float | None = None) -> StoredFile:
    return await media.save_bytes(
        owner, b"{}\n", filename="f.jsonl", content_type="application/jsonl", purpose=purpose, ttl_s=ttl_s
    )


async def test_one_owners_files_of_the_purposes_asked_for(media: MediaStore) -> None:
    a, b = owner(), owner()
    mine = [await _save(media, a, purpose) for purpose in ("batch", "user_data", "batch_output", "batch")]
    await _save(media, a, "image")  # a generated image: media, not a Files API file
    await _save(media, b, "batch")  # someone else's
    await _save(media, a, "batch", ttl_s=-1)  # already expired
    files, more = await media.page(a, FILES, None, 10)
    assert [f.id for f in files] == [f.id for f in reversed(mine)] and not more
    only_batch, _ = await media.page(a, frozenset({"batch"}), None, 10, descending=False)
    assert [f.id for f in only_batch] == [mine[0].id, mine[3].id]
    assert await media.page(owner(), FILES, None, 10) == ([], False)


async def test_pages_follow_the_cursor_either_way(media: MediaStore) -> None:
    a = owner()
    made = [await _save(media, a, "batch") for _ in range(7)]
    for descending in (True, False):
        order = sorted(made, key=lambda f: (f.created_at, f.id), reverse=descending)
        seen: list[str] = []
        after = None
        while True:
            page, more = await media.page(a, FILES, after, 3, descending=descending)
            seen += [f.id for f in page]
            if not more:
                break
            after = page[-1]
        assert seen == [f.id for f in order]
