"""What auth, limits, billing and the usage log cost per request: the same gateway build, three ways.

- `master`: the master key on the default SQLite store: no key lookup, no limits, no billing (the guard
  still estimates the request and queues a usage row, as for every request);
- `key-sqlite`: an API key with credits, rpm/tpm and a concurrency limit, SQLite (file in a temp dir):
  a key lookup, two rate buckets, a concurrency slot, a reservation and a settlement per request;
- `key-postgres`: the same key on PostgreSQL (a fresh database, dropped after), limits in memory;
- `key-postgres-redis`: the same plus Redis for the limits (its own key prefix, deleted after): what a
  multi-replica deployment pays.

Each gateway is a real `inferplex serve` process in front of bench/upstream.py (pre-built answers), driven
open-loop at a fixed rate by bench/loadgen.py; the difference in latency between rows is the overhead.
Needs PostgreSQL and Redis on 127.0.0.1 for the third row (skipped with a note if unreachable).

`--throughput S` adds, per scenario, S seconds of `wrk -c50` (buffered) with the gateway pinned to core 0
and everything else to core 1, as in bench/run.py: requests/s and the gateway's CPU per request with
every accounts stage on. Afterwards the account's balance must still equal its ledger sum.

    python bench/accounts.py --rps 200 --duration 10
    python bench/accounts.py --rps 150 --duration 5 --throughput 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import loadgen
import run as core_bench

MASTER = "ipx-bench-master-" + secrets.token_hex(8)
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited: {proc.args}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def config(upstream: str, tmp: Path, storage: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"master_key": "env:INFERPLEX_BENCH_MASTER", "data_dir": str(tmp), "log_level": "warning"},
        "providers": [{"name": "up", "kind": "openai", "base_url": upstream, "api_key": "env:INFERPLEX_BENCH_UP"}],
        "models": [
            {
                "name": "bench-model",
                "deployments": [{"provider": "up", "model": "bench-model"}],
                "max_output": 256,
                "pricing": {"input": "0.15", "output": "0.60"},
            }
        ],
        "storage": storage,
    }


def throughput(url: str, key: str, pid: int, pin: core_bench.Pinning, seconds: int) -> dict[str, Any]:
    """`wrk -c50` on buffered calls after a 2 s warm-up: req/s, errors, and the server's CPU per request."""
    core_bench.wrk(url, key, False, 2, 50, pin.load, model="bench-model")
    c0 = core_bench.cpu_seconds(pid)
    w = core_bench.wrk(url, key, False, seconds, 50, pin.load, model="bench-model")
    cpu = core_bench.cpu_seconds(pid) - c0
    return {
        "rps": w["rps"],
        "non_2xx": w["non_2xx"],
        "socket_errors": w["socket_errors"],
        "cpu_us_per_req": 1e6 * cpu / max(w["requests"], 1),
    }


