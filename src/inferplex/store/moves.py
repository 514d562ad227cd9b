"""A change to a balance (`Move`), and the ledger's rule for applying a batch of them (`apply_rule`).

The rule: a batch is one transaction; its moves are applied one by one, as if each were alone, in
`batch_order` (by account, settlements and top-ups before reservations, then in arrival order); a
conditional move (a reservation) is applied only if the balance covers it, and only if it keeps its
account's and its key's month within their monthly caps (below), the others always; a move on an account
that does not exist is not applied; each applied move writes one ledger row with the same amount, so
`balance == sum(ledger.amount)` after every transaction. The result is, for each move in arrival order, the
balance just after it, a `CapReached` for a reservation a cap refused, or None if it was not applied.

Monthly caps (migration 0008). Each account and each key has a month's spend (`spent`, the month's settled
costs, UTC calendar month `YYYYMM`), what is reserved by its requests in flight (`reserved`), and an optional
cap. A move says what it adds to each (`hold`: a reservation's worst case, or minus that when settled or
released; `spend`: a settlement's real cost). A reservation is refused by a cap when spent + reserved + its
hold would pass it: the account's cap is checked first, then the key's. A spend whose month is older than
the batch's is 0 (the month rolled over at 00:00 UTC on the 1st), and `reserved` carries over: a request
reserved in one month and settled in the next counts in the next. `reserved` never goes below 0 (a
reservation made before caps existed has nothing to give back). Checking here, in the same step as the
balance, is what makes a cap exact under concurrency and across replicas: no read-then-write in Python.

Each engine implements it where it is cheapest (docs/architecture.md, "Choices"): SQLite runs `apply_rule`
on its writer thread (`store/sqlite.py`), PostgreSQL the PL/pgSQL function of migration 0008
(`store/postgres.py`), one round trip per batch. `tests/accounts/test_store_contract.py` and
`tests/accounts/test_spend_caps.py` hold both to one table of batches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

# The ledger row's columns a move fills, in the order both engines write them.
ENTRY_COLUMNS = ("account_id", "kind", "amount_micros", "request_id", "key_id", "note", "created_at")


@dataclass(frozen=True, slots=True)
class Move:
    """One change to a balance and its ledger row. A conditional move (a reservation) is applied only if
    the balance covers it and no monthly cap refuses it; the others (settlements, top-ups) always are."""

    account_id: str
    kind: str
    amount: int  # signed: what the move adds to the balance
    conditional: bool = False
    request_id: str | None = None
    key_id: str | None = None
    note: str | None = None
    hold: int = 0  # what it adds to the month's reserved amount (a reservation: its worst case)
    spend: int = 0  # what it adds to the month's spend (a settlement: the request's real cost)


@dataclass(frozen=True, slots=True)
class CapReached:
    """A reservation a monthly cap refused: whose cap (`account` or `key`), and the month's figures."""

    owner: str
    cap: int
    spent: int
    reserved: int


Result = int | CapReached | None


@dataclass(slots=True)
class Spend:
    """An account's or a key's month as the rule keeps it while it applies a batch."""

    cap: int | None
    month: int
    spent: int
    reserved: int
    dirty: bool = False

    def rolled(self, month: int) -> Spend:
        """This spend as of `month`: an older month's spend is 0 now (a newer one, from a replica whose clock
        runs ahead, is kept, so a month never goes back)."""
        if self.month < month:
            self.month, self.spent = month, 0
        return self

    def refuses(self, hold: int) -> bool:
        return self.cap is not None and self.spent + self.reserved + hold > self.cap

    def add(self, hold: int, spend: int) -> None:
        self.reserved = max(0, self.reserved + hold)
        self.spent += spend
        self.dirty = True


def month_of(now: float) -> int:
    """The calendar month (UTC) of UNIX time `now`, as YYYYMM."""
    t = time.gmtime(now)
    return t.tm_year * 100 + t.tm_mon


def batch_order(moves: Sequence[Move]) -> list[int]:
    """The order both engines apply a batch in: by account, settlements before reservations, then arrival."""
    return sorted(range(len(moves)), key=lambda i: (moves[i].account_id, moves[i].conditional, i))


def apply_rule(
    moves: Sequence[Move], balances: dict[str, int], accounts: dict[str, Spend], keys: dict[str, Spend]
) -> tuple[list[Result], list[int]]:
    """The rule on in-memory state, changed in place: `balances` and `accounts` (each existing account's
    balance and month, rolled to the batch's month) and `keys` (the month of every key the batch's moves
    name). Returns each move's result and the indexes of the applied moves, in the order applied."""
    out: list[Result] = [None] * len(moves)
    applied: list[int] = []
    for i in batch_order(moves):
        m = moves[i]
        balance = balances.get(m.account_id)
        if balance is None:
            continue
        account = accounts[m.account_id]
        key = keys.get(m.key_id) if m.key_id is not None else None
        if m.conditional:
            if balance < -m.amount:
                continue
            capped = (
                ("account", account)
                if account.refuses(m.hold)
                else ("key", key)
                if key and key.refuses(m.hold)
                else None
            )
            if capped is not None:
                owner, spend = capped
                assert spend.cap is not None
                out[i] = CapReached(owner, spend.cap, spend.spent, spend.reserved)
                continue
        out[i] = balances[m.account_id] = balance + m.amount
        if m.hold or m.spend:
            account.add(m.hold, m.spend)
            if key is not None:
                key.add(m.hold, m.spend)
        applied.append(i)
    return out, applied
