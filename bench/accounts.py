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

`--throughput S` adds `--rounds` rounds of `wrk -c50` (buffered), S seconds per server, with every server
pinned to core 0 and everything else to core 1, as in bench/run.py (each server's affinity is checked once it
is up), PostgreSQL and Redis wherever the kernel puts them: requests/s and the gateway's CPU per request with
every accounts stage on. Each turn starts once the machine is quiet (the last one's writes done). All servers
(the reference proxy of bench/reference_proxy.py too) run side by side and take turns within each round, so
each scenario's ratio to the reference is taken against the reference measured moments before, and the median
over rounds is reported: on a shared machine whose speed drifts by 20% over minutes, that is the comparison
that holds still. Afterwards each key's balance must still equal its ledger sum.

    python bench/accounts.py --rps 200 --duration 10
    python bench/accounts.py --rps 150 --duration 4 --warmup 1 --throughput 6 --rounds 5
    python bench/accounts.py ... --compare /path/to/other/checkout/src   # every scenario of both, A/B
    python bench/accounts.py ... --only key-postgres,key-postgres-redis  # a subset of the scenarios
    python bench/accounts.py ... --observe   # each scenario with metrics and JSON request logs off, and on

`--observe` runs every scenario twice in the same rounds: `<scenario>` with metrics off and no request log,
`<scenario>+observe` with the Prometheus metrics on and one JSON log line per request written to a file
(docs/operate.md): what the operator's view costs per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import loadgen
import run as core_bench

MASTER = "ipx-bench-master-" + secrets.token_hex(8)
# Taken once, before `main` pins this process to the load core: a `Pinning` made after that would see one
# core and pin nothing, and every server would inherit the load core (as it did until the ninth session).
PIN = core_bench.Pinning(True)
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"
OBSERVE = False  # --observe


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


def check_pinned(proc: subprocess.Popen[bytes], core: str | None) -> None:
    """A server must run on the core it was given, alone: measured otherwise, it shares a core with wrk and
    the upstream and the ratios mean something else."""
    if core is not None and os.sched_getaffinity(proc.pid) != {int(core)}:
        raise SystemExit(f"{proc.args} runs on cores {sorted(os.sched_getaffinity(proc.pid))}, not on {core}")


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


def services_cpu_seconds() -> float:
    """CPU time used so far by every PostgreSQL and Redis server process on the machine (they share its two
    cores with the gateway, so what they spend per request is part of what a keyed request costs)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name == "postgres" or name.startswith("redis-server"):
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def busy_cores() -> float:
    """How many cores' worth of CPU the whole machine used over the last 0.2 s (/proc/stat)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(0.2)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(total1 - total0, 1) * (os.cpu_count() or 1)


def wait_quiet(limit_s: float = 15.0) -> float:
    """Wait until the machine is idle (under a fifth of a core in use), at most `limit_s`: the scenario run
    before may still be writing its usage rows and settlements (a gateway's writer thread, PostgreSQL),
    which would otherwise be counted against the next one. Returns the seconds waited."""
    started = time.monotonic()
    while busy_cores() > 0.2 and time.monotonic() - started < limit_s:
        pass
    return time.monotonic() - started


def throughput(url: str, key: str, pid: int, pin: core_bench.Pinning, seconds: int) -> dict[str, Any]:
    """One round of `wrk -c50` on buffered calls, on a quiet machine: req/s, errors, the server's CPU per
    request, and that of PostgreSQL and Redis."""
    waited = wait_quiet()
    c0, s0 = core_bench.cpu_seconds(pid), services_cpu_seconds()
    w = core_bench.wrk(url, key, False, seconds, 50, pin.load, model="bench-model")
    cpu, services = core_bench.cpu_seconds(pid) - c0, services_cpu_seconds() - s0
    return {
        "rps": w["rps"],
        "requests": w["requests"],
        "non_2xx": w["non_2xx"],
        "socket_errors": w["socket_errors"],
        "cpu_us_per_req": 1e6 * cpu / max(w["requests"], 1),
        "services_cpu_us_per_req": 1e6 * services / max(w["requests"], 1),
        "waited_quiet_s": round(waited, 2),
    }


@dataclass
class Server:
    """A running server under test (a gateway or the reference proxy), pinned to the gateway's core."""

    name: str
    proc: subprocess.Popen[bytes]
    base: str
    key: str = MASTER
    account: str | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.base + "/v1/chat/completions"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def start_gateway(name: str, cfg: dict[str, Any], tmp: Path, use_key: bool, src: str | None = None) -> Server:
    """A gateway of this checkout, or of the `src/` directory of another (`--compare`). With `--observe`, a
    name without `+observe` has metrics off, and one with it has metrics and a JSON request log on."""
    if OBSERVE:
        on = name.endswith("+observe")
        log = {"enabled": True, "destination": str(tmp / f"{name}.requests.jsonl")} if on else {"enabled": False}
        cfg = {**cfg, "observability": {"metrics": {"enabled": on}, "request_log": log}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = free_port()
    env = {**os.environ, "INFERPLEX_BENCH_MASTER": MASTER, "INFERPLEX_BENCH_UP": "sk-bench"}
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    pin = PIN
    cmd = [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen([*pin.prefix(pin.gateway), *cmd], env=env, stdout=subprocess.DEVNULL)
    server = Server(name, proc, f"http://127.0.0.1:{port}")
    try:
        wait_http(server.base + "/health", proc)
        check_pinned(proc, pin.gateway)
        if use_key:
            body = {"name": "bench", "credits_micros": 10**12, "rpm": 10**6, "tpm": 10**9, "max_concurrent": 10_000}
            r = httpx.post(server.base + "/admin/keys", json=body, headers={"Authorization": f"Bearer {MASTER}"})
            r.raise_for_status()
            server.key, server.account = r.json()["key"], r.json()["account_id"]
    except BaseException:
        server.stop()
        raise
    return server


def start_reference(upstream: str, tmp: Path) -> Server:
    """The 60-line aiohttp proxy (bench/reference_proxy.py) the core's budget is stated against, pinned and
    loaded exactly like each gateway: the floor each scenario's throughput is compared with."""
    path = tmp / "reference.yaml"
    path.write_text(f'base_url: "{upstream}"\n')
    port, key = free_port(), "ipx-bench-reference"
    env = {**os.environ, "BENCH_CONFIG": str(path), "BENCH_KEY": key, "BENCH_UPSTREAM_KEY": "sk-bench"}
    pin = PIN
    script = str(Path(__file__).parent / "reference_proxy.py")
    proc = subprocess.Popen([*pin.prefix(pin.gateway), sys.executable, script, str(port)], env=env)
    server = Server("reference", proc, f"http://127.0.0.1:{port}", key)
    try:
        wait_http(server.base + "/health", proc)
        check_pinned(proc, pin.gateway)
    except BaseException:
        server.stop()
        raise
    return server


def latency(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """Open-loop calls at `--rps`: the latency each stage adds, and the usage rows that came of them."""
    target = loadgen.Target.build(server.name, server.url, server.key, "bench-model", stream=False)
    result = asyncio.run(loadgen.run_rate(target, args.rps, args.duration, args.warmup))
    admin = {"Authorization": f"Bearer {MASTER}"}
    usage = httpx.get(server.base + "/admin/usage/totals", params={"by": "model"}, headers=admin).json()
    return {
        "scenario": server.name,
        "ok": len(result.latencies),
        "non_2xx": result.non_2xx,
        "errors": result.errors,
        "latency": loadgen.summary(result.service),
        "usage_rows": sum(g["requests"] for g in usage["data"]),
    }


def reconciles(server: Server) -> bool:
    """Whether the key's account balance still equals the sum of its ledger."""
    admin = {"Authorization": f"Bearer {MASTER}"}
    acct = httpx.get(f"{server.base}/admin/accounts/{server.account}", headers=admin).json()
    total, params = 0, {"limit": 10_000}
    while True:  # a page at a time: the admin API answers at most 10,000 entries
        page = httpx.get(f"{server.base}/admin/accounts/{server.account}/ledger", params=params, headers=admin).json()
        if "has_more" not in page:  # a gateway from before the ledger paged (--compare) answers it all at once
            params["limit"] = 10**7
            page = httpx.get(f"{server.base}/admin/accounts/{server.account}/ledger", params=params, headers=admin)
            return bool(acct["balance_micros"] == sum(e["amount_micros"] for e in page.json()["data"]))
        total += sum(e["amount_micros"] for e in page["data"])
        if not page["has_more"]:
            return bool(acct["balance_micros"] == total)
        params["before"] = page["data"][-1]["id"]


def throughput_rounds(servers: list[Server], args: argparse.Namespace) -> None:
    """`--rounds` rounds of `--throughput` seconds each, every server in turn within a round (the reference
    first): the machine's speed drifts over minutes, so each scenario is compared with the reference
    measured moments before it, round by round, and the median of those ratios is reported. The gateways
    run in the opposite order every other round: the one right after the reference measured slower, whichever
    build it was (docs/benchmarks.md, twelfth session), so a fixed order favoured `--compare`."""
    pin = PIN
    for s in servers:  # warm every server up once (connections, caches, the JIT-less interpreter's caches)
        core_bench.wrk(s.url, s.key, False, 2, 50, pin.load, model="bench-model")
    reference = [s for s in servers if s.name == "reference"]
    gateways = [s for s in servers if s.name != "reference"]
    for n in range(args.rounds):
        for s in reference + (gateways if n % 2 == 0 else gateways[::-1]):
            s.rounds.append(throughput(s.url, s.key, s.proc.pid, pin, args.throughput))


def drop_redis_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def tear_down(servers: list[Server], upstream: subprocess.Popen[bytes], databases: list[str]) -> None:
    """Stop what a run started (the servers still up, the upstream) and drop the databases it made."""
    for s in servers:
        if s.proc.poll() is None:
            s.stop()
    upstream.terminate()
    upstream.wait(15)
    for db in databases:
        pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


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
    p.add_argument("--throughput", type=int, default=0, help="seconds of wrk -c50 per scenario and round (0: none)")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds, every scenario in each")
    p.add_argument(
        "--compare",
        metavar="SRC",
        help="also run every scenario from this src/ directory (another checkout), named <scenario>@compare, "
        "in the same rounds: an A/B that the machine's drift between runs cannot blur",
    )
    p.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated scenarios to run (master, key-sqlite, key-postgres, key-postgres-redis); default all",
    )
    p.add_argument("--observe", action="store_true", help="every scenario with metrics and request logs off and on")
    args = p.parse_args()
    global OBSERVE
    OBSERVE = args.observe
    wanted = set(args.only.split(",")) if args.only else None
    up_port = free_port()
    load = PIN
    upstream = subprocess.Popen(
        [*load.prefix(load.load), sys.executable, str(Path(__file__).parent / "upstream.py"), "--port", str(up_port)],
        stdout=subprocess.DEVNULL,
    )
    servers: list[Server] = []
    rows: list[dict[str, Any]] = []
    load.pin_self()
    prefix = f"inferplex_bench:{secrets.token_hex(4)}:"
    created: list[str] = []  # PostgreSQL databases, one per PostgreSQL scenario and build
    builds: list[tuple[str, str | None]] = [("", None)] + ([("@compare", args.compare)] if args.compare else [])
    if args.observe:
        builds += [(suffix + "+observe", src) for suffix, src in builds]
    try:
        wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        up = f"http://127.0.0.1:{up_port}/v1"
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            if args.throughput:
                servers.append(start_reference(up, tmp))
            for suffix, src in builds:
                for name, use_key in (("master", False), ("key-sqlite", True)):
                    if wanted is not None and name not in wanted:
                        continue
                    sqlite = {"database_url": f"sqlite+aiosqlite:///{tmp / (name + suffix)}.db"}
                    servers.append(start_gateway(name + suffix, config(up, tmp, sqlite), tmp, use_key, src))
            try:
                pg_names = [n for n in ("key-postgres", "key-postgres-redis") if wanted is None or n in wanted]
                for _ in range(len(pg_names) * len(builds)):
                    db = "inferplex_bench_" + secrets.token_hex(4)
                    pg_admin(f'CREATE DATABASE "{db}"')
                    created.append(db)
            except OSError as exc:
                print(f"PostgreSQL unreachable ({exc}); skipping key-postgres and key-postgres-redis", file=sys.stderr)
            else:
                urls = iter(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}" for db in created)
                for suffix, src in builds:
                    if "key-postgres" in pg_names:
                        pg = {"database_url": next(urls)}
                        servers.append(start_gateway("key-postgres" + suffix, config(up, tmp, pg), tmp, True, src))
                    if "key-postgres-redis" in pg_names:
                        storage = {"database_url": next(urls), "redis_url": REDIS_URL, "redis_prefix": prefix + suffix}
                        cfg = config(up, tmp, storage)
                        servers.append(start_gateway("key-postgres-redis" + suffix, cfg, tmp, True, src))
            gateways = [s for s in servers if s.name != "reference"]
            for s in gateways:
                rows.append(latency(s, args))
            if args.throughput:
                throughput_rounds(servers, args)
                time.sleep(1)  # settlements are booked in the background; let the last ones land
                for s, row in zip(gateways, rows, strict=True):
                    row["throughput"] = s.rounds
                    if s.account is not None:
                        row["reconciles"] = reconciles(s)
            for s in servers:
                s.stop()
    finally:
        tear_down(servers, upstream, created)
        drop_redis_prefix(prefix)
    base = rows[0]["latency"]
    print(f"{'scenario':<27} {'ok':>6} {'non2xx':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} rows")
    for r in rows:
        lat = r["latency"]
        print(
            f"{r['scenario']:<27} {r['ok']:>6} {r['non_2xx']:>6} {lat['p50_ms']:>8.2f} {lat['p90_ms']:>8.2f} "
            f"{lat['p99_ms']:>8.2f} {lat['p50_ms'] - base['p50_ms']:>+8.2f} {r['usage_rows']}"
        )
    out: dict[str, Any] = {"rps": args.rps, "duration_s": args.duration, "rows": rows}
    if args.throughput:
        # The core's budget, 4,000 of the reference's 7,400 req/s on the team's machine: a ratio of 0.54. Each
        # round's ratio is against the reference's rate in the same round; the median over rounds is shown.
        ref = servers[0].rounds
        print(f"\n{'scenario':<27} {'wrk -c50 req/s':>15} {'CPU µs/req':>11} {'PG+Redis µs':>12} {'of reference':>13} "
              f"{'per round':>20} {'non2xx':>7} {'quiet wait s':>12} reconciles")  # fmt: skip
        for s in servers:
            ratios = [t["rps"] / r["rps"] for t, r in zip(s.rounds, ref, strict=True)]
            rps = statistics.median(t["rps"] for t in s.rounds)
            cpu = statistics.median(t["cpu_us_per_req"] for t in s.rounds)
            services = statistics.median(t["services_cpu_us_per_req"] for t in s.rounds)
            each = " ".join(f"{x:.2f}" for x in ratios)
            recon = next((r.get("reconciles", "-") for r in rows if r["scenario"] == s.name), "-")
            print(f"{s.name:<27} {rps:>15.0f} {cpu:>11.0f} {services:>12.0f} {statistics.median(ratios):>13.2f} "
                  f"{each:>20} {sum(t['non_2xx'] for t in s.rounds):>7} "
                  f"{max(t['waited_quiet_s'] for t in s.rounds):>12.1f} {recon}")  # fmt: skip
        out["reference"] = ref
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
