"""The stored responses (migration 0013), on whichever engine the gateway's store runs (store/backend.Database).

A row is one `/v1/responses` answer kept for its owner (the caller's account, else its key): the request as
it came, its input items (`GET .../input_items`), the response object, and `history`, the items a follow-up
sends upstream before its own input. The answer's row is written in one statement before the caller has it,
so a follow-up on any replica reads it at once: history is exact, not rebuilt from logs.

A background response is a durable job on the same row: `next_run_at` says it is due, and a replica claims it
under a lease as jobs/rows.py does (`FOR UPDATE SKIP LOCKED` on PostgreSQL, the single writer on SQLite);
every later write of the run is fenced by its token. Its stream events are rows of `response_events`, appended
by the run in order (`seq` from 0), read by whoever streams it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
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
    select,
    update,
)
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database
from inferplex.store.leasing import claim_due

metadata = MetaData()

responses = Table(
    "responses",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("account_id", String(40)),
    Column("key_id", String(40), nullable=False),
    Column("scopes", Text),
    Column("model", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("background", Boolean, nullable=False),
    Column("previous_response_id", String(64)),
    Column("request", Text, nullable=False),
    Column("input_items", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("history", Text),
    Column("request_id", String(64)),
    Column("cost_micros", BigInteger),
    Column("created_at", Float, nullable=False),
    Column("completed_at", Float),
    Column("expires_at", Float),
    Column("next_run_at", Float),
    Column("attempts", Integer, nullable=False),
    Column("claimed_by", String(40)),
    Column("claimed_until", Float),
    Index("ix_responses_expires_at", "expires_at"),
    Index("ix_responses_next_run_at", "next_run_at"),
)
R = responses.c

response_events = Table(
    "response_events",
    metadata,
    Column("response_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", Text, nullable=False),
)
E = response_events.c

ACTIVE = ("queued", "in_progress")
TERMINAL = ("completed", "incomplete", "failed", "cancelled")


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(24)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One row, its JSON columns decoded. `history` is None until the response has finished."""

    id: str
    owner: str
    account_id: str | None
    key_id: str
    scopes: frozenset[str] | None
    model: str
    status: str
    background: bool
    previous_response_id: str | None
    request: dict[str, Any]
    input_items: list[dict[str, Any]]
    response: dict[str, Any]
    history: list[dict[str, Any]] | None
    request_id: str | None
    cost_micros: int | None
    created_at: float
    completed_at: float | None
    expires_at: float | None
    next_run_at: float | None
    attempts: int
    claimed_by: str | None
    claimed_until: float | None


def _row(row: Any) -> StoredResponse:
    m = dict(row._mapping)
    m["scopes"] = None if m["scopes"] is None else frozenset(json.loads(m["scopes"]))
    for key in ("request", "input_items", "response"):
        m[key] = json.loads(m[key])
    m["history"] = None if m["history"] is None else json.loads(m["history"])
    m["background"] = bool(m["background"])
    m["cost_micros"] = None if m["cost_micros"] is None else int(m["cost_micros"])
    return StoredResponse(**m)