def run_gateway(name: str, cfg: dict[str, Any], tmp: Path, use_key: bool, args: argparse.Namespace) -> dict[str, Any]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = free_port()
    env = {**os.environ, "INFERPLEX_BENCH_MASTER": MASTER, "INFERPLEX_BENCH_UP": "sk-bench"}
    pin = core_bench.Pinning(True)
    proc = subprocess.Popen(
        [
            *pin.prefix(pin.gateway),
            sys.executable,
            "-m",
            "inferplex",
            "serve",
            "--config",
            str(path),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/health", proc)
        key = MASTER
        if use_key:
            body = {
                "name": "bench",
                "credits_micros": 10**12,
                "rpm": 10**6,
                "tpm": 10**9,
                "max_concurrent": 10_000,
            }
            r = httpx.post(base + "/admin/keys", json=body, headers={"Authorization": f"Bearer {MASTER}"})
            r.raise_for_status()
            key = r.json()["key"]
            account = r.json()["account_id"]
        target = loadgen.Target.build(name, base + "/v1/chat/completions", key, "bench-model", stream=False)
        result = asyncio.run(loadgen.run_rate(target, args.rps, args.duration, args.warmup))
        out: dict[str, Any] = {}
        if args.throughput:
            out["throughput"] = throughput(base + "/v1/chat/completions", key, proc.pid, pin, args.throughput)
            if use_key:
                admin = {"Authorization": f"Bearer {MASTER}"}
                time.sleep(1)  # settlements are booked in the background; let the last ones land
                acct = httpx.get(f"{base}/admin/accounts/{account}", headers=admin).json()
                ledger = httpx.get(f"{base}/admin/accounts/{account}/ledger", params={"limit": 10**7}, headers=admin)
                entries = ledger.json()["data"]
                out["throughput"]["reconciles"] = acct["balance_micros"] == sum(e["amount_micros"] for e in entries)
        usage = httpx.get(
            base + "/admin/usage/totals", params={"by": "model"}, headers={"Authorization": f"Bearer {MASTER}"}
        ).json()
        return {
            **out,
            "scenario": name,
            "ok": len(result.latencies),
            "non_2xx": result.non_2xx,
            "errors": result.errors,
            "latency": loadgen.summary(result.service),
            "usage_rows": sum(g["requests"] for g in usage["data"]),
        }
    finally:
        proc.terminate()
        proc.wait(15)


def run_reference(upstream: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The 60-line aiohttp proxy (bench/reference_proxy.py) the core's budget is stated against, pinned and
    loaded exactly like each gateway: the floor each scenario's throughput is compared with."""
    path = tmp / "reference.yaml"
    path.write_text(f'base_url: "{upstream}"\n')
    port, key = free_port(), "ipx-bench-reference"
    env = {**os.environ, "BENCH_CONFIG": str(path), "BENCH_KEY": key, "BENCH_UPSTREAM_KEY": "sk-bench"}
    pin = core_bench.Pinning(True)
    script = str(Path(__file__).parent / "reference_proxy.py")
    proc = subprocess.Popen([*pin.prefix(pin.gateway), sys.executable, script, str(port)], env=env)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc)
        return throughput(url, key, proc.pid, pin, args.throughput)
    finally:
        proc.terminate()
        proc.wait(15)


def drop_redis_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def pg_admin(statement: str) -> None:
    """Run one statement (CREATE or DROP DATABASE) on the local PostgreSQL's `postgres` database."""
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(PG_ADMIN)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rps", type=float, default=200)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--throughput", type=int, default=0, help="seconds of wrk -c50 per scenario (0: none)")
    args = p.parse_args()
    up_port = free_port()
    load = core_bench.Pinning(True)
    upstream = subprocess.Popen(
        [*load.prefix(load.load), sys.executable, str(Path(__file__).parent / "upstream.py"), "--port", str(up_port)],
        stdout=subprocess.DEVNULL,
    )
    rows: list[dict[str, Any]] = []
    load.pin_self()
    try:
        wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        up = f"http://127.0.0.1:{up_port}/v1"
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            if args.throughput:
                reference = run_reference(up, tmp, args)
            for name, use_key in (("master", False), ("key-sqlite", True)):
                sqlite = {"database_url": f"sqlite+aiosqlite:///{tmp / name}.db"}
                rows.append(run_gateway(name, config(up, tmp, sqlite), tmp, use_key, args))
            db = "inferplex_bench_" + secrets.token_hex(4)
            prefix = f"inferplex_bench:{secrets.token_hex(4)}:"
            try:
                pg_admin(f'CREATE DATABASE "{db}"')
            except OSError as exc:
                print(f"PostgreSQL unreachable ({exc}); skipping key-postgres-redis", file=sys.stderr)
            else:
                try:
                    pg = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"}
                    rows.append(run_gateway("key-postgres", config(up, tmp, pg), tmp, True, args))
                    storage = {**pg, "redis_url": REDIS_URL, "redis_prefix": prefix}
                    rows.append(run_gateway("key-postgres-redis", config(up, tmp, storage), tmp, True, args))
                finally:
                    pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                    drop_redis_prefix(prefix)
    finally:
        upstream.terminate()
        upstream.wait(15)
    base = rows[0]["latency"]
    print(f"{'scenario':<20} {'ok':>6} {'non2xx':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} rows")
    for r in rows:
        lat = r["latency"]
        print(
            f"{r['scenario']:<20} {r['ok']:>6} {r['non_2xx']:>6} {lat['p50_ms']:>8.2f} {lat['p90_ms']:>8.2f} "
            f"{lat['p99_ms']:>8.2f} {lat['p50_ms'] - base['p50_ms']:>+8.2f} {r['usage_rows']}"
        )
    out: dict[str, Any] = {"rps": args.rps, "duration_s": args.duration, "rows": rows}
    if args.throughput:
        # The core's budget, 4,000 of the reference's 7,400 req/s on the team's machine: a ratio of 0.54.
        print(f"\n{'scenario':<20} {'wrk -c50 req/s':>15} {'CPU µs/req':>11} {'of reference':>13} {'non2xx':>7} "
              "reconciles")  # fmt: skip
        for name, t in [("reference", reference), *((r["scenario"], r["throughput"]) for r in rows)]:
            print(f"{name:<20} {t['rps']:>15.0f} {t['cpu_us_per_req']:>11.0f} {t['rps'] / reference['rps']:>13.2f} "
                  f"{t['non_2xx']:>7} {t.get('reconciles', '-')}")  # fmt: skip
        out["reference"] = reference
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
