"""Accounts and their credit ledger: every change to a balance is one ledger row in the same transaction.

Reservations and settlements made while another batch is in flight go together in the next (batching.py),
one transaction per batch, applied by the database's `apply_moves` under the rule of store/moves.py: each
move as if alone, in the same order on both engines (by account, settlements first), and each account's
balance read once, its moves applied to it, and written back once. On PostgreSQL the batch is one call to
the function of migration 0008 (0004's, with the monthly caps), which locks each account row (`SELECT ...
FOR UPDATE`, accounts in id order, so concurrent batches cannot deadlock) for that; on SQLite the writer
holds the database's write lock for the whole batch (store/sqlite.py). Either way a reservation is applied
only if the balance covers it and the account's and the key's monthly caps allow it (each month's spend and
reserved amount kept in the same step), a balance never goes below what was reserved, and
`balance == sum(ledger.amount)` holds after every transaction.

A batch that fails because the database cannot be reached (or stays silent past `storage.timeout_s`) may or
may not have committed: no client can tell. Its settlements are kept in the spool (store/spool.py), and its
reservations are kept as releases, to be replayed once the database is back (`replay`, store/recovery.py):
a replayed settlement is applied only if the request has no settlement yet, and a release only if its
reservation was applied and not settled. So every reservation is settled or released exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import and_, exists, func, insert, select, update
from sqlalchemy.engine import Connection

from inferplex.batching import Batcher
from inferplex.store import tables as t
from inferplex.store.backend import UNREACHABLE, Database, StoreUnavailable
from inferplex.store.holding import Holding
from inferplex.store.moves import ENTRY_COLUMNS, Move, Result, Spend, month_of
from inferplex.store.spool import MOVE, Spool

log = logging.getLogger("inferplex.accounts")


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    name: str
    balance_micros: int
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    created_at: float
    limit_rules: list[Any] = field(default_factory=list)
    monthly_cap_micros: int | None = None
    month_spent_micros: int = 0  # this calendar month's (UTC) settled costs
    month_reserved_micros: int = 0  # held by requests in flight

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "account",
            "name": self.name,
            "balance_micros": self.balance_micros,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "max_concurrent": self.max_concurrent,
            "limit_rules": self.limit_rules,
            "created_at": self.created_at,
            "monthly_cap_micros": self.monthly_cap_micros,
            "month_spent_micros": self.month_spent_micros,
            "month_reserved_micros": self.month_reserved_micros,
        }


def _account(row: Any) -> Account:
    m = row._mapping
    limits = (m["rpm"], m["tpm"], m["max_concurrent"])
    spent = _this_month(m["spend_month"], m["month_spent_micros"])
    month = (m["monthly_cap_micros"], spent, m["month_reserved_micros"])
    return Account(m["id"], m["name"], m["balance_micros"], *limits, m["created_at"], m["limit_rules"], *month)


def _this_month(month: int | None, spent: int | None) -> int:
    """A stored month's spend as of now: 0 if it is an older month's (the next move resets it: moves.Spend)."""
    return 0 if month is None or spent is None or month < month_of(time.time()) else int(spent)


@dataclass(frozen=True, slots=True)
class MonthSpend:
    """A key's month, as the admin API shows it beside its cap."""

    month_spent_micros: int = 0
    month_reserved_micros: int = 0


class Spooled(StoreUnavailable):
    """The batch could not be written now; its settlements (and releases of its reservations) are in the
    spool, to be written exactly once when the database is back."""


def _replayed(
    account_id: str,
    amount: int,
    request_id: str,
    key_id: str | None,
    note: str | None,
    *,
    if_reserved: bool,
    hold: int = 0,
    spend: int = 0,
) -> dict[str, Any]:
    """A move for `Ledger.replay`: a settlement (what the request's reservation gives back), applied once per
    request; `if_reserved`: a release, applied only if the request's reservation was. `hold` and `spend`:
    what it adds to the month's reserved amount and to its spend (moves.Move)."""
    return {"account_id": account_id, "amount": amount, "request_id": request_id, "key_id": key_id,
            "note": note, "if_reserved": if_reserved, "hold": hold, "spend": spend}  # fmt: skip


def released(row: Any, note: str) -> dict[str, Any]:
    """A held reservation's release for `Ledger.replay` (a ledger row's account_id, amount_micros,
    request_id, key_id), applied only if it was not settled meanwhile."""
    taken = int(row.amount_micros)  # negative: what the reservation took
    return _replayed(row.account_id, -taken, row.request_id, row.key_id, note, if_reserved=True, hold=taken)


