"""The one-hour soak: does the gateway stay flat (memory, file descriptors, connections) at a steady rate?

A leak shows only over time: a few kilobytes per request are invisible in a 20 s benchmark and fatal in a
week. So this runs the gateway the way a real deployment does, with every stage on (an API key with
credits, rpm/tpm and a concurrency limit; PostgreSQL for keys, ledger and usage rows; Redis for the limits;
the usage log), in front of the fake upstream (bench/upstream.py, a fixed latency and paced stream chunks),
and drives it open loop (bench/loadgen.py) at a steady rate, a mix of buffered and streamed calls, for
`--minutes`. Once a minute, half-way through that minute's load, it samples the gateway's process tree:

- resident memory (VmRSS, and the peak VmHWM), summed over the tree (a supervisor and its workers);
- open file descriptors;
- TCP sockets by peer: callers (the gateway's port), the upstream, PostgreSQL, Redis;
- CPU used in the minute, the keys under the run's Redis prefix, and the minute's calls: sent, ok, non-2xx,
  errors, p50/p99 of buffered calls and of whole streams.

Every minute's row is appended to `soak.csv` and the plot `soak.svg` (RSS, descriptors, connections against
time) is redrawn, so a run stopped early still leaves its evidence. At the end it checks that the key's
balance equals its ledger sum and that every successful call left a usage row, prints a summary (memory
slope in MB/hour after the warm-up minutes, ranges of descriptors and connections) and writes
`summary.json`. The PostgreSQL database and Redis keys it created are removed afterwards.

    .venv/bin/python bench/soak.py --minutes 60 --out /tmp/soak/run1      # the real run
    .venv/bin/python bench/soak.py --minutes 2 --rps 20 --out /tmp/soak/try  # a check that it works
    .venv/bin/python bench/soak.py --plot /tmp/soak/run1/soak.csv --svg docs/img/soak.svg  # redraw only

Nothing is pinned to a core: memory and descriptors do not depend on it, and latencies in the CSV are the
shared machine's (read them for stalls, not for speed: bench/run.py and bench/peers.py measure speed).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import loadgen
import run as core_bench

import accounts

PG_PORT, REDIS_PORT = 5432, 6379
FIELDS = [
    "minute", "utc", "elapsed_s", "rss_mb", "hwm_mb", "processes", "fds", "tcp", "tcp_clients", "tcp_upstream",
    "tcp_postgres", "tcp_redis", "cpu_pct", "redis_keys", "sent", "ok", "non_2xx", "errors",
    "buffered_p50_ms", "buffered_p99_ms", "stream_p50_ms", "stream_p99_ms", "load1",
]  # fmt: skip


def socket_inodes(pids: list[int]) -> tuple[int, set[int]]:
    """The number of open descriptors of these processes, and the inodes of those that are sockets."""
    count, inodes = 0, set()
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            count += 1
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return count, inodes


def tcp_peers(inodes: set[int], own_port: int) -> list[tuple[int, int]]:
    """(local port, remote port) of every TCP socket among `inodes` that is connected (not a listener)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[9]) not in inodes or f[3] == "0A":  # 0A: LISTEN
                continue
            out.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)))
    return out


def sample(pid: int, port: int, upstream_port: int) -> dict[str, Any]:
    """The gateway's tree, now: memory, descriptors, TCP sockets by peer."""
    pids = core_bench.process_tree(pid)
    mem = core_bench.memory(pid)
    fds, inodes = socket_inodes(pids)
    peers = tcp_peers(inodes, port)
    return {
        "rss_mb": round(mem["VmRSS"], 1),
        "hwm_mb": round(mem["VmHWM"], 1),
        "processes": int(mem["processes"]),
        "fds": fds,
        "tcp": len(peers),
        "tcp_clients": sum(1 for local, _ in peers if local == port),
        "tcp_upstream": sum(1 for _, remote in peers if remote == upstream_port),
        "tcp_postgres": sum(1 for _, remote in peers if remote == PG_PORT),
        "tcp_redis": sum(1 for _, remote in peers if remote == REDIS_PORT),
    }


