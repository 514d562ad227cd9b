"""Client and PostgreSQL CPU per ledger batch call: how the batch's moves are passed to the database.

Runs the function of migration 0004 with batches of `--moves` moves (half reservations, half settlements,
on one account) three ways, alternating, on one connection: `arrays` (a Python list per column, asyncpg's
array encoder, a row per move back: the way before the eighth session), `literals` (each column as a text
array literal cast by PostgreSQL, as `store/ledger.py` does now), and `select1` (`SELECT 1`: the fixed cost
of any call). Client CPU is this process's; PostgreSQL's is its backend's (from /proc). Needs PostgreSQL on
127.0.0.1 (a fresh database, dropped after).

    .venv/bin/python bench/ledger_calls.py [--moves 16] [--calls 1500]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from inferplex.store.ledger import Ledger
from inferplex.store.moves import Move
from inferplex.store.postgres import LEDGER_BATCH, PostgresDatabase, bool_array, int_array, text_array

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
ARRAYS = "SELECT item, balance FROM inferplex_ledger_batch($1, $2, $3, $4, $5, $6, $7, $8)"


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(args: argparse.Namespace) -> None:
    name = "inferplex_bench_" + secrets.token_hex(4)
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db = PostgresDatabase(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}")
        await db.migrate()
        ledger = Ledger(db)
        account = await ledger.create_account("bench")
        await ledger.credit(account.id, 10**15)
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}")
        pid = await conn.fetchval("SELECT pg_backend_pid()")

        def batch() -> list[Move]:
            return [
                Move(
                    account.id,
                    "reserve" if i % 2 else "settle",
                    -1000 if i % 2 else 500,
                    bool(i % 2),
                    "req_" + secrets.token_hex(10),
                    "key_" + secrets.token_hex(8),
                )
                for i in range(args.moves)
            ]

        batches = [batch() for _ in range(args.calls)]

        async def arrays(moves: list[Move]) -> Any:
            columns = [[m.account_id for m in moves], [m.kind for m in moves], [m.amount for m in moves],
                       [m.conditional for m in moves], [m.request_id for m in moves], [m.key_id for m in moves],
                       [m.note for m in moves]]  # fmt: skip
            return {r["item"]: r["balance"] for r in await conn.fetch(ARRAYS, *columns, time.time())}

        async def literals(moves: list[Move]) -> Any:
            row = await conn.fetchrow(
                LEDGER_BATCH, text_array([m.account_id for m in moves]), text_array([m.kind for m in moves]),
                int_array([m.amount for m in moves]), bool_array([m.conditional for m in moves]),
                text_array([m.request_id for m in moves]), text_array([m.key_id for m in moves]),
                text_array([m.note for m in moves]), time.time(),
            )  # fmt: skip
            return dict(zip(row["items"], row["balances"], strict=True))

        async def select1(_: list[Move]) -> Any:
            return await conn.fetchval("SELECT 1")

        for _ in range(args.rounds):
            for label, call in (("arrays", arrays), ("literals", literals), ("select1", select1)):
                for moves in batches[:50]:
                    await call(moves)
                c0, p0 = time.process_time(), backend_cpu(pid)
                for moves in batches:
                    await call(moves)
                client, server = time.process_time() - c0, backend_cpu(pid) - p0
                print(f"{label:9} client {1e6 * client / args.calls:7.1f} µs/call   "
                      f"PostgreSQL {1e6 * server / args.calls:7.1f} µs/call", flush=True)  # fmt: skip
        await conn.close()
        await db.aclose()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--moves", type=int, default=16)
    p.add_argument("--calls", type=int, default=1500)
    p.add_argument("--rounds", type=int, default=2)
    uvloop.run(main(p.parse_args()))
