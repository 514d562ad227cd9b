"""Monthly spending caps per account and per key (issue 21, Inferada's 402), decided in the ledger's batch.

A cap is checked where the balance is: inside the one atomic step that applies a batch of moves (store/moves.py),
so concurrent requests, on any replica, cannot together pass it. That step needs, per account and per key,
what was spent in the current calendar month (UTC) and what is reserved by requests in flight:

- `accounts`: `monthly_cap_micros` (null: none), `spend_month` (YYYYMM of the month `month_spent_micros` is
  for; an older month reads as 0 spent, and is reset by the next move), `month_spent_micros`,
  `month_reserved_micros`. They sit on the row the batch already locks and writes once.
- `api_keys`: `monthly_cap_micros`. A key's spend goes in a table of its own, `key_spend`, not on `api_keys`:
  every update of `api_keys` signals a key change (migration 0003's triggers), which would empty every
  replica's key cache on every request. A key belongs to one account, so its row is only written under its
  account's row lock: no lock of its own, and no new lock order.

On PostgreSQL the batch function gains three parameters (what each move adds to the reserved and to the spent
amount, and the month) and three result columns (which cap refused a reservation, that cap, the month's spend
and the reserved): it is a new signature, so 0007's function is dropped here and made again on downgrade.
Plain ALTER TABLE, not a batch: SQLite's batch mode rebuilds the table and would lose 0003's triggers.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0008"
down_revision = "0007"

_OLD_SIGNATURE = "text[], text[], bigint[], boolean[], text[], text[], text[], double precision"
_SIGNATURE = _OLD_SIGNATURE + ", bigint[], bigint[], integer"

_FUNCTION = """
CREATE FUNCTION inferplex_ledger_batch(
    p_account text[], p_kind text[], p_amount bigint[], p_conditional boolean[],
    p_request text[], p_key text[], p_note text[], p_created double precision,
    p_hold bigint[], p_spend bigint[], p_month integer
) RETURNS TABLE (item integer, balance bigint, capped text, cap bigint, spent bigint, reserved bigint)
LANGUAGE plpgsql AS $$
DECLARE
    acct text;
    k integer;
    j integer;
    b bigint;
    start bigint;
    a_cap bigint;
    a_month integer;
    a_spent bigint;
    a_reserved bigint;
    a_dirty boolean;
    keys text[];
    k_cap bigint[];
    k_month integer[];
    k_spent bigint[];
    k_reserved bigint[];
    k_dirty boolean[];
    applied integer[] := '{}';