def redis_keys(prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(accounts.REDIS_URL)
    try:
        return sum(1 for _ in client.scan_iter(prefix + "*", count=1000))
    finally:
        client.close()


def source_env(src: str | None) -> dict[str, str]:
    """The environment that runs the gateway from `src` (a `src/` directory) instead of this checkout's."""
    env = {**os.environ, "INFERPLEX_BENCH_MASTER": accounts.MASTER, "INFERPLEX_BENCH_UP": "sk-bench"}
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    return env


def start_gateway(
    cfg: dict[str, Any], out: Path, workers: int | None, src: str | None
) -> tuple[subprocess.Popen[bytes], int]:
    """`inferplex serve` with the soak's config, its output to `gateway.log` in the output directory."""
    path = out / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = accounts.free_port()
    env = source_env(src)
    cmd = [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    with open(out / "gateway.log", "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, port


def has_workers_option(src: str | None = None) -> bool:
    """Whether this checkout's `inferplex serve` takes `--workers` (it came with issue 25)."""
    cmd = [sys.executable, "-m", "inferplex", "serve", "--help"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, env=source_env(src))
    return "--workers" in done.stdout


def create_key(base: str) -> tuple[str, str]:
    """A key with every accounts stage on, its limits high enough never to refuse the soak's calls."""
    body = {"name": "soak", "credits_micros": 10**12, "rpm": 10**6, "tpm": 10**9, "max_concurrent": 10_000}
    r = httpx.post(base + "/admin/keys", json=body, headers={"Authorization": f"Bearer {accounts.MASTER}"})
    r.raise_for_status()
    return r.json()["key"], r.json()["account_id"]


async def one_minute(
    targets: tuple[loadgen.Target, loadgen.Target], rates: tuple[float, float], seconds: float, probe: Any
) -> tuple[loadgen.RateResult, loadgen.RateResult, dict[str, Any]]:
    """A minute of open-loop load on both targets, with `probe()` run half-way through it."""

    async def probe_later() -> dict[str, Any]:
        await asyncio.sleep(seconds / 2)
        return dict(await asyncio.to_thread(probe))

    step = 0.5 / max(sum(rates), 1)
    buffered, streamed, sampled = await asyncio.gather(
        loadgen.run_rate(targets[0], rates[0], seconds, 0.0),
        loadgen.run_rate(targets[1], rates[1], seconds, 0.0, offset=step),
        probe_later(),
    )
    return buffered, streamed, sampled


def row_of(n: int, started: float, cpu: float, res: tuple[loadgen.RateResult, loadgen.RateResult]) -> dict[str, Any]:
    buffered, streamed = (loadgen.summary(r.service) for r in res)
    return {
        "minute": n,
        "utc": datetime.now(UTC).strftime("%H:%M:%S"),
        "elapsed_s": round(time.monotonic() - started),
        "cpu_pct": round(cpu, 1),
        "sent": sum(r.sent for r in res),
        "ok": sum(len(r.latencies) for r in res),
        "non_2xx": sum(r.non_2xx for r in res),
        "errors": sum(r.errors for r in res),
        "buffered_p50_ms": round(buffered["p50_ms"], 2),
        "buffered_p99_ms": round(buffered["p99_ms"], 2),
        "stream_p50_ms": round(streamed["p50_ms"], 2),
        "stream_p99_ms": round(streamed["p99_ms"], 2),
        "load1": core_bench.loadavg().split()[0],
    }


def slope_per_hour(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (minutes), per hour."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def summarize(rows: list[dict[str, Any]], warmup_min: int) -> dict[str, Any]:
    """What the run shows: memory after the warm-up minutes and its trend, descriptor and socket ranges."""
    if not rows:
        return {"minutes": 0}
    steady = [r for r in rows if int(r["minute"]) > warmup_min] or rows
    rss = [float(r["rss_mb"]) for r in steady]

    def span(name: str) -> list[int]:
        return [min(int(r[name]) for r in steady), max(int(r[name]) for r in steady)]

    return {
        "minutes": len(rows),
        "warmup_minutes": warmup_min,
        "rss_mb_first": float(rows[0]["rss_mb"]),
        "rss_mb_after_warmup": rss[0],
        "rss_mb_last": rss[-1],
        "rss_mb_max": max(rss),
        "rss_slope_mb_per_hour": round(slope_per_hour([float(r["minute"]) for r in steady], rss), 2),
        # the trend of the last ten minutes alone: memory that grows and then levels off (a collector or a
        # cache reaching its bound) shows here as ~0 while the whole run's slope is not
        "rss_slope_last_10_min_mb_per_hour": round(
            slope_per_hour([float(r["minute"]) for r in steady[-10:]], rss[-10:]), 2
        ),
        "fds": span("fds"),
        "tcp": span("tcp"),
        "tcp_postgres": span("tcp_postgres"),
        "tcp_redis": span("tcp_redis"),
        "tcp_upstream": span("tcp_upstream"),
        "redis_keys": span("redis_keys"),
        "sent": sum(int(r["sent"]) for r in rows),
        "ok": sum(int(r["ok"]) for r in rows),
        "non_2xx": sum(int(r["non_2xx"]) for r in rows),
        "errors": sum(int(r["errors"]) for r in rows),
        "worst_minute_buffered_p99_ms": max(float(r["buffered_p99_ms"]) for r in rows),
        "worst_minute_stream_p99_ms": max(float(r["stream_p99_ms"]) for r in rows),
    }


# --- the plot: three panels against minutes, plain SVG (no plotting library, nothing fetched) ------------

PANELS = [
    ("Resident memory (MB, VmRSS)", ["rss_mb"]),
    ("Open file descriptors", ["fds"]),
    ("TCP connections (callers, upstream, PostgreSQL, Redis)", ["tcp_clients", "tcp_upstream", "tcp_postgres",
                                                               "tcp_redis"]),
]  # fmt: skip
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def nice_max(v: float) -> float:
    """A round axis top above v (1, 2, 2.5 or 5 times a power of ten)."""
    if v <= 0:
        return 1.0
    power = 10.0 ** (len(str(int(v))) - 1)
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= v * 1.1:
            return m * power
    return 10 * power


def svg_plot(rows: list[dict[str, Any]], title: str, minutes: float | None = None) -> str:
    """The plot, x from 0 to `minutes` (the run's planned length, so a run in progress shows where it is)."""
    width, panel_h, left, right, top = 760, 170, 60, 20, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + len(PANELS) * (panel_h + 40)}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="20" font-size="13" font-weight="bold">{title}</text>',
    ]
    xs = [float(r["minute"]) for r in rows] or [0.0]
    span = max([*xs, minutes or 0.0, 1.0])
    xstep = next((step for step in (1, 2, 5, 10, 20, 30, 60, 120, 300) if span / step <= 8), 600)
    xmax = xstep * -(-span // xstep)  # the span rounded up to a whole step
    inner_w = width - left - right
    for i, (label, names) in enumerate(PANELS):
        y0 = top + i * (panel_h + 40) + 10
        ymax = nice_max(max((float(r[n]) for r in rows for n in names), default=1.0))
        out.append(f'<text x="{left}" y="{y0 - 4}" font-weight="bold">{label}</text>')
        out.append(f'<rect x="{left}" y="{y0}" width="{inner_w}" height="{panel_h}" fill="none" stroke="#999"/>')
        for k in range(5):  # horizontal grid and y labels
            y = y0 + panel_h - k * panel_h / 4
            out.append(f'<line x1="{left}" x2="{left + inner_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{ymax * k / 4:g}</text>')
        for k in range(int(xmax // xstep) + 1):  # x labels (minutes)
            x = left + k * xstep / xmax * inner_w
            out.append(f'<text x="{x:.1f}" y="{y0 + panel_h + 14}" text-anchor="middle">{k * xstep}</text>')
        for j, name in enumerate(names):
            pts = " ".join(
                f"{left + float(r['minute']) / xmax * inner_w:.1f},{y0 + panel_h - float(r[name]) / ymax * panel_h:.1f}"
                for r in rows
            )
            out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[j]}" stroke-width="1.5"/>')
            if len(names) > 1:
                lx = left + 8 + j * 110
                out.append(f'<rect x="{lx}" y="{y0 + 6}" width="10" height="3" fill="{COLORS[j]}"/>')
                out.append(f'<text x="{lx + 14}" y="{y0 + 11}">{name.removeprefix("tcp_")}</text>')
    out.append(f'<text x="{left + inner_w / 2}" y="{top + len(PANELS) * (panel_h + 40) - 8}" '
               'text-anchor="middle">minutes</text>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out) + "\n"


def read_csv(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def title_of(args: argparse.Namespace) -> str:
    what = "master key" if args.master_key else "every stage on"
    return (
        f"Inferplex soak, {what}: {args.rps:g} req/s ({args.stream_share:.0%} streamed), "
        f"{args.minutes} min, {datetime.now(UTC):%Y-%m-%d}"
    )


def soak(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Start everything, run the minutes, check the books, clean up."""
    up_port = accounts.free_port()
    up_cmd = [sys.executable, str(Path(__file__).parent / "upstream.py"), "--port", str(up_port),
              "--latency-ms", str(args.latency_ms), "--chunk-interval-ms", str(args.chunk_interval_ms)]  # fmt: skip
    upstream = subprocess.Popen(up_cmd, stdout=subprocess.DEVNULL)
    prefix = f"inferplex_soak:{secrets.token_hex(4)}:"
    db = "inferplex_soak_" + secrets.token_hex(4)
    gateway: subprocess.Popen[bytes] | None = None
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "args": vars(args)}
    try:
        accounts.wait_http(f"http://127.0.0.1:{up_port}/health", upstream)
        accounts.pg_admin(f'CREATE DATABASE "{db}"')
        storage: dict[str, Any] = {
            "database_url": f"postgresql+asyncpg://postgres@127.0.0.1:{PG_PORT}/{db}",
            "redis_url": accounts.REDIS_URL,
            "redis_prefix": prefix,
        }
        if args.master_key:  # the core alone: SQLite in the output directory, no Redis, no key
            storage = {"database_url": f"sqlite+aiosqlite:///{out / 'soak.db'}"}
        with tempfile.TemporaryDirectory() as d:
            cfg = accounts.config(f"http://127.0.0.1:{up_port}/v1", Path(d), storage)
            workers = args.workers if has_workers_option(args.src) else None
            gateway, port = start_gateway(cfg, out, workers, args.src)
            base = f"http://127.0.0.1:{port}"
            accounts.wait_http(base + "/health", gateway)
            key, account = (accounts.MASTER, None) if args.master_key else create_key(base)
            result.update(workers=workers or "1 (no --workers option)", gateway_pid=gateway.pid)
            url = base + "/v1/chat/completions"
            targets = (
                loadgen.Target.build("buffered", url, key, "bench-model", stream=False),
                loadgen.Target.build("stream", url, key, "bench-model", stream=True),
            )
            rates = (args.rps * (1 - args.stream_share), args.rps * args.stream_share)
            started, csv_path = time.monotonic(), out / "soak.csv"
            with open(csv_path, "w", newline="") as f:
                csv.DictWriter(f, FIELDS).writeheader()
            print(f"soak: gateway pid {gateway.pid} on {base}; writing {csv_path}", flush=True)
            for n in range(1, args.minutes + 1):
                if gateway.poll() is not None:
                    raise SystemExit(f"the gateway exited (code {gateway.returncode}); see {out / 'gateway.log'}")
                cpu0, t0 = core_bench.cpu_seconds(gateway.pid), time.monotonic()

                def probe(pid: int = gateway.pid, port: int = port) -> dict[str, Any]:
                    return {**sample(pid, port, up_port), "redis_keys": redis_keys(prefix)}

                res = asyncio.run(one_minute(targets, rates, args.minute_s, probe))
                cpu = 100 * (core_bench.cpu_seconds(gateway.pid) - cpu0) / (time.monotonic() - t0)
                row = {**row_of(n, started, cpu, res[:2]), **res[2]}
                rows.append(row)
                with open(csv_path, "a", newline="") as f:
                    csv.DictWriter(f, FIELDS).writerow(row)
                (out / "soak.svg").write_text(svg_plot(rows, title_of(args), args.minutes))
                print(
                    f"[{row['utc']}] minute {n}: RSS {row['rss_mb']} MB, fds {row['fds']}, tcp {row['tcp']} "
                    f"(pg {row['tcp_postgres']}, redis {row['tcp_redis']}), ok {row['ok']}/{row['sent']}, "
                    f"errors {row['errors']}, non-2xx {row['non_2xx']}, p99 {row['buffered_p99_ms']} ms",
                    flush=True,
                )
            time.sleep(2)  # settlements and usage rows are written in the background; let the last ones land
            admin = {"Authorization": f"Bearer {accounts.MASTER}"}
            totals = httpx.get(base + "/admin/usage/totals", params={"by": "model"}, headers=admin, timeout=60)
            result["usage_rows"] = sum(g["requests"] for g in totals.json()["data"])
            if account is not None:
                result["reconciles"] = accounts.reconciles(accounts.Server("soak", gateway, base, key, account))
    finally:
        if gateway is not None and gateway.poll() is None:
            gateway.terminate()
            try:
                gateway.wait(30)
            except subprocess.TimeoutExpired:
                gateway.kill()
                gateway.wait(10)
        upstream.terminate()
        upstream.wait(15)
        accounts.pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        accounts.drop_redis_prefix(prefix)
    result.update(summarize(rows, args.warmup_minutes))
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=int, default=60)
    p.add_argument("--rps", type=float, default=50, help="total calls per second, open loop")
    p.add_argument("--stream-share", type=float, default=0.2, help="share of the calls that are streamed")
    p.add_argument("--latency-ms", type=float, default=20, help="the fake upstream's delay before answering")
    p.add_argument("--chunk-interval-ms", type=float, default=5, help="the fake upstream's delay between chunks")
    p.add_argument("--workers", type=int, default=1, help="--workers for `inferplex serve`, when it has it")
    p.add_argument(
        "--master-key",
        action="store_true",
        help="the master key on SQLite instead of every stage on: tells the core's share of any growth from the "
        "PostgreSQL, Redis and accounts stages",
    )
    p.add_argument("--warmup-minutes", type=int, default=5, help="minutes left out of the memory trend")
    p.add_argument("--max-slope", type=float, default=5, help="MB/hour of memory growth still called flat (exit 0)")
    p.add_argument("--minute-s", type=float, default=60, help=argparse.SUPPRESS)  # shorter "minutes" to test
    p.add_argument(
        "--src",
        help="run the gateway from this src/ directory (e.g. `git archive HEAD src | tar -x -C DIR`: a snapshot "
        "that other work in the checkout cannot change during the hour)",
    )
    p.add_argument("--out", default=f"/tmp/soak/{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
    p.add_argument("--plot", metavar="CSV", help="only redraw the plot of an earlier run's CSV")
    p.add_argument("--svg", help="where --plot writes (default: next to the CSV)")
    args = p.parse_args()
    if args.plot:
        csv_path = Path(args.plot)
        rows = read_csv(csv_path)
        svg = Path(args.svg) if args.svg else csv_path.with_suffix(".svg")
        summary = csv_path.parent / "summary.json"
        day = ", " + json.loads(summary.read_text())["started"][:10] if summary.exists() else ""
        title = f"Inferplex soak, every stage on: {len(rows)} minutes{day}"
        svg.write_text(svg_plot(rows, title))
        print(json.dumps(summarize(rows, args.warmup_minutes), indent=2))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the venv has it (uvicorn[standard])
        pass
    else:
        uvloop.install()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped soak still cleans up (finally blocks)
    result = soak(args, out)
    (out / "summary.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    flat = result.get("rss_slope_mb_per_hour", 0) < args.max_slope and result.get("reconciles", True) is True
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
