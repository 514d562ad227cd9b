"""The ledger's batch function, applying each account's moves to one locked balance (PostgreSQL only).

0003's function ran one conditional UPDATE per move, so a batch of twenty moves on one account wrote twenty
versions of its row, and the database's CPU, which shares the machine with the gateway, grew with every
request (docs/benchmarks.md). This one locks each account once (`FOR UPDATE`, accounts in id order as
before, so batches from two replicas still cannot deadlock), applies its moves in memory in the same order
with the same rule (settlements first; a reservation only if the balance covers it), writes the balance
once, and inserts the ledger rows of the applied moves in one statement, in the order they were applied.
What each move returns, and `balance == sum(ledger)` after every call, are unchanged. SQLite's batch
already worked this way (now store/sqlite.py).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import context, op

revision = "0004"
down_revision = "0003"

_FUNCTION = """
CREATE OR REPLACE FUNCTION inferplex_ledger_batch(
    p_account text[], p_kind text[], p_amount bigint[], p_conditional boolean[],
    p_request text[], p_key text[], p_note text[], p_created double precision
) RETURNS TABLE (item integer, balance bigint) LANGUAGE plpgsql AS $$
DECLARE
    acct text;
    k integer;
    b bigint;
    start bigint;
    applied integer[] := '{}';
BEGIN
    FOR acct IN SELECT DISTINCT u.a FROM unnest(p_account) AS u(a) ORDER BY u.a LOOP
        SELECT balance_micros INTO b FROM accounts WHERE id = acct FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        start := b;
        FOR k IN
            SELECT u.o::integer FROM unnest(p_account) WITH ORDINALITY AS u(a, o)
            WHERE u.a = acct ORDER BY p_conditional[u.o], u.o
        LOOP
            IF NOT p_conditional[k] OR b + p_amount[k] >= 0 THEN
                b := b + p_amount[k];
                applied := applied || k;
                item := k;
                balance := b;
                RETURN NEXT;
            END IF;
        END LOOP;
        IF b <> start THEN
            UPDATE accounts SET balance_micros = b WHERE id = acct;
        END IF;
    END LOOP;
    INSERT INTO ledger (account_id, kind, amount_micros, request_id, key_id, note, created_at)
    SELECT p_account[m.j], p_kind[m.j], p_amount[m.j], p_request[m.j], p_key[m.j], p_note[m.j], p_created
    FROM unnest(applied) WITH ORDINALITY AS m(j, n) ORDER BY m.n;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute(_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        previous = context.script.get_revision("0003")
        assert previous is not None
        op.execute(previous.module._FUNCTION)