def _spooled(moves: Sequence[Move]) -> list[dict[str, Any]]:
    """What a failed batch leaves to replay: each settlement as it was, each reservation as its release
    (applied only if the reservation itself was). Top-ups are not batched (`credit` answers its caller)."""
    out = []
    for m in moves:
        if m.request_id is None:
            continue
        if m.conditional:
            note = "released: its batch failed"
            release = _replayed(m.account_id, -m.amount, m.request_id, m.key_id, note, if_reserved=True, hold=-m.hold)
            out.append(release)
        else:
            kept = (m.account_id, m.amount, m.request_id, m.key_id, m.note)
            out.append(_replayed(*kept, if_reserved=False, hold=m.hold, spend=m.spend))
    return out


def _settlement(account_id: str, reserved: int, actual: int, request_id: str | None, key_id: str | None) -> Move:
    """A settlement: what a reservation gives back (negative: takes beyond it); applied whatever the balance.
    The month's reserved amount loses the reservation, and its spend gains the real cost."""
    return Move(account_id, "settle", reserved - actual, False, request_id, key_id, hold=-reserved, spend=actual)


def _refunded(request_id: str | None, balance: Result, error: BaseException | None) -> None:
    if isinstance(error, Spooled):
        log.warning("the reservation of cancelled request %s is kept to give back later: %s", request_id, error)
    elif error is not None and not isinstance(error, asyncio.CancelledError):
        log.error("could not give back the reservation of cancelled request %s", request_id, exc_info=error)


def _has(account_id: Any, request_id: Any, kind: str) -> Any:
    """Whether the account's ledger holds a row of `kind` for `request_id` (ix_ledger_request_id, migration
    0006)."""
    other = t.ledger.alias("other")
    return exists().where(
        and_(other.c.request_id == request_id, other.c.account_id == account_id, other.c.kind == kind)
    )


def _count_month(conn: Connection, account: str, key: str | None, hold: int, spend: int, now: float) -> None:
    """A replayed move's part of the month (moves.Spend): the account's, and its key's, under the account's
    row lock, which the replay holds. Its month is the replay's (a settlement spooled across the 1st counts
    in the new month)."""
    if not hold and not spend:
        return
    month = month_of(now)
    acc, ks = t.accounts.c, t.key_spend.c
    row = conn.execute(
        select(acc.spend_month, acc.month_spent_micros, acc.month_reserved_micros).where(acc.id == account)
    ).one()
    mine = Spend(None, row.spend_month, row.month_spent_micros, row.month_reserved_micros).rolled(month)
    mine.add(hold, spend)
    months = {"spend_month": mine.month, "month_spent_micros": mine.spent, "month_reserved_micros": mine.reserved}
    conn.execute(update(t.accounts).where(acc.id == account).values(months))
    if key is None:
        return
    found = conn.execute(
        select(ks.spend_month, ks.month_spent_micros, ks.month_reserved_micros).where(ks.key_id == key)
    ).first()
    theirs = Spend(None, month, 0, 0) if found is None else Spend(None, *found).rolled(month)
    theirs.add(hold, spend)
    months = {"spend_month": theirs.month, "month_spent_micros": theirs.spent, "month_reserved_micros": theirs.reserved}
    if found is None:
        conn.execute(insert(t.key_spend).values(key_id=key, **months))
    else:
        conn.execute(update(t.key_spend).where(ks.key_id == key).values(months))


