"""Added latency at low, steady rates: the aiohttp floor, the master key and every stage on, in one run.

Most deployments run at a few to a hundred requests a second most of the day, with one or a few requests in
flight: there is nothing to batch with, and what the keyed path pays then is its store round trips in
sequence and anything that makes one request wait for another's bookkeeping. This measures it the way a
caller sees it, against an upstream that answers after `--latency-ms` (50 ms, as in issue 25's table):

- `direct`: the fake upstream itself (bench/upstream.py), called in the same window as each server;
- `reference`: the 60-line aiohttp proxy (bench/reference_proxy.py), the floor any Python gateway pays;
- `master`: the gateway with the master key on SQLite (no key lookup, limits or billing);
- `key-postgres-redis`: every stage on: an API key with credits, rpm, tpm and a concurrency limit, the
  ledger on PostgreSQL, the limits in Redis, a usage row per request (bench/accounts.py's set-up).

With `--compare SRC` every gateway runs a second time from another checkout's `src/` (`<name>@<dir>`, the
name of SRC's parent directory), so a change is measured A against B in the same run (several `--compare`:
A against B, C...). Servers take turns in short slots (`--duration` seconds
at one rate, open loop, bench/loadgen.py), each slot driving the server and the direct upstream together,
over `--rounds` rounds, the order reversed every other round; each server is pinned alone on core 0 and is
idle while the others are measured. Latencies (write of the request to the last byte) are pooled over the
rounds; `added` is a server's percentile minus the direct upstream's, both pooled over the same slots, and
`beyond floor` is that minus the reference's.

    python bench/latency_low_rate.py                                  # 20 and 100 req/s, 5 rounds
    python bench/latency_low_rate.py --rates 20 --rounds 3 --duration 4   # quicker
    python bench/latency_low_rate.py --compare /path/to/other/checkout/src

Needs PostgreSQL and Redis on 127.0.0.1 (bench/accounts.py's defaults); each run makes its own database
and key prefix and drops them at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import loadgen

import accounts

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]


@dataclass
class Slots:
    """One server's pooled samples at one rate, with the direct upstream's from the same slots."""

    server: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    failed: int = 0
    per_round: list[tuple[float, float]] = field(default_factory=list)  # (p50, p99) added, per round


async def slot(
    server: accounts.Server, direct: str, rate: float, args: argparse.Namespace
) -> tuple[loadgen.RateResult, loadgen.RateResult]:
    """`--duration` seconds of the server at `rate` and of the direct upstream at the same rate, interleaved
    (their schedules offset by half a period)."""
    gw = loadgen.Target.build(server.name, server.url, server.key, "bench-model", stream=False)
    up = loadgen.Target.build("direct", direct, "sk-bench", "bench-model", stream=False)
    return await asyncio.gather(
        loadgen.run_rate(gw, rate, args.duration, args.warmup),
        loadgen.run_rate(up, rate, args.duration, args.warmup, offset=0.5 / rate),
    )


def pct(values: list[float], p: float) -> float:
    return loadgen.percentile(sorted(values), p) * 1000


def run_rounds(servers: list[accounts.Server], direct: str, args: argparse.Namespace) -> dict[str, dict[float, Slots]]:
    out: dict[str, dict[float, Slots]] = {s.name: {r: Slots() for r in args.rates} for s in servers}
    for n in range(args.rounds):
        order = servers if n % 2 == 0 else servers[::-1]
        for rate in args.rates:
            for s in order:
                accounts.wait_quiet(args.quiet_wait)
                gw, up = asyncio.run(slot(s, direct, rate, args))
                got = out[s.name][rate]
                got.server += gw.service
                got.direct += up.service
                got.failed += gw.errors + gw.non_2xx
                if gw.service and up.service:
                    got.per_round.append(
                        (pct(gw.service, 50) - pct(up.service, 50), pct(gw.service, 99) - pct(up.service, 99))
                    )
        print(f"round {n + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return out


def table(results: dict[str, dict[float, Slots]], rates: list[float]) -> str:
    lines = [
        "| server | req/s | n | direct p50 / p99 ms | added p50 / p99 ms | beyond floor p50 / p99 ms "
        "| added p50 per round | failed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rate in rates:
        floor = results.get("reference", {}).get(rate)
        for name, by_rate in results.items():
            s = by_rate[rate]
            if not s.server:
                continue
            d50, d99 = pct(s.direct, 50), pct(s.direct, 99)
            a50, a99 = pct(s.server, 50) - d50, pct(s.server, 99) - d99
            beyond = "-"
            if floor is not None and floor.server and name != "reference":
                f50 = pct(floor.server, 50) - pct(floor.direct, 50)
                f99 = pct(floor.server, 99) - pct(floor.direct, 99)
                beyond = f"{a50 - f50:+.2f} / {a99 - f99:+.2f}"
            each = " ".join(f"{x:+.2f}" for x, _ in s.per_round)
            lines.append(
                f"| {name} | {rate:g} | {len(s.server)} | {d50:.2f} / {d99:.2f} | +{a50:.2f} / +{a99:.2f} "
                f"| {beyond} | {each} | {s.failed} |"
            )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="20,100", help="comma-separated request rates (default 20,100)")
    p.add_argument("--duration", type=float, default=6, help="seconds per server, rate and round")
    p.add_argument("--warmup", type=float, default=1, help="seconds before each slot's samples count")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--latency-ms", type=float, default=50, help="the fake upstream's fixed latency")
    p.add_argument("--only", default="reference,master,key-postgres-redis", help="servers to run")
    p.add_argument(
        "--compare",
        metavar="SRC",
        action="append",
        default=[],
        help="every gateway also from this src/ directory, same rounds, named <name>@<SRC's parent directory>; "
        "may be given several times",
    )
    p.add_argument("--compare-only", metavar="NAMES", help="with --compare: only these gateways a second time")
    p.add_argument("--quiet-wait", type=float, default=5, help="at most this long before each slot for a quiet machine")
    p.add_argument("--json", metavar="PATH", help="also write the raw percentiles here")
    args = p.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    wanted = set(args.only.split(","))
    if uvloop is not None:
        uvloop.install()
    pin = accounts.PIN
    up_port = accounts.free_port()
    script = str(Path(__file__).parent / "upstream.py")
    upstream = subprocess.Popen(
        [*pin.prefix(pin.load), sys.executable, script, "--port", str(up_port), "--latency-ms", str(args.latency_ms)],
        stdout=subprocess.DEVNULL,
    )
    pin.pin_self()
    servers: list[accounts.Server] = []
    created: list[str] = []
    prefix = f"inferplex_bench:{secrets.token_hex(4)}:"
    builds: list[tuple[str, str | None]] = [("", None)] + [
        ("@" + Path(src).resolve().parent.name, src) for src in args.compare
    ]
    try:
        accounts.wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        up = f"http://127.0.0.1:{up_port}/v1"
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            if "reference" in wanted:
                servers.append(accounts.start_reference(up, tmp))
            for suffix, src in builds:
                if suffix and args.compare_only:
                    wanted = set(args.compare_only.split(","))
                if "master" in wanted:
                    sqlite = {"database_url": f"sqlite+aiosqlite:///{tmp / ('master' + suffix)}.db"}
                    cfg = accounts.config(up, tmp, sqlite)
                    servers.append(accounts.start_gateway("master" + suffix, cfg, tmp, False, src))
                if "key-postgres-redis" in wanted:
                    db = "inferplex_bench_" + secrets.token_hex(4)
                    accounts.pg_admin(f'CREATE DATABASE "{db}"')
                    created.append(db)
                    storage = {
                        "database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}",
                        "redis_url": accounts.REDIS_URL,
                        "redis_prefix": prefix + suffix,
                    }
                    cfg = accounts.config(up, tmp, storage)
                    servers.append(accounts.start_gateway("key-postgres-redis" + suffix, cfg, tmp, True, src))
            started = time.strftime("%H:%M:%S", time.gmtime())
            results = run_rounds(servers, up + "/chat/completions", args)
            ended = time.strftime("%H:%M:%S", time.gmtime())
            for s in servers:
                if s.account is not None:
                    time.sleep(0.5)
                    print(f"{s.name}: balance equals ledger sum: {accounts.reconciles(s)}", file=sys.stderr)
            for s in servers:
                s.stop()
    finally:
        accounts.tear_down(servers, upstream, created)
        accounts.drop_redis_prefix(prefix)
    print(f"\n{started} to {ended} UTC, {args.rounds} rounds of {args.duration:g} s per server and rate, "
          f"upstream {args.latency_ms:g} ms, pooled service-time percentiles\n")  # fmt: skip
    print(table(results, args.rates))
    if args.json:
        raw = {
            name: {str(r): {"server_ms": [x * 1000 for x in s.server], "direct_ms": [x * 1000 for x in s.direct]}
                   for r, s in by_rate.items()}
            for name, by_rate in results.items()
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
