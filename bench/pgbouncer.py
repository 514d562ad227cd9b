"""What PgBouncer in transaction mode costs a keyed request: the same gateway on PostgreSQL three ways.

- `key-postgres`: straight to PostgreSQL (the baseline: statements prepared by name and cached);
- `key-pgbouncer`: through PgBouncer (`pool_mode = transaction`, `storage.pooler: transaction`), the key cache
  listening on PostgreSQL itself (`storage.direct_database_url`): every statement prepared unnamed and parsed
  again where it runs, one more round trip per statement, plus the pooler's hop;
- `key-pgbouncer-nocache`: the same without a direct URL: the key cache is off, so every request also reads
  its key through the pooler.

Each is a real `inferplex serve` with an API key that has credits and limits (bench/accounts.py's set-up:
reservation, settlement, usage row per request), in front of bench/upstream.py, driven open-loop at `--rps`
by bench/loadgen.py; `--throughput S` adds `--rounds` rounds of `wrk -c50`, S seconds per scenario, taking
turns within each round (bench/accounts.py). PgBouncer (Debian's) runs on a free port with a database of its
own, removed afterwards.

    python bench/pgbouncer.py --rps 100 --duration 10
    python bench/pgbouncer.py --rps 100 --duration 5 --throughput 5 --rounds 3
    python bench/pgbouncer.py --calls 500 --rounds 5   # the store's calls alone, direct and pooled in turn
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import accounts

SCENARIOS = ("key-postgres", "key-pgbouncer", "key-pgbouncer-nocache")


@contextmanager
def pgbouncer(pool_size: int) -> Iterator[int]:
    """Debian's pgbouncer in transaction mode in front of 127.0.0.1:5432 (trust auth), on a free port."""
    if shutil.which("pgbouncer") is None:
        raise SystemExit("pgbouncer is not installed (apt-get install pgbouncer)")
    tmp = Path(tempfile.mkdtemp(prefix="ipx-bench-pgbouncer-"))
    port = accounts.free_port()
    (tmp / "userlist.txt").write_text('"postgres" ""\n')
    (tmp / "pgbouncer.ini").write_text(
        "[databases]\n* = host=127.0.0.1 port=5432\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp / 'userlist.txt'}\npool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 1000\nlogfile = {tmp / 'pgbouncer.log'}\n"
    )
    command = ["pgbouncer", str(tmp / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses root: it runs as the database's system user
        for path in (tmp, *tmp.iterdir()):
            shutil.chown(path, "postgres")
        command[1:1] = ["-u", "postgres"]
    # Wherever the kernel puts it, as PostgreSQL and Redis are in bench/accounts.py: a server beside the gateway.
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("pgbouncer did not start")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def storage(scenario: str, database: str, port: int) -> dict[str, Any]:
    direct = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}"
    if scenario == "key-postgres":
        return {"database_url": direct}
    pooled: dict[str, Any] = {
        "database_url": f"postgresql+asyncpg://postgres@127.0.0.1:{port}/{database}",
        "pooler": "transaction",
    }
    if scenario == "key-pgbouncer":
        pooled["direct_database_url"] = direct
    return pooled


async def _reserve(db: Any, move: Any) -> object:
    return await db.apply_moves([move], time.time())


async def store_calls(port: int, calls: int, rounds: int) -> None:
    """The keyed path's database calls one at a time, straight to PostgreSQL and through the pooler, taking
    turns round by round: wall time (p50, p99) and this process's CPU per call. What the pooler adds per call
    without the gateway's own work and queueing around it (on a loaded machine, the clearest measure)."""
    from inferplex.store.keys import KeyStore
    from inferplex.store.moves import Move
    from inferplex.store.postgres import PostgresDatabase

    database = "inferplex_bench_" + secrets.token_hex(4)
    await asyncio.to_thread(accounts.pg_admin, f'CREATE DATABASE "{database}"')
    direct = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}"
    pooled = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/{database}"
    dbs = {"direct": PostgresDatabase(direct), "pgbouncer": PostgresDatabase(pooled, pooler="transaction")}
    seen: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    try:
        await dbs["direct"].migrate()
        for _ in range(rounds):
            for mode, db in dbs.items():
                keys = KeyStore(db)  # no cache: each lookup is the query a cache miss runs
                kinds: dict[str, Callable[[], Awaitable[object]]] = {
                    "key lookup": partial(keys.by_hash, secrets.token_hex(16)),
                    "ledger batch": partial(_reserve, db, Move("acct_bench", "reserve", 1)),
                }
                for kind, call in kinds.items():
                    for _ in range(20):  # warm: connections open, types known
                        await call()
                    walls = []
                    cpu0 = time.process_time()
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        await call()
                        walls.append(time.perf_counter() - t0)
                    cpu = (time.process_time() - cpu0) / calls
                    q = statistics.quantiles(walls, n=100)
                    seen.setdefault((kind, mode), []).append((q[49], q[98], cpu))
    finally:
        for db in dbs.values():
            await db.aclose()
        await asyncio.to_thread(accounts.pg_admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(f"{'call':<14} {'to':<10} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs':>8}   (median of {rounds} rounds)")
    for (kind, mode), runs in seen.items():
        p50, p99, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{kind:<14} {mode:<10} {1e3 * p50:>8.3f} {1e3 * p99:>8.3f} {1e6 * cpu:>8.0f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rps", type=float, default=100)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--throughput", type=int, default=0, help="seconds of wrk -c50 per scenario and round (0: none)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pool", type=int, default=20, help="PgBouncer's default_pool_size (server sessions)")
    p.add_argument("--calls", type=int, default=0, help="only time the store's calls, this many per round")
    args = p.parse_args()
    if args.calls:
        with pgbouncer(args.pool) as port:
            asyncio.run(store_calls(port, args.calls, args.rounds))
        return 0
    load = accounts.PIN
    up_port = accounts.free_port()
    upstream = subprocess.Popen(
        [*load.prefix(load.load), sys.executable, str(Path(__file__).parent / "upstream.py"), "--port", str(up_port)],
        stdout=subprocess.DEVNULL,
    )
    load.pin_self()
    servers: list[accounts.Server] = []
    rows: list[dict[str, Any]] = []
    created: list[str] = []
    try:
        accounts.wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        up = f"http://127.0.0.1:{up_port}/v1"
        with tempfile.TemporaryDirectory() as d, pgbouncer(args.pool) as port:
            tmp = Path(d)
            for scenario in SCENARIOS:
                database = "inferplex_bench_" + secrets.token_hex(4)
                accounts.pg_admin(f'CREATE DATABASE "{database}"')
                created.append(database)
                cfg = accounts.config(up, tmp, storage(scenario, database, port))
                servers.append(accounts.start_gateway(scenario, cfg, tmp, True))
            for s in servers:
                rows.append(accounts.latency(s, args))
            if args.throughput:
                accounts.throughput_rounds(servers, args)
                time.sleep(1)  # settlements are booked in the background
                for s, row in zip(servers, rows, strict=True):
                    row["throughput"] = s.rounds
                    row["reconciles"] = accounts.reconciles(s)
            for s in servers:
                s.stop()
    finally:
        accounts.tear_down(servers, upstream, created)
    base = rows[0]["latency"]
    heads = ("ok", "non2xx", "p50 ms", "p90 ms", "p99 ms", "+p50 ms", "+p99 ms")
    print(f"{'scenario':<24} " + " ".join(f"{h:>8}" for h in heads))
    for r in rows:
        lat = r["latency"]
        print(
            f"{r['scenario']:<24} {r['ok']:>8} {r['non_2xx']:>8} {lat['p50_ms']:>8.2f} {lat['p90_ms']:>8.2f} "
            f"{lat['p99_ms']:>8.2f} {lat['p50_ms'] - base['p50_ms']:>+8.2f} {lat['p99_ms'] - base['p99_ms']:>+8.2f}"
        )
    if args.throughput:
        columns = f"{'wrk -c50 req/s':>15} {'CPU µs/req':>11} {'PG µs/req':>10} {'non2xx':>7} reconciles"
        print(f"\n{'scenario':<24} {columns}")
        for s, r in zip(servers, rows, strict=True):
            rps = statistics.median(t["rps"] for t in s.rounds)
            cpu = statistics.median(t["cpu_us_per_req"] for t in s.rounds)
            services = statistics.median(t["services_cpu_us_per_req"] for t in s.rounds)
            non_2xx = sum(t["non_2xx"] for t in s.rounds)
            print(f"{s.name:<24} {rps:>15.0f} {cpu:>11.0f} {services:>10.0f} {non_2xx:>7} {r['reconciles']}")
    print(json.dumps({"rps": args.rps, "duration_s": args.duration, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
