"""Rows that any replica may work on, one at a time: a due row is leased to one replica's token until a time,
and the replica's later writes are fenced by that token (jobs/rows.py, responses_api/store.py).

A table that uses this has `id`, a due-time column (when the row next wants work), `claimed_by` and
`claimed_until`. Kept in one place because the claim is where the exactness lives: `FOR UPDATE SKIP LOCKED`
on PostgreSQL (two replicas never lease the same row, and neither waits on the other's locks), the lease
written only where the row is still free, and the rows read back by the token that now holds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Column, Row, Table, or_, select, update
from sqlalchemy.engine import Connection

from inferplex.store.backend import Database, unreachable

log = logging.getLogger("inferplex")


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


async def look_forever(
    what: str,
    look: Callable[[], Awaitable[object]],
    every_s: float,
    closing: Callable[[], bool],
    wake: asyncio.Event | None = None,
) -> None:
    """A replica's worker over leased rows (video jobs, background responses, batch lines): `look` every
    `every_s`, or at once when `wake` is set (new work on this replica). A database that cannot be reached is
    looked at again next time, quietly: the work waits in its rows; anything else is logged. Ends when
    `closing()` says so (a driver may turn the worker's cancellation into an error of its own meanwhile)."""
    while not closing():
        if wake is not None:
            wake.clear()
        try:
            await look()
        except Exception as exc:
            if closing():
                return
            if unreachable(exc) is None:
                log.exception("the %s failed", what)
            else:
                log.debug("the %s cannot reach the database (%s)", what, type(exc).__name__)
        if wake is None:
            await asyncio.sleep(every_s)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), every_s)