BEGIN
    FOR acct IN SELECT DISTINCT u.a FROM unnest(p_account) AS u(a) ORDER BY u.a LOOP
        SELECT x.balance_micros, x.monthly_cap_micros, x.spend_month, x.month_spent_micros, x.month_reserved_micros
        INTO b, a_cap, a_month, a_spent, a_reserved FROM accounts x WHERE x.id = acct FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        IF a_month < p_month THEN
            a_month := p_month;
            a_spent := 0;
        END IF;
        start := b;
        a_dirty := false;
        -- The keys of this account's moves: caps, and spend rolled to this month (written under the account's lock).
        SELECT array_agg(q.kid ORDER BY q.kid), array_agg(ak.monthly_cap_micros ORDER BY q.kid),
               array_agg(greatest(coalesce(s.spend_month, p_month), p_month) ORDER BY q.kid),
               array_agg(CASE WHEN coalesce(s.spend_month, 0) < p_month THEN 0 ELSE s.month_spent_micros END
                         ORDER BY q.kid),
               array_agg(coalesce(s.month_reserved_micros, 0) ORDER BY q.kid)
        INTO keys, k_cap, k_month, k_spent, k_reserved
        FROM (SELECT DISTINCT p_key[o] AS kid FROM generate_subscripts(p_account, 1) AS o
              WHERE p_account[o] = acct AND p_key[o] IS NOT NULL) q
        LEFT JOIN api_keys ak ON ak.id = q.kid
        LEFT JOIN key_spend s ON s.key_id = q.kid;
        k_dirty := array_fill(false, ARRAY[coalesce(array_length(keys, 1), 0)]);
        FOR k IN
            SELECT u.o::integer FROM unnest(p_account) WITH ORDINALITY AS u(a, o)
            WHERE u.a = acct ORDER BY p_conditional[u.o], u.o
        LOOP
            j := array_position(keys, p_key[k]);
            IF p_conditional[k] THEN
                CONTINUE WHEN b < -p_amount[k];
                IF a_cap IS NOT NULL AND a_spent::numeric + a_reserved + p_hold[k] > a_cap THEN
                    item := k; balance := NULL; capped := 'account'; cap := a_cap; spent := a_spent;
                    reserved := a_reserved;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                IF j IS NOT NULL AND k_cap[j] IS NOT NULL
                   AND k_spent[j]::numeric + k_reserved[j] + p_hold[k] > k_cap[j] THEN
                    item := k; balance := NULL; capped := 'key'; cap := k_cap[j]; spent := k_spent[j];
                    reserved := k_reserved[j];
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            b := b + p_amount[k];
            IF p_hold[k] <> 0 OR p_spend[k] <> 0 THEN
                a_reserved := greatest(0, a_reserved + p_hold[k]);
                a_spent := a_spent + p_spend[k];
                a_dirty := true;
                IF j IS NOT NULL THEN
                    k_reserved[j] := greatest(0, k_reserved[j] + p_hold[k]);
                    k_spent[j] := k_spent[j] + p_spend[k];
                    k_dirty[j] := true;
                END IF;
            END IF;
            applied := applied || k;
            item := k; balance := b; capped := NULL; cap := NULL; spent := NULL; reserved := NULL;
            RETURN NEXT;
        END LOOP;
        IF b <> start OR a_dirty THEN
            UPDATE accounts SET balance_micros = b, spend_month = a_month, month_spent_micros = a_spent,
                month_reserved_micros = a_reserved
            WHERE id = acct;
        END IF;
        IF true = ANY(k_dirty) THEN
            INSERT INTO key_spend AS s (key_id, spend_month, month_spent_micros, month_reserved_micros)
            SELECT keys[i], k_month[i], k_spent[i], k_reserved[i] FROM generate_subscripts(keys, 1) AS i
            WHERE k_dirty[i]
            ON CONFLICT (key_id) DO UPDATE SET spend_month = EXCLUDED.spend_month,
                month_spent_micros = EXCLUDED.month_spent_micros,
                month_reserved_micros = EXCLUDED.month_reserved_micros;
        END IF;
    END LOOP;
    INSERT INTO ledger (account_id, kind, amount_micros, request_id, key_id, note, created_at)
    SELECT p_account[m.j], p_kind[m.j], p_amount[m.j], p_request[m.j], p_key[m.j], p_note[m.j], p_created
    FROM unnest(applied) WITH ORDINALITY AS m(j, n) ORDER BY m.n;
END $$
"""

_ACCOUNT_COLUMNS = (
    ("monthly_cap_micros", sa.BigInteger(), None),
    ("spend_month", sa.Integer(), "0"),
    ("month_spent_micros", sa.BigInteger(), "0"),
    ("month_reserved_micros", sa.BigInteger(), "0"),
)


def upgrade() -> None:
    for name, type_, default in _ACCOUNT_COLUMNS:
        op.add_column("accounts", sa.Column(name, type_, nullable=default is None, server_default=default))
    op.add_column("api_keys", sa.Column("monthly_cap_micros", sa.BigInteger()))
    op.create_table(
        "key_spend",
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("spend_month", sa.Integer, nullable=False),
        sa.Column("month_spent_micros", sa.BigInteger, nullable=False),
        sa.Column("month_reserved_micros", sa.BigInteger, nullable=False),
    )
    if op.get_bind().dialect.name != "sqlite":
        op.execute(f"DROP FUNCTION IF EXISTS inferplex_ledger_batch({_OLD_SIGNATURE})")
        op.execute(_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute(f"DROP FUNCTION IF EXISTS inferplex_ledger_batch({_SIGNATURE})")
        previous = context.script.get_revision("0007")
        assert previous is not None
        op.execute(previous.module._function("0004").replace("b + p_amount[k] >= 0", "b >= -p_amount[k]"))
    op.drop_table("key_spend")
    op.drop_column("api_keys", "monthly_cap_micros")
    for name, _, _ in reversed(_ACCOUNT_COLUMNS):
        op.drop_column("accounts", name)
