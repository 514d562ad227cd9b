"""Accounts and their credit ledger: every change to a balance is one ledger row in the same transaction.

A reservation is one conditional statement, `UPDATE accounts SET balance = balance - :a WHERE id = :id AND
balance >= :a RETURNING balance`: on PostgreSQL row locking makes it atomic under any concurrency; on SQLite
the database serializes writers (see store/engine.py). So a balance never goes below what was reserved, and
`balance == sum(ledger.amount)` holds after every transaction.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, insert, select, text, update
from sqlalchemy.engine import Connection

from inferplex.store import tables as t
from inferplex.store.driver import row_of
from inferplex.store.engine import Database


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    name: str
    balance_micros: int
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    created_at: float

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "account",
            "name": self.name,
            "balance_micros": self.balance_micros,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "max_concurrent": self.max_concurrent,
            "created_at": self.created_at,
        }


def _account(row: Any) -> Account:
    m = row._mapping
    return Account(m["id"], m["name"], m["balance_micros"], m["rpm"], m["tpm"], m["max_concurrent"], m["created_at"])


_PG_MOVE = text(
    """
    WITH moved AS (
        UPDATE accounts SET balance_micros = balance_micros + :amount
        WHERE id = :id AND (NOT :conditional OR balance_micros + :amount >= 0)
        RETURNING balance_micros
    ), entry AS (
        INSERT INTO ledger (account_id, kind, amount_micros, request_id, key_id, note, created_at)
        SELECT :id, :kind, :amount, :rid, :kid, :note, :ts FROM moved
    )
    SELECT balance_micros FROM moved
    """
)


# Built once at import (statement construction is most of the CPU of a reservation on SQLite), and run on the
# driver (store/driver.py).
_ENTRY_COLUMNS = ("account_id", "kind", "amount_micros", "request_id", "key_id", "note", "created_at")
_TAKE = (
    update(t.accounts)
    .where(t.accounts.c.id == bindparam("account"), t.accounts.c.balance_micros >= bindparam("amount"))
    .values(balance_micros=t.accounts.c.balance_micros - bindparam("amount"))
    .returning(t.accounts.c.balance_micros)
)
_ADD = (
    update(t.accounts)
    .where(t.accounts.c.id == bindparam("account"))
    .values(balance_micros=t.accounts.c.balance_micros + bindparam("amount"))
    .returning(t.accounts.c.balance_micros)
)
_ENTRY = insert(t.ledger).values({c: bindparam(c) for c in _ENTRY_COLUMNS})


class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._pg_move_sql = None if db.is_sqlite else db.driver_statement(_PG_MOVE)
        self._take, self._add, self._entry_sql = (db.driver_statement(s) for s in (_TAKE, _ADD, _ENTRY))

    def _entry(
        self,
        conn: Connection,
        account_id: str,
        kind: str,
        amount: int,
        request_id: str | None = None,
        key_id: str | None = None,
        note: str | None = None,
    ) -> None:
        values = (account_id, kind, amount, request_id, key_id, note, time.time())
        row_of(conn, self._entry_sql, dict(zip(_ENTRY_COLUMNS, values, strict=True)))

    async def create_account(
        self, name: str, *, rpm: int | None = None, tpm: int | None = None, max_concurrent: int | None = None
    ) -> Account:
        values = {
            "id": "acct_" + secrets.token_hex(8),
            "name": name,
            "balance_micros": 0,
            "rpm": rpm,
            "tpm": tpm,
            "max_concurrent": max_concurrent,
            "created_at": time.time(),
        }
        await self.db.write(lambda conn: conn.execute(insert(t.accounts).values(values)))
        return Account(**values)  # type: ignore[arg-type]

    async def update_account(self, account_id: str, changes: dict[str, Any]) -> Account | None:
        values = {k: v for k, v in changes.items() if k in ("name", "rpm", "tpm", "max_concurrent")}
        if values:
            statement = update(t.accounts).where(t.accounts.c.id == account_id).values(values)
            await self.db.write(lambda conn: conn.execute(statement))
        return await self.account(account_id)

    async def account(self, account_id: str) -> Account | None:
        query = select(t.accounts).where(t.accounts.c.id == account_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _account(row)

    async def accounts(self) -> list[Account]:
        query = select(t.accounts).order_by(t.accounts.c.created_at)
        return [_account(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def reserve(self, account_id: str, amount: int, *, request_id: str, key_id: str | None) -> int | None:
        """Take `amount` from the balance if it covers it: the new balance, or None (nothing changed)."""
        if not self.db.is_sqlite:
            return await self._pg_move(account_id, "reserve", -amount, request_id, key_id, None, conditional=True)

        def run(conn: Connection) -> int | None:
            row = row_of(conn, self._take, {"account": account_id, "amount": amount})
            if row is None:
                return None
            self._entry(conn, account_id, "reserve", -amount, request_id, key_id)
            return int(row["balance_micros"])

        return await self.db.write(run)

    async def settle(self, account_id: str, reserved: int, actual: int, *, request_id: str, key_id: str | None) -> int:
        """Return the unused part of a reservation (or take the overrun): one `settle` row of reserved-actual."""
        return await self._change(account_id, "settle", reserved - actual, request_id, key_id, None)

    async def credit(self, account_id: str, amount: int, *, kind: str = "topup", note: str | None = None) -> int:
        """A top-up (or refund, kind='refund'); a negative amount is an adjustment downwards."""
        return await self._change(account_id, kind, amount, None, None, note)

    async def _change(
        self, account_id: str, kind: str, amount: int, request_id: str | None, key_id: str | None, note: str | None
    ) -> int:
        if not self.db.is_sqlite:
            balance = await self._pg_move(account_id, kind, amount, request_id, key_id, note, conditional=False)
            if balance is None:
                raise KeyError(account_id)
            return balance

        def run(conn: Connection) -> int:
            row = row_of(conn, self._add, {"account": account_id, "amount": amount})
            if row is None:
                raise KeyError(account_id)
            self._entry(conn, account_id, kind, amount, request_id, key_id, note)
            return int(row["balance_micros"])

        return await self.db.write(run)

    async def _pg_move(
        self,
        account_id: str,
        kind: str,
        amount: int,
        request_id: str | None,
        key_id: str | None,
        note: str | None,
        *,
        conditional: bool,
    ) -> int | None:
        """Balance change and ledger row in ONE statement (data-modifying CTEs): atomic, one round trip."""
        params = {
            "id": account_id,
            "kind": kind,
            "amount": amount,
            "rid": request_id,
            "kid": key_id,
            "note": note,
            "ts": time.time(),
            "conditional": conditional,
        }
        assert self._pg_move_sql is not None
        row = await self.db.fetchrow(self._pg_move_sql, params)
        return None if row is None else int(row["balance_micros"])

    async def entries(self, account_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        query = select(t.ledger).where(t.ledger.c.account_id == account_id).order_by(t.ledger.c.id.desc()).limit(limit)
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [{str(k): v for k, v in r._mapping.items()} for r in rows]

    async def ledger_sum(self, account_id: str) -> int:
        query = select(func.coalesce(func.sum(t.ledger.c.amount_micros), 0)).where(t.ledger.c.account_id == account_id)
        return int(await self.db.read(lambda conn: conn.execute(query).scalar_one()))
