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

    python bench/accounts.py --rps 200 --duration 10
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


def run_gateway(name: str, cfg: dict[str, Any], tmp: Path, use_key: bool, args: argparse.Namespace) -> dict[str, Any]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = free_port()
    env = {**os.environ, "INFERPLEX_BENCH_MASTER": MASTER, "INFERPLEX_BENCH_UP": "sk-bench"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port)],
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
        target = loadgen.Target.build(name, base + "/v1/chat/completions", key, "bench-model", stream=False)
        result = asyncio.run(loadgen.run_rate(target, args.rps, args.duration, args.warmup))
        usage = httpx.get(
            base + "/admin/usage/totals", params={"by": "model"}, headers={"Authorization": f"Bearer {MASTER}"}
        ).json()
        return {
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


def _pg(statement: str) -> None:
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
    args = p.parse_args()
    up_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "upstream.py"), "--port", str(up_port)],
        stdout=subprocess.DEVNULL,
    )
    rows: list[dict[str, Any]] = []
    try:
        wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        up = f"http://127.0.0.1:{up_port}/v1"
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for name, use_key in (("master", False), ("key-sqlite", True)):
                sqlite = {"database_url": f"sqlite+aiosqlite:///{tmp / name}.db"}
                rows.append(run_gateway(name, config(up, tmp, sqlite), tmp, use_key, args))
            db = "inferplex_bench_" + secrets.token_hex(4)
            prefix = f"inferplex_bench:{secrets.token_hex(4)}:"
            try:
                _pg(f'CREATE DATABASE "{db}"')
            except OSError as exc:
                print(f"PostgreSQL unreachable ({exc}); skipping key-postgres-redis", file=sys.stderr)
            else:
                try:
                    pg = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"}
                    rows.append(run_gateway("key-postgres", config(up, tmp, pg), tmp, True, args))
                    storage = {**pg, "redis_url": REDIS_URL, "redis_prefix": prefix}
                    rows.append(run_gateway("key-postgres-redis", config(up, tmp, storage), tmp, True, args))
                finally:
                    _pg(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                    import redis

                    client = redis.Redis.from_url(REDIS_URL)
                    keys = list(client.scan_iter(prefix + "*"))
                    if keys:
                        client.delete(*keys)
                    client.close()
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
    print(json.dumps({"rps": args.rps, "duration_s": args.duration, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
