"""The `batches` and `batch_lines` rows (migration 0014), on whichever engine the store runs (store/backend).

A line is claimable when it is `pending` and its `claimed_until` (for a pending line: not before, set when a
rate limit sent it back) has passed, or `running` and its lease has lapsed (its worker died or stalled), and
its batch is `in_progress`. A worker claims lines in one transaction: on PostgreSQL `FOR UPDATE SKIP LOCKED`
(lines another worker is claiming at that instant are skipped, not waited for), on SQLite the single writer
makes the same statements serial. Each claim gives the line a new `attempt` and a new `request_id`, and every
later write of that run is fenced by both (`WHERE claimed_by = token AND attempt = n`): a worker whose lease
lapsed writes nothing, and the line's result is the next claimant's. So each line ends exactly once.

A line's end writes its own row only. An open batch's counts and cost are read from its lines when it is
read (`_live`), and written into its row once, when it ends: were each line's end to bump the batch row, every
line of a batch would queue on that one row's lock, one commit at a time.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from inferplex.batches.model import Batch, Counts, LineResult
from inferplex.store.backend import Database

metadata = MetaData()

batches = Table(
    "batches",
    metadata,
    Column("id", String(48), primary_key=True),
    Column("dialect", String(16), nullable=False),
    Column("owner", String(200), nullable=False),
    Column("account_id", String(40)),
    Column("key_id", String(40), nullable=False),
    Column("scopes", Text),
    Column("endpoint", String(64), nullable=False),
    Column("input_file_id", String(64)),
    Column("completion_window", String(8), nullable=False),
    Column("status", String(16), nullable=False),
    Column("errors", Text),
    Column("metadata", Text),
    Column("output_file_id", String(64)),
    Column("error_file_id", String(64)),
    Column("total", Integer, nullable=False),
    Column("completed", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("cancelled", Integer, nullable=False),
    Column("expired", Integer, nullable=False),
    Column("cost_micros", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("in_progress_at", Float),
    Column("finalizing_at", Float),
    Column("completed_at", Float),
    Column("failed_at", Float),
    Column("expired_at", Float),
    Column("cancelling_at", Float),
    Column("cancelled_at", Float),
    Column("deleted_at", Float),
    Column("claimed_by", String(40)),
    Column("claimed_until", Float),
    Index("ix_batches_owner_created", "owner", "created_at"),
    Index("ix_batches_status", "status"),
)
B = batches.c

batch_lines = Table(
    "batch_lines",
    metadata,
    Column("batch_id", String(48), primary_key=True),
    Column("line_no", Integer, primary_key=True),
    Column("custom_id", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("claimed_by", String(40)),
    Column("claimed_until", Float),
    Column("request_id", String(64)),
    Column("status_code", Integer),
    Column("result", Text),
    Column("cost_micros", BigInteger, nullable=False),
    Column("reserved_micros", BigInteger, nullable=False),
    Column("settled", Boolean, nullable=False),
    Column("ended_at", Float),
    Index("ix_batch_lines_status", "status", "claimed_until"),
    Index("ix_batch_lines_batch_status", "batch_id", "status"),
    Index("ix_batch_lines_settled", "settled"),
)
L = batch_lines.c

# A line's end -> the batch column that counts it.
COUNTED = {"succeeded": "completed", "errored": "failed", "cancelled": "cancelled", "expired": "expired"}
LIVE = ("pending", "running")
# Batches whose lines may still run or be wound up (finalized into files).
OPEN = ("in_progress", "cancelling", "finalizing")
# Lines to run (pending, or running with a lapsed lease) of batches in progress; asked every second (claim).
DUE = and_(
    L.status.in_(LIVE),
    or_(L.claimed_until.is_(None), L.claimed_until < bindparam("now")),
    L.batch_id.in_(select(B.id).where(B.status == "in_progress", B.expired_at.is_(None), B.deleted_at.is_(None))),
)
ANY_DUE = select(L.line_no).where(DUE).limit(1)
# The open batches with no line left to run and no worker finalizing them: ready to be finalized. Built once:
# the worker asks every second, and negating a new EXISTS leaves a reference cycle in SQLAlchemy (the clause
# and its comparator) that only the cyclic collector frees, which `inferplex serve` runs rarely (serving/
# worker.py): built per tick, it kept ~0.6 MB a minute of garbage around for the best part of an hour. So are
# the statements above (an expanding IN's parameter, once cloned, holds a set that holds it).
READY = select(B.id).where(
    B.status.in_(OPEN),
    or_(B.claimed_until.is_(None), B.claimed_until < bindparam("now")),
    B.deleted_at.is_(None),
    ~select(L.line_no).where(L.batch_id == B.id, L.status.in_(LIVE)).exists(),
)


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A batch row with what only the worker needs (the owner's key and scopes) besides the public `Batch`."""

    batch: Batch
    account_id: str | None
    key_id: str
    scopes: frozenset[str] | None
    deleted: bool


