"""A change to a balance (`Move`), and the ledger's rule for applying a batch of them.

The rule: a batch is one transaction; its moves are applied one by one, as if each were alone, in
`batch_order` (by account, settlements and top-ups before reservations, then in arrival order); a
conditional move (a reservation) is applied only if the balance covers it, the others always; a move on
an account that does not exist is not applied; each applied move writes one ledger row with the same
amount, so `balance == sum(ledger.amount)` after every transaction. The result is, for each move in
arrival order, the balance just after it, or None if it was not applied.

Each engine implements it where it is cheapest (docs/architecture.md, "Choices"): SQLite in Python on its
writer thread (`store/sqlite.py`), PostgreSQL in the PL/pgSQL function of migration 0004 (`store/postgres.py`),
one round trip per batch. `tests/accounts/test_store_ledger_rule.py` holds both to one table of batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The ledger row's columns a move fills, in the order both engines write them.
ENTRY_COLUMNS = ("account_id", "kind", "amount_micros", "request_id", "key_id", "note", "created_at")


@dataclass(frozen=True, slots=True)
class Move:
    """One change to a balance and its ledger row. A conditional move (a reservation) is applied only if
    the balance covers it; the others (settlements, top-ups) always are."""

    account_id: str
    kind: str
    amount: int  # signed: what the move adds to the balance
    conditional: bool = False
    request_id: str | None = None
    key_id: str | None = None
    note: str | None = None


def batch_order(moves: Sequence[Move]) -> list[int]:
    """The order both engines apply a batch in: by account, settlements before reservations, then arrival."""
    return sorted(range(len(moves)), key=lambda i: (moves[i].account_id, moves[i].conditional, i))
