"""Limits as 64-bit integers: `rpm`, `tpm` and `max_concurrent` on keys and accounts.

They were 32-bit INTEGER columns, so an admin's `tpm: 10**12` (a plausible "no practical limit") failed
on PostgreSQL with a 500 and, from the CLI, a traceback. BIGINT holds every limit the admin API accepts
(admin/models.py validates against the same bound, so nothing out of range reaches the database).

SQLite stores every INTEGER in up to 8 bytes already: only its declared type would change, which is not
worth rebuilding the tables (and their triggers) for. On PostgreSQL the accounts trigger of migration 0003
names these columns (`AFTER UPDATE OF rpm, tpm, max_concurrent`), and a column used in a trigger
definition cannot change type, so the trigger is dropped and created again around the change.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

_COLUMNS = ("rpm", "tpm", "max_concurrent")
_TABLES = ("accounts", "api_keys")
_TRIGGER = (
    "CREATE TRIGGER inferplex_account_limits_changed AFTER UPDATE OF rpm, tpm, max_concurrent OR DELETE "
    "ON accounts FOR EACH STATEMENT EXECUTE FUNCTION inferplex_keys_changed()"
)


def _retype(new: type[sa.types.TypeEngine[int]], old: type[sa.types.TypeEngine[int]]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute("DROP TRIGGER IF EXISTS inferplex_account_limits_changed ON accounts")
    for table in _TABLES:
        for column in _COLUMNS:
            op.alter_column(table, column, type_=new(), existing_type=old(), existing_nullable=True)
    op.execute(_TRIGGER)


def upgrade() -> None:
    _retype(sa.BigInteger, sa.Integer)


def downgrade() -> None:
    # A value above 2**31 - 1 makes this fail rather than be truncated: lower it first.
    _retype(sa.Integer, sa.BigInteger)
