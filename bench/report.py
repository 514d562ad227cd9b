"""The benchmark report: the markdown table `bench/run.py` prints and writes, judged against the targets."""

from __future__ import annotations

import os
from typing import Any

TARGETS = {
    "throughput_rps": 4000.0,
    "added_p50_ms": 4.0,
    "added_p99_ms": 8.0,
    "added_ttfb_ms": 2.0,
    "rss_mb": 120.0,
}


def fmt(v: float, unit: str = "", digits: int = 2) -> str:
    if v != v:  # NaN
        return "n/a"
    return f"{v:,.{digits}f}{unit}"


def table(r: dict[str, Any]) -> str:
    rows = ["| metric | target | direct | gateway | difference / ratio | result |", "|---|---|---|---|---|---|"]

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "**MISS**"

    if "throughput" in r:
        d, g = r["throughput"]["direct"], r["throughput"]["gateway"]
        ratio = g["rps"] / d["rps"] if d["rps"] else float("nan")
        rows.append(
            f"| buffered throughput, wrk -c50, req/s | ≥ 4,000 | {fmt(d['rps'], '', 0)} | {fmt(g['rps'], '', 0)} "
            f"(gateway CPU {g['cpu_pct']:.0f}%) | {fmt(ratio, 'x', 2)} of direct | "
            f"{verdict(g['rps'] >= TARGETS['throughput_rps'] and g['non_2xx'] == 0)} |"
        )
        rows.append(
            f"| ↳ gateway CPU per request, µs (→ req/s per fully used core) | - | - | "
            f"{g['cpu_us_per_req']:.0f} (→ {g['rps_per_core']:,.0f}) | | |"
        )
        rows.append(
            f"| ↳ wrk latency p50 / p99 at c50, ms | - | {fmt(d['p50_ms'])} / {fmt(d['p99_ms'])} | "
            f"{fmt(g['p50_ms'])} / {fmt(g['p99_ms'])} | errors: {g['non_2xx']} non-2xx, {g['socket_errors']} socket | |"
        )
    if "stream_throughput" in r:
        d, g = r["stream_throughput"]["direct"], r["stream_throughput"]["gateway"]
        ratio = g["rps"] / d["rps"] if d["rps"] else float("nan")
        rows.append(
            f"| streamed throughput, wrk -c50, streams/s | - | {fmt(d['rps'], '', 0)} | {fmt(g['rps'], '', 0)} "
            f"(gateway CPU {g['cpu_pct']:.0f}%, {g['cpu_us_per_req']:.0f} µs/stream) | "
            f"{fmt(ratio, 'x', 2)} of direct; errors: {g['non_2xx']} non-2xx, {g['socket_errors']} socket | |"
        )
    if "latency" in r:
        lat = r["latency"]
        d, g = lat["direct"]["service"], lat["gateway"]["service"]
        a50, a99 = g["p50_ms"] - d["p50_ms"], g["p99_ms"] - d["p99_ms"]
        rps = lat["direct"]["rps"]
        rows.append(
            f"| latency p50 at {rps:g} req/s, 50 ms upstream, ms | +≤ 4 | {fmt(d['p50_ms'])} | {fmt(g['p50_ms'])} | "
            f"+{fmt(a50)} ms | {verdict(a50 <= TARGETS['added_p50_ms'])} |"
        )
        rows.append(
            f"| latency p99 at {rps:g} req/s, 50 ms upstream, ms | +≤ 8 | {fmt(d['p99_ms'])} | {fmt(g['p99_ms'])} | "
            f"+{fmt(a99)} ms | {verdict(a99 <= TARGETS['added_p99_ms'])} |"
        )
        errs = sum(lat[k]["errors"] + lat[k]["non_2xx"] for k in ("direct", "gateway"))
        lag = max(lat[k]["send_lag"]["p99_ms"] for k in ("direct", "gateway"))
        rows.append(
            f"| ↳ requests timed (direct / gateway), failures | - | {lat['direct']['ok']} | {lat['gateway']['ok']} | "
            f"{errs} failed; sender p99 lag {fmt(lag)} ms | |"
        )
    if "ttfb" in r:
        t = r["ttfb"]
        d, g = t["direct"]["ttfb"], t["gateway"]["ttfb"]
        diff = g["p50_ms"] - d["p50_ms"]
        rows.append(
            f"| stream time to first byte, median, ms | +≤ 2 | {fmt(d['p50_ms'], '', 3)} | {fmt(g['p50_ms'], '', 3)} | "
            f"+{fmt(diff, '', 3)} ms | {verdict(diff <= TARGETS['added_ttfb_ms'])} |"
        )
        rows.append(
            f"| ↳ time to first byte p99, ms | - | {fmt(d['p99_ms'], '', 3)} | {fmt(g['p99_ms'], '', 3)} | "
            f"+{fmt(g['p99_ms'] - d['p99_ms'], '', 3)} ms | |"
        )
        dt, gt = t["direct"]["total"], t["gateway"]["total"]
        rows.append(
            f"| ↳ whole stream, median, ms | - | {fmt(dt['p50_ms'], '', 3)} | {fmt(gt['p50_ms'], '', 3)} | "
            f"+{fmt(gt['p50_ms'] - dt['p50_ms'], '', 3)} ms | |"
        )
    if "memory" in r:
        m = r["memory"]
        procs = f", {m['processes']:.0f} processes" if m["processes"] > 1 else ""
        rows.append(
            f"| gateway resident memory after the runs, MB | ≤ 120 | - | {m['VmRSS']:.1f} (peak {m['VmHWM']:.1f}"
            f"{procs}) | "
            f"| {verdict(m['VmRSS'] <= TARGETS['rss_mb'])} |"
        )
    return "\n".join(rows)


def busy_note(r: dict[str, Any]) -> list[str]:
    """A warning when other processes competed for the cores: the gateway, saturated by wrk, got well under
    its whole core (or, without a throughput phase, the load average was high before this run started)."""
    cores = os.cpu_count() or 1
    before = float(r["loadavg_before"].split()[0])
    share = r.get("throughput", {}).get("gateway", {}).get("cpu_pct")
    if (share is not None and share >= 90) or (share is None and before < 0.5 * cores):
        return []
    got = f"the gateway had {share:.0f}% of its core under full load; " if share is not None else ""
    return [
        f"**Busy machine**: {got}load average {before:.1f} on {cores} cores before the run. Throughput and "
        "tail latency are pessimistic; CPU µs per request is the figure least affected."
    ]


def report(r: dict[str, Any]) -> str:
    lines = [
        f"Run {r['started']} → {r['finished']} UTC, {r['host']}; load average (1/5/15 min) before "
        f"{r['loadavg_before']}, after {r['loadavg_after']}.",
        f"Gateway: {r['server']} ({r['gateway_cmd']}); source {r['source']}. Pinning: {r['pinning']}.",
        f"Command: `{r['command']}`",
        *([f"Garbage collector over the whole run: {r['gc'].removeprefix('gc: ')}"] if "gc" in r else []),
        *busy_note(r),
        "",
        table(r),
    ]
    return "\n".join(lines)
