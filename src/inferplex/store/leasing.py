"""Rows that any replica may work on, one at a time: a due row is leased to one replica's token until a time,
and the replica's later writes are fenced by that token (jobs/rows.py, responses_api/store.py).

A table that uses this has `id`, a due-time column (when the row next wants work), `claimed_by` and
`claimed_until`. Kept in one place because the claim is where the exactness lives: `FOR UPDATE SKIP LOCKED`
on PostgreSQL (two replicas never lease the same row, and neither waits on the other's locks), the lease
written only where the row is still free, and the rows read back by the token that now holds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Column, Row, Table, or_, select, update
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database


async def claim_due(
    db: Database,
    table: Table,
    due: Column[Any],
    token: str,
    now: float,
    lease_s: float,
    limit: int,
    also: Mapping[str, Any] | None = None,
) -> Sequence[Row[Any]]:
    """Rows due by `now` that nobody holds, leased to `token` until `now + lease_s` (with `also` written in
    the same update), at most `limit`, earliest due first. A read comes first: a gateway with nothing due
    (nearly always) costs one indexed read per look, not a write transaction."""
    c = table.c
    free = or_(c.claimed_until.is_(None), c.claimed_until < now)
    any_due = select(c.id).where(due <= now, free).limit(1)
    if limit <= 0 or await db.read(lambda conn: conn.execute(any_due).first()) is None:
        return []

    def run(conn: Connection) -> Sequence[Row[Any]]:
        found = select(c.id).where(due <= now, free).order_by(due).limit(limit)
        ids = list(conn.execute(found.with_for_update(skip_locked=True)).scalars())
        if not ids:
            return []
        lease = {"claimed_by": token, "claimed_until": now + lease_s, **(also or {})}
        conn.execute(update(table).where(c.id.in_(ids), free).values(lease))
        return conn.execute(select(table).where(c.id.in_(ids), c.claimed_by == token)).all()

    return await db.write(run)