class ResponseRows:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def insert(self, values: dict[str, Any]) -> None:
        statement = responses.insert().values(values)
        await self.db.write(lambda conn: conn.execute(statement))

    async def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The row, if `owner`'s (any owner's when None)."""
        query = select(responses).where(R.id == response_id)
        if owner is not None:
            query = query.where(R.owner == owner)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _row(row)

    async def update(self, response_id: str, values: dict[str, Any], *, statuses: Sequence[str] = ()) -> bool:
        """Write `values` (if the status is one of `statuses`, when given): whether the row was written."""
        where = [R.id == response_id]
        if statuses:
            where.append(R.status.in_(statuses))
        statement = update(responses).where(*where).values(values)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def delete(self, response_id: str, owner: str) -> StoredResponse | None:
        """Remove `owner`'s row and its events: the row as it was, or None."""

        def run(conn: Connection) -> StoredResponse | None:
            query = select(responses).where(R.id == response_id, R.owner == owner)
            row = conn.execute(query.with_for_update()).first()
            if row is None:
                return None
            conn.execute(delete(response_events).where(E.response_id == response_id))
            conn.execute(delete(responses).where(R.id == response_id))
            return _row(row)

        return await self.db.write(run)

    async def cancel(self, response_id: str, owner: str) -> StoredResponse | None:
        """Mark `owner`'s unfinished background row cancelled (its run sees it at its next fenced write and
        stops): the row as it is now, or None if there is none."""

        def run(conn: Connection) -> StoredResponse | None:
            query = select(responses).where(R.id == response_id, R.owner == owner)
            row = conn.execute(query.with_for_update()).first()
            if row is None:
                return None
            found = _row(row)
            if found.background and found.status in ACTIVE:  # its run, if any, then writes what it produced
                response = dumps({**found.response, "status": "cancelled"})
                values = {"status": "cancelled", "next_run_at": None, "response": response}
                conn.execute(update(responses).where(R.id == response_id).values(values))
                row = conn.execute(select(responses).where(R.id == response_id)).first()
            return _row(row)

        return await self.db.write(run)

    # ---- background runs ----------------------------------------------------------------------------------

    async def claim(self, token: str, now: float, lease_s: float, limit: int) -> list[StoredResponse]:
        """Due rows nobody holds, leased to `token` (store/leasing.py), each claim counted in `attempts`."""
        also = {"attempts": R.attempts + 1}
        return [_row(r) for r in await claim_due(self.db, responses, R.next_run_at, token, now, lease_s, limit, also)]

    async def fenced(self, response_id: str, token: str, values: dict[str, Any], *, active: bool = True) -> bool:
        """Write `values` if `token` still holds the row (and, with `active`, it is not cancelled meanwhile)."""
        where = [R.id == response_id, R.claimed_by == token]
        if active:
            where.append(R.status.in_(ACTIVE))
        statement = update(responses).where(*where).values(values)
        return bool(await self.db.write(lambda conn: conn.execute(statement).rowcount))

    async def append_events(
        self,
        response_id: str,
        token: str,
        events: list[tuple[int, str]],
        until: float | None,
        final: dict[str, Any] | None = None,
        statuses: Sequence[str] = ACTIVE,
    ) -> bool:
        """Append events (seq, JSON) in one transaction if `token` holds the row and it is still running (its
        status one of `statuses`: a cancelled run's closing events are appended to its `cancelled` row),
        renewing the lease to `until`, and write `final` (the finished row's values) in the same transaction:
        False when the run must stop (cancelled, or its lease was taken)."""

        def run(conn: Connection) -> bool:
            where = (R.id == response_id, R.claimed_by == token, R.status.in_(statuses))
            values = {"claimed_until": until, **(final or {})}
            if not conn.execute(update(responses).where(*where).values(values)).rowcount:
                return False
            if events:
                rows = [{"response_id": response_id, "seq": seq, "data": data} for seq, data in events]
                conn.execute(response_events.insert(), rows)
            return True

        return await self.db.write(run)

    async def events_after(self, response_id: str, after: int, limit: int = 500) -> list[tuple[int, str]]:
        query = select(E.seq, E.data).where(E.response_id == response_id, E.seq > after).order_by(E.seq).limit(limit)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [(int(r[0]), r[1]) for r in rows]

    async def event_count(self, response_id: str) -> int:
        query = select(func.count()).select_from(response_events).where(E.response_id == response_id)
        return int(await self.db.read(lambda conn: conn.execute(query).scalar_one()))

    # ---- retention ----------------------------------------------------------------------------------------

    async def sweep(self, now: float, limit: int = 500) -> int:
        """Delete up to `limit` rows past their `expires_at` (unfinished ones are kept), with their events."""

        def run(conn: Connection) -> int:
            query = select(R.id).where(R.expires_at < now, R.status.in_(TERMINAL)).limit(limit)
            ids = list(conn.execute(query).scalars())
            if ids:
                conn.execute(delete(response_events).where(E.response_id.in_(ids)))
                conn.execute(delete(responses).where(R.id.in_(ids)))
            return len(ids)

        return await self.db.write(run)
