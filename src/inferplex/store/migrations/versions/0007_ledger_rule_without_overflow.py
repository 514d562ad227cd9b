"""The ledger's batch function compares a reservation with the balance without adding them (PostgreSQL only).

0004's rule `b + amount >= 0` overflowed BIGINT when an admin had adjusted a balance near its lowest value
(-(2^63-1), which the admin API allows): the reservation's batch failed with "bigint out of range", a 500
for that caller and a failed batch for every other account's moves in it. `b >= -amount` is the same rule
for every balance that does not overflow (a reservation's amount is never -2^63: the guard's worst case is
far below it) and refuses the reservation where the sum would have overflowed, as SQLite's Python rule
(store/moves.py), whose integers do not overflow, already did.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import context, op

revision = "0007"
down_revision = "0006"

_OVERFLOWING = "b + p_amount[k] >= 0"


def _function(revision_id: str) -> str:
    script = context.script.get_revision(revision_id)
    assert script is not None
    text: str = script.module._FUNCTION
    assert _OVERFLOWING in text
    return text


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute(_function("0004").replace(_OVERFLOWING, "b >= -p_amount[k]"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute(_function("0004"))
