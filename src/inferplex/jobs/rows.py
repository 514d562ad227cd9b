"""The `media_jobs` rows (migration 0012), on whichever engine the gateway's store runs (store/backend.Database).

A job is due when `next_poll_at` has passed and nobody holds its lease. A replica claims due jobs in one
transaction: on PostgreSQL it selects them `FOR UPDATE SKIP LOCKED` (a job another replica is claiming at
that instant is skipped, not waited for) and writes its lease (`claimed_by`, a token new for each claim, and
`claimed_until`); on SQLite the single writer makes the same statements serial. Every later write of the
poller is fenced by its token (`WHERE claimed_by = token`): a replica whose lease lapsed (it stalled past
`lease_s`) writes nothing, and the job is the next claimant's. So exactly one replica works on a job at a time.

The limit on concurrent jobs per key and per account is checked in the transaction that inserts the row,
counting the active rows in this table, so it holds across replicas: on PostgreSQL under a transaction
advisory lock on the account (or the key), which serialises two inserts for one owner; on SQLite the writer.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database
from inferplex.store.leasing import claim_due

metadata = MetaData()

media_jobs = Table(
    "media_jobs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("owner", String(200), nullable=False),
    Column("account_id", String(40)),
    Column("key_id", String(40)),
    Column("model", String(200), nullable=False),
    Column("deployment", String(400), nullable=False),
    Column("status", String(16), nullable=False),
    Column("progress", Integer, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("seconds", String(8), nullable=False),
    Column("size", String(16), nullable=False),
    Column("end_user", String(256)),
    Column("remixed_from", String(40)),
    Column("upstream_id", Text),
    Column("upstream_state", Text),
    Column("error_code", String(64)),
    Column("error_message", Text),
    Column("request_id", String(64), nullable=False),
    Column("reserved_micros", BigInteger, nullable=False),
    Column("cost_micros", BigInteger),
    Column("settled", Boolean, nullable=False),
    Column("files", Text),
    Column("created_at", Float, nullable=False),
    Column("completed_at", Float),
    Column("expires_at", Float),
    Column("deleted_at", Float),
    Column("next_poll_at", Float),
    Column("polls", Integer, nullable=False),
    Column("claimed_by", String(40)),
    Column("claimed_until", Float),
    Index("ix_media_jobs_owner_created", "owner", "created_at"),
    Index("ix_media_jobs_next_poll_at", "next_poll_at"),
    Index("ix_media_jobs_account_status", "account_id", "status"),
)
J = media_jobs.c

# `submitting`: the row holds a seat while the upstream call is made; `cancelled`: deleted by its caller
# while active (shown to nobody: a deleted job is a 404).
ACTIVE = ("submitting", "queued", "in_progress")
TERMINAL = ("completed", "failed", "cancelled")


def new_job_id() -> str:
    return "video_" + secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Job:
    """One row. `files` maps a variant (video, thumbnail, spritesheet) to its stored file id."""

    id: str
    kind: str
    owner: str
    account_id: str | None
    key_id: str | None
    model: str
    deployment: str
    status: str
    progress: int
    prompt: str
    seconds: str
    size: str
    end_user: str | None
    remixed_from: str | None
    upstream_id: str | None
    upstream_state: dict[str, Any] | None
    error_code: str | None
    error_message: str | None
    request_id: str
    reserved_micros: int
    cost_micros: int | None
    settled: bool
    files: dict[str, str]
    created_at: float
    completed_at: float | None
    expires_at: float | None
    deleted_at: float | None
    next_poll_at: float | None
    polls: int
    claimed_by: str | None = field(default=None, repr=False)
    claimed_until: float | None = None


def _job(row: Any) -> Job:
    m = dict(row._mapping)
    m["upstream_state"] = None if m["upstream_state"] is None else json.loads(m["upstream_state"])
    m["files"] = json.loads(m["files"]) if m["files"] else {}
    m["settled"] = bool(m["settled"])
    m["reserved_micros"] = int(m["reserved_micros"])
    return Job(**m)


def _lock_number(owner: str) -> int:
    """A signed 64-bit number for `pg_advisory_xact_lock`, the same in every replica."""
    return int.from_bytes(
        hashlib.blake2b(b"inferplex-jobs:" + owner.encode(), digest_size=8).digest(), "big", signed=True
    )


@dataclass(frozen=True, slots=True)
class Seats:
    """The concurrent-job limits a new row must fit: (column, value, limit) for each that applies."""

    checks: tuple[tuple[str, str, int], ...] = ()


class JobRows:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._postgres = db.dialect.name == "postgresql"

    async def insert(self, values: dict[str, Any], seats: Seats) -> str | None:
        """Insert a new row if every limit in `seats` has room: None, or the column whose limit is full."""

        def run(conn: Connection) -> str | None:
            if self._postgres and seats.checks:
                owner = seats.checks[-1][1]  # the widest: the account when there is one
                conn.execute(select(func.pg_advisory_xact_lock(_lock_number(owner))))
            for column, value, limit in seats.checks:
                active = select(func.count()).where(J[column] == value, J.status.in_(ACTIVE), J.deleted_at.is_(None))
                if conn.execute(active).scalar_one() >= limit:
                    return column
            conn.execute(media_jobs.insert().values(values))
            return None

        return await self.db.write(run)

    async def get(self, job_id: str, owner: str | None = None) -> Job | None:
        """The row, if `owner`'s (any owner when None) and not deleted."""
        query = select(media_jobs).where(J.id == job_id, J.deleted_at.is_(None))
        if owner is not None:
            query = query.where(J.owner == owner)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _job(row)

    async def page(self, owner: str, after: str | None, limit: int, order: str) -> tuple[list[Job], bool] | None:
        """`owner`'s jobs by creation time, `limit` of them after the job `after` (None: an unknown `after`),
        and whether more follow."""

        def run(conn: Connection) -> tuple[list[Job], bool] | None:
            query = select(media_jobs).where(J.owner == owner, J.deleted_at.is_(None))
            if after is not None:
                mark = conn.execute(select(J.created_at, J.id).where(J.id == after, J.owner == owner)).first()
                if mark is None:
                    return None
                if order == "asc":
                    query = query.where(or_(J.created_at > mark[0], (J.created_at == mark[0]) & (J.id > mark[1])))
                else:
                    query = query.where(or_(J.created_at < mark[0], (J.created_at == mark[0]) & (J.id < mark[1])))
            keys = (J.created_at.asc(), J.id.asc()) if order == "asc" else (J.created_at.desc(), J.id.desc())
            rows = conn.execute(query.order_by(*keys).limit(limit + 1)).all()
            return [_job(r) for r in rows[:limit]], len(rows) > limit

        return await self.db.read(run)

    async def submitted(self, job_id: str, values: dict[str, Any]) -> bool:
        """The upstream took the job: record it (unless the row was deleted meanwhile)."""
        statement = update(media_jobs).where(J.id == job_id, J.status == "submitting").values(values)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def discard(self, job_id: str) -> None:
        """Remove a row whose submission failed (nothing was reserved for it any longer)."""
        statement = delete(media_jobs).where(J.id == job_id, J.status == "submitting")
        await self.db.write(lambda conn: conn.execute(statement))

    async def claim(self, token: str, now: float, lease_s: float, limit: int) -> list[Job]:
        """Due jobs nobody holds, leased to `token` (store/leasing.py)."""
        return [_job(r) for r in await claim_due(self.db, media_jobs, J.next_poll_at, token, now, lease_s, limit)]

    async def fenced(self, job_id: str, token: str, values: dict[str, Any], *, statuses: Sequence[str] = ()) -> bool:
        """Write `values` if `token` still holds the job's lease (and its status is one of `statuses`, if given)."""
        where = [J.id == job_id, J.claimed_by == token]
        if statuses:
            where.append(J.status.in_(statuses))
        statement = update(media_jobs).where(*where).values(values)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def renew(self, job_id: str, token: str, until: float) -> bool:
        return await self.fenced(job_id, token, {"claimed_until": until})

    async def mark_settled(self, job_id: str) -> None:
        statement = update(media_jobs).where(J.id == job_id).values(settled=True, next_poll_at=None)
        await self.db.write(lambda conn: conn.execute(statement))

    async def delete(self, job_id: str, owner: str, now: float, retry_at: float) -> Job | None:
        """Mark `owner`'s job deleted (an active one cancelled, looked at again at `retry_at` in case this
        replica stops before it has cancelled and released it): the row as it was before, or None."""

        def run(conn: Connection) -> Job | None:
            query = select(media_jobs).where(J.id == job_id, J.owner == owner, J.deleted_at.is_(None))
            row = conn.execute(query.with_for_update()).first()
            if row is None:
                return None
            job = _job(row)
            values: dict[str, Any] = {"deleted_at": now}
            if job.status in ACTIVE:
                values |= {"status": "cancelled", "next_poll_at": retry_at, "error_code": "cancelled",
                           "error_message": "Cancelled by its caller."}  # fmt: skip
            conn.execute(update(media_jobs).where(J.id == job_id).values(values))
            return job

        return await self.db.write(run)