@dataclass(frozen=True, slots=True)
class Claimed:
    """A line leased to a worker for one run: fenced by (`token`, `attempt`)."""

    batch_id: str
    line_no: int
    custom_id: str
    body: dict[str, Any]
    attempt: int
    request_id: str


@dataclass(frozen=True, slots=True)
class Ended:
    """A line's end to write (`BatchRows.end_many`): `result` is the JSON text of its body or error."""

    line: Claimed
    token: str
    outcome: str
    status_code: int
    result: str
    cost: int
    reserved: int
    settled: bool


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A succeeded line whose held reservation has not been settled yet."""

    batch_id: str
    line_no: int
    request_id: str
    reserved_micros: int
    cost_micros: int
    result: dict[str, Any]


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def batch_of(row: Any, live: tuple[Counts, int] | None = None) -> BatchRow:
    """The row as a `BatchRow`; `live`: the counts and cost read from an open batch's lines (`_live`)."""
    m = row._mapping
    batch = Batch(
        id=m["id"], dialect=m["dialect"], owner=m["owner"], endpoint=m["endpoint"],
        input_file_id=m["input_file_id"], completion_window=m["completion_window"], status=m["status"],
        counts=Counts(m["total"], m["completed"], m["failed"], m["cancelled"], m["expired"]),
        created_at=int(m["created_at"]), expires_at=int(m["expires_at"]),
        metadata=json.loads(m["metadata"]) if m["metadata"] else None,
        output_file_id=m["output_file_id"], error_file_id=m["error_file_id"],
        errors=json.loads(m["errors"]) if m["errors"] else None,
        in_progress_at=_int(m["in_progress_at"]), finalizing_at=_int(m["finalizing_at"]),
        completed_at=_int(m["completed_at"]), failed_at=_int(m["failed_at"]), expired_at=_int(m["expired_at"]),
        cancelling_at=_int(m["cancelling_at"]), cancelled_at=_int(m["cancelled_at"]),
        ended_at=_int(m["completed_at"] or m["failed_at"] or m["cancelled_at"] or
                      (m["expired_at"] if m["status"] == "expired" else None)),
        cost_micros=int(m["cost_micros"]),
    )  # fmt: skip
    if live is not None:
        batch = replace(batch, counts=replace(live[0], total=batch.counts.total), cost_micros=live[1])
    scopes = frozenset(m["scopes"].split()) if m["scopes"] is not None else None
    return BatchRow(batch, m["account_id"], m["key_id"], scopes, m["deleted_at"] is not None)


def result_of(row: Any) -> LineResult:
    m = row._mapping
    result = json.loads(m["result"]) if m["result"] else None
    status = m["status"]
    never_run = status in ("cancelled", "expired")
    return LineResult(
        line_no=m["line_no"], custom_id=m["custom_id"], outcome=status, status_code=m["status_code"] or 0,
        body=None if never_run else result, error=result if never_run else None, request_id=m["request_id"],
        cost_micros=int(m["cost_micros"]),
    )  # fmt: skip


def _live(conn: Connection, rows: Sequence[Any]) -> list[BatchRow]:
    """The rows as `BatchRow`s, an open batch's counts and cost read from its lines (an ended batch's were
    written when it ended): a line's end then writes its own row only, never the batch's, which every line
    would otherwise wait on (one hot row, one commit at a time)."""
    open_ids = [r._mapping["id"] for r in rows if r._mapping["status"] in OPEN]
    found: dict[str, dict[str, int]] = {i: {} for i in open_ids}
    if open_ids:
        query = (
            select(L.batch_id, L.status, func.count(), func.coalesce(func.sum(L.cost_micros), 0))
            .where(L.batch_id.in_(open_ids))
            .group_by(L.batch_id, L.status)
        )
        for batch_id, status, n, cost in conn.execute(query):
            found[batch_id][status] = int(n)
            found[batch_id]["cost"] = found[batch_id].get("cost", 0) + int(cost)
    out = []
    for r in rows:
        by = found.get(r._mapping["id"])
        counts = None if by is None else Counts(0, *(by.get(status, 0) for status in COUNTED))
        out.append(batch_of(r, None if by is None or counts is None else (counts, by.get("cost", 0))))
    return out