class Ledger:
    def __init__(self, db: Database, spool: Spool | None = None) -> None:
        self.db = db
        self.spool = spool
        self.holding = Holding()  # what this replica holds, for its liveness lease (store/liveness.py)
        # Every request's reservation and settlement go through here: concurrent ones share one round trip.
        self._batch: Batcher[Move, Result] = Batcher(self._batched, orphaned=self._orphaned)

    async def create_account(
        self,
        name: str,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrent: int | None = None,
        limit_rules: list[Any] | None = None,
        monthly_cap_micros: int | None = None,
    ) -> Account:
        values = {
            "id": "acct_" + secrets.token_hex(8),
            "name": name,
            "balance_micros": 0,
            "rpm": rpm,
            "tpm": tpm,
            "max_concurrent": max_concurrent,
            "created_at": time.time(),
            "limit_rules": limit_rules or [],
            "monthly_cap_micros": monthly_cap_micros,
        }
        await self.db.write(lambda conn: conn.execute(insert(t.accounts).values(values)))
        return Account(**values)  # type: ignore[arg-type]

    async def update_account(self, account_id: str, changes: dict[str, Any]) -> Account | None:
        editable = ("name", "rpm", "tpm", "max_concurrent", "limit_rules", "monthly_cap_micros")
        values = {k: v for k, v in changes.items() if k in editable}
        if values:
            statement = update(t.accounts).where(t.accounts.c.id == account_id).values(values)
            await self.db.write(lambda conn: conn.execute(statement))
        return await self.account(account_id)

    async def account(self, account_id: str) -> Account | None:
        await self._batch.drained()  # this replica's queued settlements first: a reader sees its own writes
        query = select(t.accounts).where(t.accounts.c.id == account_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _account(row)

    async def accounts(self) -> list[Account]:
        await self._batch.drained()
        query = select(t.accounts).order_by(t.accounts.c.created_at)
        return [_account(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def reserve(self, account_id: str, amount: int, *, request_id: str, key_id: str | None) -> Result:
        """Take `amount` from the balance if it covers it and the account's and the key's monthly caps allow
        it: the new balance, the cap that refused it (`CapReached`), or None (nothing changed either way)."""
        self.holding.reserving(request_id)
        move = Move(account_id, "reserve", -amount, True, request_id, key_id, self.holding.holder, hold=amount)
        result: Result = None
        try:
            result = await self._batch.enqueue(move)
            return result
        finally:
            if not isinstance(result, int):  # refused, failed (spooled as a release) or cancelled (_orphaned)
                self.holding.refused(request_id)

    async def settle(self, account_id: str, reserved: int, actual: int, *, request_id: str, key_id: str | None) -> int:
        """Return the unused part of a reservation (or take the overrun): one `settle` row of reserved-actual.

        Kept (`Batcher.enqueue(keep=True)`): a caller cancelled while it waits still has the move booked.
        The batcher skips items whose future is cancelled before their batch leaves, which is right for a
        reservation nobody waits for, and would lose a settlement."""
        move = _settlement(account_id, reserved, actual, request_id, key_id)
        if not self._settles_directly(request_id):
            await self.replay(_spooled([move]))
            account = await self.account(account_id)
            if account is None:
                raise KeyError(account_id)
            return account.balance_micros
        balance = await self._batch.enqueue(move, keep=True)
        if not isinstance(balance, int):
            raise KeyError(account_id)
        return balance

    def settle_later(
        self,
        account_id: str,
        reserved: int,
        actual: int,
        *,
        request_id: str,
        key_id: str | None,
        then: Callable[[Result, BaseException | None], None],
    ) -> None:
        """`settle`, queued before this returns, for a caller that does not wait: `then(balance, error)` once
        it is applied (balance None: no such account)."""
        move = _settlement(account_id, reserved, actual, request_id, key_id)
        if self._settles_directly(request_id):
            self._batch.post(move, then)
        else:
            self._spool_settlement(move, then)

    def _settles_directly(self, request_id: str) -> bool:
        """Whether the batch may settle this reservation: yes, unless this replica's liveness lease may have
        lapsed since it was made (store/holding.py); then only the spool's replay, which skips a reservation
        a survivor released meanwhile."""
        return self.holding.settles_directly(request_id) or self.spool is None

    def _spool_settlement(self, move: Move, then: Callable[[Result, BaseException | None], None]) -> None:
        assert self.spool is not None
        kept = self.spool.put(MOVE, _spooled([move]))
        then(None, Spooled(f"this replica's liveness lease may have lapsed; {kept} settlement kept in the spool"))

    async def credit(self, account_id: str, amount: int, *, kind: str = "topup", note: str | None = None) -> int:
        """A top-up (or refund, kind='refund'); a negative amount is an adjustment downwards."""
        (balance,) = await self.move_many([Move(account_id, kind, amount, note=note)])
        if not isinstance(balance, int):
            raise KeyError(account_id)
        return balance

    async def move_many(self, moves: list[Move]) -> list[Result]:
        """Apply `moves` in one transaction (one round trip on PostgreSQL): for each, the balance after it, a
        `CapReached` (a reservation a monthly cap refused), or None if it was not applied (a reservation the
        balance could not cover, or no such account). Raises
        StoreUnavailable if the database cannot be reached. The transaction then did not commit (a lost
        connection aborts it), except in the one case no client can tell apart: a connection lost after the
        commit and before its reply. A reservation then stays held, and the ledger still sums to the balance."""
        try:
            return await self._apply(moves)
        except UNREACHABLE as exc:
            raise StoreUnavailable(f"the credit ledger cannot be reached ({type(exc).__name__}: {exc})") from exc

    async def _batched(self, moves: list[Move]) -> list[Result]:
        """`move_many` for the batcher: a batch the database did not take is spooled, then reported."""
        try:
            return await self.move_many(moves)
        except StoreUnavailable as exc:
            if self.spool is None:
                raise
            kept = self.spool.put(MOVE, _spooled(moves))
            raise Spooled(f"{exc}; {kept} settlements and releases kept in the spool") from exc

    async def replay(self, items: Sequence[dict[str, Any]]) -> None:
        """Write spooled settlements and releases, each at most once, in one transaction: one whose request
        already has a settlement (its batch committed after all, or the sweeper came first) is skipped, and
        a release whose reservation was never applied too. Each account's row is locked first (accounts in
        id order), which serialises this with every other move of the account. Raises if the database
        cannot be reached; then nothing was written, or everything was and the next replay skips it all."""
        now = time.time()
        acc = t.accounts.c

        def run(conn: Connection) -> None:
            for item in sorted(items, key=lambda i: str(i["account_id"])):
                account, request = item["account_id"], item["request_id"]
                locked = select(acc.balance_micros).where(acc.id == account).with_for_update()
                if conn.execute(locked).first() is None:
                    continue
                if conn.execute(select(_has(account, request, "settle"))).scalar():
                    continue
                if item["if_reserved"] and not conn.execute(select(_has(account, request, "reserve"))).scalar():
                    continue
                amount = int(item["amount"])
                add = update(t.accounts).where(acc.id == account).values(balance_micros=acc.balance_micros + amount)
                conn.execute(add)
                hold, spend = int(item.get("hold", 0)), int(item.get("spend", 0))  # 0: spooled before caps
                _count_month(conn, account, item.get("key_id"), hold, spend, now)
                values = (account, "settle", amount, request, item["key_id"], item["note"], now)
                conn.execute(insert(t.ledger).values(dict(zip(ENTRY_COLUMNS, values, strict=True))))

        await self.db.write(run)

    async def key_months(self, key_ids: Sequence[str]) -> dict[str, MonthSpend]:
        """The months of these keys as of now (after this replica's queued settlements); a key with none: 0."""
        await self._batch.drained()
        if not key_ids:
            return {}
        ks = t.key_spend.c
        query = select(ks.key_id, ks.spend_month, ks.month_spent_micros, ks.month_reserved_micros).where(
            ks.key_id.in_(list(key_ids))
        )
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return {r.key_id: MonthSpend(_this_month(r.spend_month, r.month_spent_micros), r.month_reserved_micros)
                for r in rows}  # fmt: skip

    async def orphans(self, after: int, before: float, window: int = 5000) -> tuple[list[dict[str, Any]], int]:
        """The sweeper's look at the next `window` ledger ids after `after` (from the first that exists):
        their reservations made before `before` (UNIX seconds) with no settlement, as releases for `replay`;
        and where the next look starts: past this window if every row in it is older than `before` and rows
        follow it, else `after` again. A window is a range of the primary key, so a look costs about
        `window` rows however long the ledger; a row older than `before` is committed, since `before` is far
        older than any transaction."""
        led = t.ledger.c

        def run(conn: Connection) -> tuple[int, Any, list[Any], int] | None:
            first = conn.execute(select(func.min(led.id)).where(led.id > after)).scalar()
            if first is None:
                return None
            in_window = and_(led.id >= first, led.id < first + window)
            unsettled = select(led.account_id, led.amount_micros, led.request_id, led.key_id).where(
                in_window,
                led.kind == "reserve",
                led.created_at < before,
                led.request_id.is_not(None),
                ~_has(led.account_id, led.request_id, "settle"),
            )
            youngest = conn.execute(select(func.max(led.created_at)).where(in_window)).scalar()
            rows = list(conn.execute(unsettled).all())
            return first, youngest, rows, int(conn.execute(select(func.max(led.id))).scalar_one())

        found = await self.db.read(run)
        if found is None:
            return [], after
        first, youngest, rows, newest = found
        releases = [released(r, "released: no settlement within the orphan bound") for r in rows]
        done = newest >= first + window and youngest < before
        return releases, first + window - 1 if done else after

    async def _apply(self, moves: list[Move]) -> list[Result]:
        return await self.db.apply_moves(moves, time.time())

    def _orphaned(self, move: Move, balance: Result) -> None:
        """A reservation whose caller was cancelled while it was in flight: give it back at once."""
        if move.conditional and isinstance(balance, int):
            refund = _settlement(move.account_id, -move.amount, 0, move.request_id, move.key_id)
            if self.holding.holds(move.note) or self.spool is None:
                self._batch.post(refund, partial(_refunded, move.request_id))
            else:
                self._spool_settlement(refund, partial(_refunded, move.request_id))

    async def aclose(self) -> None:
        await self._batch.aclose()  # the refunds above too: they are queued like any move

    async def entries(self, account_id: str, limit: int = 1000, before: int | None = None) -> list[dict[str, Any]]:
        """Newest first; `before` (an entry's id) pages back through a ledger longer than one answer."""
        await self._batch.drained()
        where = t.ledger.c.account_id == account_id
        if before is not None:
            where = where & (t.ledger.c.id < before)
        query = select(t.ledger).where(where).order_by(t.ledger.c.id.desc()).limit(limit)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [{str(k): v for k, v in r._mapping.items()} for r in rows]

    async def ledger_sum(self, account_id: str) -> int:
        await self._batch.drained()
        query = select(func.coalesce(func.sum(t.ledger.c.amount_micros), 0)).where(t.ledger.c.account_id == account_id)
        return int(await self.db.read(lambda conn: conn.execute(query).scalar_one()))
