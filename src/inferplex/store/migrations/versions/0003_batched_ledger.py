"""The ledger's batch function, and change signals for keys and account limits (both engines).

`inferplex_ledger_batch` applies many balance moves (reservations, settlements) in one call: one round trip
for every request that moved credits while the previous call ran (store/ledger.py). Each move is the same
conditional UPDATE plus ledger INSERT as before, so a reservation is still refused exactly when the balance
cannot cover it, and `balance == sum(ledger)` holds after every call. Moves are applied account by account
in id order (so two replicas' batches lock accounts in the same order and cannot deadlock), unconditional
moves (settlements give credit back) before reservations.

The triggers send `NOTIFY inferplex_keys` when a key, or an account's limits, change or go, from any
writer: the admin API of any replica, the CLI, or SQL by hand. Each replica drops the key records it has
cached (store/key_cache.py). Balance updates do not fire them (`UPDATE OF` names only the limit columns).

SQLite has no functions and no NOTIFY: a ledger batch is one group-commit transaction, and the triggers
bump `key_changes.generation` instead, which a replica reads (a few microseconds, on the event loop's own
connection) before it uses a key record it kept.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"

_FUNCTION = """
CREATE OR REPLACE FUNCTION inferplex_ledger_batch(
    p_account text[], p_kind text[], p_amount bigint[], p_conditional boolean[],
    p_request text[], p_key text[], p_note text[], p_created double precision
) RETURNS TABLE (item integer, balance bigint) LANGUAGE plpgsql AS $$
DECLARE
    k integer;
    b bigint;
BEGIN
    FOR k IN
        SELECT o::integer FROM unnest(p_account) WITH ORDINALITY AS u(a, o)
        ORDER BY a, p_conditional[o], o
    LOOP
        UPDATE accounts SET balance_micros = balance_micros + p_amount[k]
        WHERE id = p_account[k] AND (NOT p_conditional[k] OR balance_micros + p_amount[k] >= 0)
        RETURNING balance_micros INTO b;
        IF FOUND THEN
            INSERT INTO ledger (account_id, kind, amount_micros, request_id, key_id, note, created_at)
            VALUES (p_account[k], p_kind[k], p_amount[k], p_request[k], p_key[k], p_note[k], p_created);
            item := k;
            balance := b;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$
"""

_NOTIFY = """
CREATE OR REPLACE FUNCTION inferplex_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inferplex_keys', TG_TABLE_NAME);
    RETURN NULL;
END $$
"""

_TRIGGERS = (
    "CREATE TRIGGER inferplex_api_keys_changed AFTER UPDATE OR DELETE ON api_keys "
    "FOR EACH STATEMENT EXECUTE FUNCTION inferplex_keys_changed()",
    "CREATE TRIGGER inferplex_account_limits_changed AFTER UPDATE OF rpm, tpm, max_concurrent OR DELETE ON accounts "
    "FOR EACH STATEMENT EXECUTE FUNCTION inferplex_keys_changed()",
)


_SQLITE = (
    "CREATE TABLE key_changes (id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL)",
    "INSERT INTO key_changes (id, generation) VALUES (1, 0)",
    "CREATE TRIGGER inferplex_api_keys_updated AFTER UPDATE ON api_keys "
    "BEGIN UPDATE key_changes SET generation = generation + 1; END",
    "CREATE TRIGGER inferplex_api_keys_deleted AFTER DELETE ON api_keys "
    "BEGIN UPDATE key_changes SET generation = generation + 1; END",
    "CREATE TRIGGER inferplex_account_limits_updated AFTER UPDATE OF rpm, tpm, max_concurrent ON accounts "
    "BEGIN UPDATE key_changes SET generation = generation + 1; END",
    "CREATE TRIGGER inferplex_accounts_deleted AFTER DELETE ON accounts "
    "BEGIN UPDATE key_changes SET generation = generation + 1; END",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _SQLITE:
            op.execute(statement)
        return
    op.execute(_FUNCTION)
    op.execute(_NOTIFY)
    for statement in _TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("api_keys_updated", "api_keys_deleted", "account_limits_updated", "accounts_deleted"):
            op.execute(f"DROP TRIGGER IF EXISTS inferplex_{name}")
        op.execute("DROP TABLE IF EXISTS key_changes")
        return
    op.execute("DROP TRIGGER IF EXISTS inferplex_account_limits_changed ON accounts")
    op.execute("DROP TRIGGER IF EXISTS inferplex_api_keys_changed ON api_keys")
    op.execute("DROP FUNCTION IF EXISTS inferplex_keys_changed()")
    op.execute(
        "DROP FUNCTION IF EXISTS inferplex_ledger_batch("
        "text[], text[], bigint[], boolean[], text[], text[], text[], double precision)"
    )