def counted(conn: Connection, batch_id: str) -> dict[str, int]:
    """The final counts and cost of a batch from its lines, for its row when it ends."""
    query = (
        select(L.status, func.count(), func.coalesce(func.sum(L.cost_micros), 0))
        .where(L.batch_id == batch_id)
        .group_by(L.status)
    )
    values = {column: 0 for column in COUNTED.values()} | {"cost_micros": 0}
    for status, n, cost in conn.execute(query):
        if status in COUNTED:
            values[COUNTED[status]] = int(n)
        values["cost_micros"] += int(cost)
    return values


class BatchRows:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- batches ---------------------------------------------------------------------------------------

    async def insert(self, values: dict[str, Any], lines: Sequence[tuple[str, str]]) -> None:
        """The batch row and its lines ((custom_id, body JSON) in line order), in one transaction."""
        rows = [
            {"batch_id": values["id"], "line_no": i, "custom_id": custom_id, "body": body, "status": "pending",
             "attempt": 0, "cost_micros": 0, "reserved_micros": 0, "settled": False}
            for i, (custom_id, body) in enumerate(lines)
        ]  # fmt: skip

        def run(conn: Connection) -> None:
            conn.execute(batches.insert().values(values))
            for at in range(0, len(rows), 500):
                conn.execute(batch_lines.insert(), rows[at : at + 500])

        await self.db.write(run)

    async def get(self, batch_id: str, owner: str | None = None) -> BatchRow | None:
        """The batch, if `owner`'s (any owner when None) and not deleted."""
        query = select(batches).where(B.id == batch_id, B.deleted_at.is_(None))
        if owner is not None:
            query = query.where(B.owner == owner)

        def run(conn: Connection) -> BatchRow | None:
            row = conn.execute(query).first()
            return None if row is None else _live(conn, [row])[0]

        return await self.db.read(run)

    async def page(
        self, owner: str, dialect: str, after: str | None, before: str | None, limit: int
    ) -> tuple[list[BatchRow], bool] | None:
        """`owner`'s batches of `dialect`, newest first, after (older than) `after` or before (newer than)
        `before`, and whether more follow that way; None when `after`/`before` is not one of them."""
        mark_id = after or before

        def run(conn: Connection) -> tuple[list[BatchRow], bool] | None:
            query = select(batches).where(B.owner == owner, B.dialect == dialect, B.deleted_at.is_(None))
            keys = (B.created_at.desc(), B.id.desc())
            if mark_id is not None:
                mark = conn.execute(select(B.created_at, B.id).where(B.id == mark_id, B.owner == owner)).first()
                if mark is None:
                    return None
                at, at_id = mark
                if after is not None:
                    query = query.where(or_(B.created_at < at, and_(B.created_at == at, B.id < at_id)))
                else:
                    query = query.where(or_(B.created_at > at, and_(B.created_at == at, B.id > at_id)))
                    keys = (B.created_at.asc(), B.id.asc())
            rows = _live(conn, conn.execute(query.order_by(*keys).limit(limit + 1)).all())
            found, more = rows[:limit], len(rows) > limit
            if before is not None:
                found.reverse()
            return found, more

        return await self.db.read(run)

    async def set_status(self, batch_id: str, values: dict[str, Any], *, statuses: Sequence[str]) -> bool:
        """Move the batch on if its status is one of `statuses`."""
        statement = update(batches).where(B.id == batch_id, B.status.in_(statuses)).values(values)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def mark_deleted(self, batch_id: str, now: float) -> None:
        def run(conn: Connection) -> None:
            conn.execute(update(batches).where(B.id == batch_id).values(deleted_at=now))
            conn.execute(delete(batch_lines).where(L.batch_id == batch_id))

        await self.db.write(run)

    # ---- the worker's ----------------------------------------------------------------------------------

    async def claim(self, token: str, now: float, lease_s: float, limit: int) -> list[Claimed]:
        """Up to `limit` claimable lines, leased to `token` until `now + lease_s`, each with a new attempt and
        request id. A read first: a gateway with nothing to run (nearly always) costs one indexed read."""
        at = {"now": now}
        if await self.db.read(lambda conn: conn.execute(ANY_DUE, at).first()) is None:
            return []

        def run(conn: Connection) -> list[Claimed]:
            query = select(L.batch_id, L.line_no, L.custom_id, L.body, L.attempt).where(DUE)
            query = query.order_by(L.batch_id, L.line_no).limit(limit)
            found = conn.execute(query.with_for_update(skip_locked=True, of=batch_lines), at).all()
            claimed = []
            for batch_id, line_no, custom_id, body, attempt in found:
                request_id = "breq_" + secrets.token_hex(12)
                values = {"status": "running", "claimed_by": token, "claimed_until": now + lease_s,
                          "attempt": attempt + 1, "request_id": request_id}  # fmt: skip
                where = (L.batch_id == batch_id, L.line_no == line_no, L.attempt == attempt)
                if conn.execute(update(batch_lines).where(*where).values(values)).rowcount:
                    claimed.append(Claimed(batch_id, line_no, custom_id, json.loads(body), attempt + 1, request_id))
            return claimed

        return await self.db.write(run)

    async def give_back(self, token: str) -> None:
        """Make the lines `token` was running claimable at once (its worker is stopping: they run again
        elsewhere without waiting for their leases to lapse)."""
        statement = update(batch_lines).where(L.claimed_by == token, L.status == "running")
        values = {"status": "pending", "claimed_by": None, "claimed_until": None}
        await self.db.write(lambda conn: conn.execute(statement.values(values)))

    async def renew(self, token: str, until: float) -> None:
        """Extend the leases of every line `token` is running."""
        statement = update(batch_lines).where(L.claimed_by == token, L.status == "running")
        await self.db.write(lambda conn: conn.execute(statement.values(claimed_until=until)))

    def _fence(self, line: Claimed, token: str) -> Any:
        return and_(
            L.batch_id == line.batch_id, L.line_no == line.line_no, L.claimed_by == token,
            L.attempt == line.attempt, L.status == "running",
        )  # fmt: skip

    async def retry_later(self, line: Claimed, token: str, at: float) -> bool:
        """Give the line back, not to be claimed before `at` (a rate limit said when)."""
        statement = update(batch_lines).where(self._fence(line, token))
        values = {"status": "pending", "claimed_by": None, "claimed_until": at}
        return bool(await self.db.write(lambda conn: conn.execute(statement.values(values)).rowcount))

    async def end_many(self, ends: Sequence[Ended]) -> list[bool]:
        """Write each line's end (its result, cost and the reservation it still holds) if its worker still holds
        that attempt (else nothing is written for it: False), all in one transaction: the lines that end
        together share a commit (batches/worker.py queues them through a `Batcher`)."""
        now = time.time()

        def run(conn: Connection) -> list[bool]:
            written = []
            for e in ends:
                values = {"status": e.outcome, "status_code": e.status_code, "result": e.result,
                          "cost_micros": e.cost, "reserved_micros": e.reserved, "settled": e.settled,
                          "ended_at": now}  # fmt: skip
                statement = update(batch_lines).where(self._fence(e.line, e.token)).values(values)
                written.append(bool(conn.execute(statement).rowcount))
            return written

        return await self.db.write(run)

    async def mark_settled(self, keys: Sequence[tuple[str, int]]) -> list[None]:
        """Mark lines ((batch id, line no)) settled, in one transaction."""

        def run(conn: Connection) -> list[None]:
            for batch_id, line_no in keys:
                where = (L.batch_id == batch_id, L.line_no == line_no)
                conn.execute(update(batch_lines).where(*where).values(settled=True))
            return [None] * len(keys)

        return await self.db.write(run)

    async def unsettled(self, now: float, limit: int) -> list[tuple[Unsettled, BatchRow]]:
        """Succeeded lines not settled whose lease has lapsed (their worker died between writing the result and
        settling it; a live worker settles its own within its lease), with their batches."""
        query = (
            select(L.batch_id, L.line_no, L.request_id, L.reserved_micros, L.cost_micros, L.result)
            .where(L.settled.is_(False), L.status == "succeeded", L.claimed_until < now)
            .limit(limit)
        )

        def run(conn: Connection) -> list[tuple[Unsettled, BatchRow]]:
            lines = [
                Unsettled(r[0], r[1], r[2], int(r[3]), int(r[4]), json.loads(r[5] or "{}"))
                for r in conn.execute(query).all()
            ]
            ids = {line.batch_id for line in lines}
            found = {r.id: batch_of(r) for r in conn.execute(select(batches).where(B.id.in_(ids)))} if ids else {}
            return [(line, found[line.batch_id]) for line in lines if line.batch_id in found]

        return await self.db.read(run)

    async def wind_up(self, now: float, max_attempts: int) -> list[str]:
        """End the lines that will never run: every pending line of a cancelling batch (`cancelled`) and of a
        batch past its window (`expired`: the window is over, the batch is marked so), and a line whose runs
        were cut `max_attempts` times (its worker died each time: `errored`, rather than kill the next one).
        Returns the ids of the open batches with no line pending or running: ready to be finalized."""

        def run(conn: Connection) -> list[str]:
            cut = {"error": {"message": f"The request was interrupted {max_attempts} times; it is not run again.",
                             "type": "api_error", "param": None, "code": "batch_line_interrupted"}}  # fmt: skip
            stuck = update(batch_lines).where(L.status == "running", L.claimed_until < now, L.attempt >= max_attempts)
            conn.execute(stuck.values(status="errored", status_code=500, result=json.dumps(cut), settled=True,
                                      ended_at=now))  # fmt: skip
            late = select(B.id).where(B.status == "in_progress", B.expires_at < now, B.expired_at.is_(None))
            late = late.order_by(B.id)  # rows locked in one order by every replica: no deadlock between two
            for (batch_id,) in conn.execute(late).all():
                conn.execute(update(batches).where(B.id == batch_id).values(expired_at=now))
            winding = (
                select(B.id, B.status)
                .where(or_(B.status == "cancelling", and_(B.status == "in_progress", B.expired_at.is_not(None))))
                .order_by(B.id)
            )
            for batch_id, status in conn.execute(winding).all():
                outcome = "cancelled" if status == "cancelling" else "expired"
                code = "batch_cancelled" if outcome == "cancelled" else "batch_expired"
                message = ("The batch was cancelled before this request was run." if outcome == "cancelled"
                           else "This request could not be executed before the completion window expired.")  # fmt: skip
                error = json.dumps({"code": code, "message": message})
                ended = update(batch_lines).where(L.batch_id == batch_id, L.status == "pending")
                conn.execute(ended.values(status=outcome, result=error, settled=True, ended_at=now))
            return list(conn.execute(READY, {"now": now}).scalars())

        return await self.db.write(run)

    async def claim_batch(self, batch_id: str, token: str, now: float, lease_s: float) -> BatchRow | None:
        """Lease a batch ready to be finalized (no other worker doing it); a normally ending one is `finalizing`."""

        def run(conn: Connection) -> BatchRow | None:
            free = or_(B.claimed_until.is_(None), B.claimed_until < now)
            query = select(batches).where(B.id == batch_id, B.status.in_(OPEN), free)
            row = conn.execute(query.with_for_update(skip_locked=True)).first()
            if row is None:
                return None
            values: dict[str, Any] = {"claimed_by": token, "claimed_until": now + lease_s}
            if row._mapping["status"] == "in_progress" and row._mapping["expired_at"] is None:
                values |= {"status": "finalizing", "finalizing_at": now}
            conn.execute(update(batches).where(B.id == batch_id).values(values))
            return _live(conn, [conn.execute(select(batches).where(B.id == batch_id)).one()])[0]

        return await self.db.write(run)

    async def finished(self, batch_id: str, token: str, values: dict[str, Any]) -> bool:
        """The batch's final status and files, if `token` still holds it."""
        statement = update(batches).where(B.id == batch_id, B.claimed_by == token, B.status.in_(OPEN))

        def run(conn: Connection) -> bool:
            final = {**values, **counted(conn, batch_id), "claimed_by": None, "claimed_until": None}
            return bool(conn.execute(statement.values(final)).rowcount)

        return await self.db.write(run)

    async def results(self, batch_id: str, after: int, limit: int) -> list[LineResult]:
        """The lines after line `after`, in order, `limit` of them."""
        query = select(batch_lines).where(L.batch_id == batch_id, L.line_no > after).order_by(L.line_no).limit(limit)
        return [result_of(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def count_live(self, batch_id: str) -> int:
        query = select(func.count()).where(L.batch_id == batch_id, L.status.in_(LIVE))
        return int(await self.db.read(lambda conn: conn.execute(query).scalar_one()))
