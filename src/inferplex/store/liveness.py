"""A replica's liveness lease, and what the others do when it lapses: release the reservations it held.

Without this, a replica killed outright (SIGKILL, a lost machine) leaves its requests' reservations held
until the orphan sweeper's bound, `storage.orphan_release_s` (an hour and more by default, since it must
exceed the longest request). With it, the bound is the lease:

- Every serving replica has a row in `replicas` (migration 0019) under an id of its own, which its ledger
  writes into the note of every reservation it makes (store/holding.py). The row's `alive_until` is renewed
  every third of `lease_s` (`storage.redis_lease_s`: the lease of the replica's concurrency slots in Redis,
  so everything a lost replica held comes back on one clock).
- A replica stopped cleanly deletes its row once its last settlements are written (or, if some wait in its
  spool, leaves its reservations to the spool's next writer: see `aclose`).
- Every replica looks every third of `lease_s` for rows whose lease lapsed, leases them to itself
  (store/leasing.py `claim_due`, so two survivors do not work on the same row), and releases each
  reservation noted with the lost replica's id that has no settlement, through `Ledger.replay`: the
  exactly-once path of the spool and the orphan sweeper (under the account's row lock; a settlement that
  arrives afterwards is skipped). Then it deletes the row.

Bound: a lost replica's reservations are released within `lease_s` (its last lease running out) plus
`lease_s / 3` (the next look of a survivor) plus the writes. With no survivor they wait for the next replica
to start, or for the orphan sweeper.

Not released here: reservations handed to a durable job (a video job, a batch line: their rows keep the
request id, and whichever replica picks the job up settles it), and any reservation of a replica that
stopped with settlements still in its spool (the spool settles them when written back).

A replica cut from the database (or starved of CPU) for longer than its lease, though alive, is taken for
lost: its open reservations are released. A lapsed lease is never renewed: its next renewal registers under
a new id, and what it reserved under the old one is settled through the spool from then on
(store/holding.py), which skips a reservation already released: those requests go uncharged, never refunded
twice. Lapse is judged on each replica's clock: replicas' clocks must agree within a third of the lease
(NTP does far better).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    MetaData,
    String,
    Table,
    and_,
    column,
    delete,
    exists,
    func,
    insert,
    select,
    table,
    update,
)
from sqlalchemy.engine import Connection

from inferplex.store import tables as t
from inferplex.store.backend import Database, unreachable
from inferplex.store.leasing import claim_due
from inferplex.store.ledger import Ledger, released

log = logging.getLogger("inferplex.store")

metadata = MetaData()

replicas = Table(
    "replicas",
    metadata,
    Column("id", String(40), primary_key=True),  # also the note of each of its reservations
    Column("started_at", Float, nullable=False),
    Column("alive_until", Float, nullable=False),  # renewed every third of the lease while it runs
    Column("from_id", BigInteger, nullable=False),  # every reservation it still holds has a ledger id above
    Column("claimed_by", String(40)),  # the survivor releasing its reservations (store/leasing.py)
    Column("claimed_until", Float),
)

# Tables whose rows keep a request id whose reservation outlives the replica that made it.
DURABLE = (table("media_jobs", column("request_id")), table("batch_lines", column("request_id")))

_WINDOW = 5000  # ledger ids read per look, as the orphan sweeper does


def _new_id() -> str:
    return "replica_" + secrets.token_hex(8)


def _top(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(t.ledger.c.id), 0))).scalar_one())


class Liveness:
    """This replica's row in `replicas`, and the survivors' side: releasing what a lost replica held."""

    def __init__(self, db: Database, ledger: Ledger, lease_s: float) -> None:
        self.db = db
        self.ledger = ledger
        self.lease_s = lease_s
        self.every_s = lease_s / 3
        self.id = ledger.holding.holder = _new_id()
        # (time read, highest ledger id then): the newest read made before the oldest open reservation bounds
        # where a survivor must start reading; (0, 0) until a read precedes every reservation still open.
        self._marks: deque[tuple[float, int]] = deque([(0.0, 0)])
        self._registered = False

    async def renew(self) -> None:
        """Register, or renew this replica's lease and where its reservations start in the ledger."""
        top = await self.db.read(_top)
        now = time.time()  # after the read: a reservation made after `now` has a ledger id above `top`
        self._marks.append((now, top))
        oldest = self.ledger.holding.oldest()
        while len(self._marks) > 1 and (oldest is None or self._marks[1][0] < oldest):
            self._marks.popleft()
        from_id = self._marks[0][1]
        alive_until = now + self.lease_s
        values = {"alive_until": alive_until, "from_id": from_id}
        c = replicas.c

        def run(conn: Connection) -> bool:
            """Renew a lease that still runs; if it lapsed (a survivor may be releasing what this replica held),
            register under a new id instead: what was reserved under the old one is settled through the spool
            from now on (store/holding.py), and the old row is left to the survivors."""
            renewed = update(replicas).where(c.id == self.id, c.alive_until >= now).values(values)
            if conn.execute(renewed).rowcount:
                return False
            if self._registered:
                self.id = _new_id()
            conn.execute(insert(replicas).values(id=self.id, started_at=now, **values))
            return True

        holding = self.ledger.holding
        previous = self.id
        if await self.db.write(run) and self._registered:
            log.warning("replica %s could not renew its lease in time: what it held may be released by the others "
                        "and is settled through the spool; it goes on as %s", previous, self.id)  # fmt: skip
        holding.holder = self.id
        holding.lease_until = alive_until - self.lease_s / 3
        self._registered = True

    async def take_over(self) -> int:
        """Release the reservations of every replica whose lease lapsed; how many were released."""
        now = time.time()
        rows = await claim_due(self.db, replicas, replicas.c.alive_until, self.id, now, self.lease_s, 10)
        total = 0
        for row in rows:
            if row.id != self.id:  # its own lease lapsed only if it could not renew: it is not lost
                total += await self._release(row.id, int(row.from_id))
        return total

    async def _release(self, lost: str, from_id: int) -> int:
        led = t.ledger.c
        after, count = from_id, 0
        while True:

            def look(conn: Connection, after: int = after) -> tuple[list[Any], int, bool]:
                still = conn.execute(select(replicas.c.alive_until).where(replicas.c.id == lost)).scalar()
                if still is None or still >= time.time():
                    return [], after, False  # it renewed after all (or another took it): not lost
                top = _top(conn)
                held = [~exists().where(d.c.request_id == led.request_id) for d in DURABLE]
                query = select(led.account_id, led.amount_micros, led.request_id, led.key_id).where(
                    led.id > after,
                    led.id <= after + _WINDOW,
                    led.kind == "reserve",
                    led.note == lost,
                    led.request_id.is_not(None),
                    ~_settled(),
                    *held,
                )
                return list(conn.execute(query).all()), after + _WINDOW, after + _WINDOW < top

            rows, after, more = await self.db.read(look)
            note = f"released: replica {lost} was lost"
            if rows:
                await self.ledger.replay([released(r, note) for r in rows])
                count += len(rows)
            if not more:
                break
        await self.db.write(lambda conn: conn.execute(_gone(lost, self.id)))
        if count:
            log.warning("released %d reservations of lost replica %s", count, lost)
        return count

    async def run(self) -> None:
        """Renew, then release what lost replicas held, every third of the lease, until cancelled."""
        while True:
            for what, step in (("renewing the lease", self.renew), ("releasing for lost replicas", self.take_over)):
                try:
                    await step()
                except Exception as exc:
                    if unreachable(exc) is None:
                        log.exception("replica liveness: %s failed", what)
                    else:
                        log.debug("replica liveness: the database is unreachable (%s)", type(exc).__name__)
            await asyncio.sleep(self.every_s)

    async def aclose(self, settled: bool) -> None:
        """Leave the fleet: delete this replica's row, after its last settlements were written (`settled`).
        With settlements left in the spool, the row goes too: its reservations then wait for the spool's
        next writer (or the orphan sweeper), which charges them right, instead of being released now."""
        if not self._registered:
            return
        with contextlib.suppress(Exception):
            await self.db.write(lambda conn: conn.execute(delete(replicas).where(replicas.c.id == self.id)))
        if not settled:
            log.warning("replica %s stopped with settlements in its spool: they are written at the next start",
                        self.id)  # fmt: skip


def _settled() -> Any:
    led, other = t.ledger.c, t.ledger.alias("settled")
    return exists().where(
        and_(other.c.request_id == led.request_id, other.c.account_id == led.account_id, other.c.kind == "settle")
    )


def _gone(lost: str, by: str) -> Any:
    """Delete a lost replica's row, unless it renewed meanwhile."""
    c = replicas.c
    return delete(replicas).where(c.id == lost, c.claimed_by == by, c.alive_until < time.time())
