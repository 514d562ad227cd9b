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

from sqlalchemy import func, insert, select, update

from inferplex.store import tables as t
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


class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_account(
        self, name: str, *, rpm: int | None = None, tpm: int | None = None, max_concurrent: int | None = None
    ) -> Account:
        account_id = "acct_" + secrets.token_hex(8)
        async with self.db.begin() as conn:
            await conn.execute(
                insert(t.accounts).values(
                    id=account_id,
                    name=name,
                    balance_micros=0,
                    rpm=rpm,
                    tpm=tpm,
                    max_concurrent=max_concurrent,
                    created_at=time.time(),
                )
            )
        found = await self.account(account_id)
        assert found is not None
        return found

    async def update_account(self, account_id: str, changes: dict[str, Any]) -> Account | None:
        values = {k: v for k, v in changes.items() if k in ("name", "rpm", "tpm", "max_concurrent")}
        if values:
            async with self.db.begin() as conn:
                await conn.execute(update(t.accounts).where(t.accounts.c.id == account_id).values(values))
        return await self.account(account_id)

    async def account(self, account_id: str) -> Account | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(t.accounts).where(t.accounts.c.id == account_id))).first()
        return None if row is None else _account(row)

    async def accounts(self) -> list[Account]:
        async with self.db.read() as conn:
            rows = (await conn.execute(select(t.accounts).order_by(t.accounts.c.created_at))).all()
        return [_account(r) for r in rows]

    async def reserve(self, account_id: str, amount: int, *, request_id: str, key_id: str | None) -> int | None:
        """Take `amount` from the balance if it covers it: the new balance, or None (nothing changed)."""
        async with self.db.begin() as conn:
            row = (
                await conn.execute(
                    update(t.accounts)
                    .where(t.accounts.c.id == account_id, t.accounts.c.balance_micros >= amount)
                    .values(balance_micros=t.accounts.c.balance_micros - amount)
                    .returning(t.accounts.c.balance_micros)
                )
            ).first()
            if row is None:
                return None
            await self._entry(conn, account_id, "reserve", -amount, request_id, key_id, None)
            return int(row[0])

    async def settle(self, account_id: str, reserved: int, actual: int, *, request_id: str, key_id: str | None) -> int:
        """Return the unused part of a reservation (or take the overrun): one `settle` row of reserved-actual."""
        return await self._change(account_id, "settle", reserved - actual, request_id, key_id, None)

    async def credit(self, account_id: str, amount: int, *, kind: str = "topup", note: str | None = None) -> int:
        """A top-up (or refund, kind='refund'); a negative amount is an adjustment downwards."""
        return await self._change(account_id, kind, amount, None, None, note)

    async def _change(
        self, account_id: str, kind: str, amount: int, request_id: str | None, key_id: str | None, note: str | None
    ) -> int:
        async with self.db.begin() as conn:
            row = (
                await conn.execute(
                    update(t.accounts)
                    .where(t.accounts.c.id == account_id)
                    .values(balance_micros=t.accounts.c.balance_micros + amount)
                    .returning(t.accounts.c.balance_micros)
                )
            ).first()
            if row is None:
                raise KeyError(account_id)
            await self._entry(conn, account_id, kind, amount, request_id, key_id, note)
            return int(row[0])

    @staticmethod
    async def _entry(
        conn: Any, account_id: str, kind: str, amount: int, request_id: str | None, key_id: str | None, note: str | None
    ) -> None:
        await conn.execute(
            insert(t.ledger).values(
                account_id=account_id,
                kind=kind,
                amount_micros=amount,
                request_id=request_id,
                key_id=key_id,
                note=note,
                created_at=time.time(),
            )
        )

    async def entries(self, account_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        query = select(t.ledger).where(t.ledger.c.account_id == account_id).order_by(t.ledger.c.id.desc()).limit(limit)
        async with self.db.read() as conn:
            return [{str(k): v for k, v in r._mapping.items()} for r in (await conn.execute(query)).all()]

    async def ledger_sum(self, account_id: str) -> int:
        query = select(func.coalesce(func.sum(t.ledger.c.amount_micros), 0)).where(t.ledger.c.account_id == account_id)
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())
