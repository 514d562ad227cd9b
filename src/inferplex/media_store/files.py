"""The metadata of stored media files: `StoredFile`, and its rows in the `media_files` table (migration 0011).

The bytes live in a backend (media_store/blobs.py, s3.py) under `location`; the row says whose the file is,
what it is, and until when it is kept. The table is apart from store/tables.py's metadata, as
custom_endpoints/store.py's are: it belongs to this feature and its one migration.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Float, Index, MetaData, Row, String, Table, Text, and_, delete, or_, select
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database

metadata = MetaData()

media_files = Table(
    "media_files",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("filename", String(255), nullable=False),
    Column("content_type", String(200), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("purpose", String(40), nullable=False),
    Column("backend", String(16), nullable=False),
    Column("location", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float),
    Index("ix_media_files_expires_at", "expires_at"),
    Index("ix_media_files_owner_created", "owner", "created_at", "id"),
)
F = media_files.c


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file the gateway stores. `id` is opaque (`file-<random>`) and says nothing about any upstream;
    `owner` is the account id (the key id for a key without account, `master` for the master key)."""

    id: str
    owner: str
    filename: str
    content_type: str
    bytes: int
    purpose: str  # "image", "audio", "video", "upload", ...
    created_at: float
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class Placed:
    """A stored file with where its bytes are: the backend's name and its key there."""

    file: StoredFile
    backend: str
    location: str


def _placed(row: Row[tuple[object, ...]]) -> Placed:
    m = row._mapping
    file = StoredFile(
        m["id"],
        m["owner"],
        m["filename"],
        m["content_type"],
        int(m["bytes"]),
        m["purpose"],
        float(m["created_at"]),
        None if m["expires_at"] is None else float(m["expires_at"]),
    )
    return Placed(file, m["backend"], m["location"])


class FileRows:
    """The `media_files` rows, on whichever engine the gateway's store runs (store/backend.Database)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, placed: Placed) -> None:
        f = placed.file
        values = {
            "id": f.id,
            "owner": f.owner,
            "filename": f.filename,
            "content_type": f.content_type,
            "bytes": f.bytes,
            "purpose": f.purpose,
            "backend": placed.backend,
            "location": placed.location,
            "created_at": f.created_at,
            "expires_at": f.expires_at,
        }
        statement = media_files.insert().values(values)
        await self.db.write(lambda conn: conn.execute(statement))

    async def get(self, file_id: str) -> Placed | None:
        query = select(media_files).where(F.id == file_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _placed(row)

    async def remove(self, file_id: str) -> bool:
        statement = delete(media_files).where(F.id == file_id)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def expired(self, now: float, limit: int) -> list[Placed]:
        """Up to `limit` rows whose time is past `now`, the oldest first."""
        query = select(media_files).where(F.expires_at < now).order_by(F.expires_at).limit(limit)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [_placed(r) for r in rows]

    async def page(
        self,
        owner: str,
        purposes: frozenset[str],
        backend: str,
        now: float,
        after: StoredFile | None,
        limit: int,
        descending: bool,
    ) -> list[Placed]:
        """Up to `limit` of `owner`'s unexpired files of `purposes` in `backend`, by creation time (then id),
        after the file `after` in that order: the Files API's list (dialects/openai_files.py)."""
        query = select(media_files).where(
            F.owner == owner,
            F.purpose.in_(sorted(purposes)),
            F.backend == backend,
            or_(F.expires_at.is_(None), F.expires_at > now),
        )
        if after is not None:
            if descending:
                beyond = or_(F.created_at < after.created_at, and_(F.created_at == after.created_at, F.id < after.id))
            else:
                beyond = or_(F.created_at > after.created_at, and_(F.created_at == after.created_at, F.id > after.id))
            query = query.where(beyond)
        order = (F.created_at.desc(), F.id.desc()) if descending else (F.created_at.asc(), F.id.asc())
        query = query.order_by(*order).limit(limit)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [_placed(r) for r in rows]


def remove_many(conn: Connection, ids: list[str]) -> int:
    return int(conn.execute(delete(media_files).where(F.id.in_(ids))).rowcount)
