"""Inferada's rate-limit rules (issue 21): `limit_rules` on keys and accounts, `user_limit_rules` on keys.

Each is a JSON list of `{metric, period, max, per_request}`; an empty list (the default, so existing keys and
accounts keep working unchanged) means no rule beyond `rpm`/`tpm`. A key's record is cached with its
account's limits (store/key_cache.py), so a change of an account's rules must signal a key change as a change
of its `rpm` does: a trigger of its own (migration 0003's names only the columns it knew), added and dropped
here alone so no other migration's trigger is touched. Plain ALTER TABLE, not a batch: SQLite's batch mode
rebuilds the table and would lose the triggers of migration 0003.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"

_COLUMNS = (("api_keys", "limit_rules"), ("api_keys", "user_limit_rules"), ("accounts", "limit_rules"))
_SQLITE_TRIGGER = (
    "CREATE TRIGGER inferplex_account_rules_updated AFTER UPDATE OF limit_rules ON accounts "
    "BEGIN UPDATE key_changes SET generation = generation + 1; END"
)
_PG_TRIGGER = (
    "CREATE TRIGGER inferplex_account_rules_changed AFTER UPDATE OF limit_rules ON accounts "
    "FOR EACH STATEMENT EXECUTE FUNCTION inferplex_keys_changed()"
)


def upgrade() -> None:
    for table, column in _COLUMNS:
        op.add_column(table, sa.Column(column, sa.JSON, nullable=False, server_default="[]"))
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute(_SQLITE_TRIGGER if sqlite else _PG_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS inferplex_account_rules_updated")
    else:
        op.execute("DROP TRIGGER IF EXISTS inferplex_account_rules_changed ON accounts")
    for table, column in reversed(_COLUMNS):
        op.drop_column(table, column)
