"""The response cache: what a hit costs next to a miss and next to the upstream itself (issue 26).

    .venv/bin/python bench/cache.py                     # every scenario, 1 round (~10 min)
    .venv/bin/python bench/cache.py --rounds 3          # medians over 3 rounds
    .venv/bin/python bench/cache.py --only memory-key,redis-key --duration 4 --wrk-s 4

What runs, all on 127.0.0.1: the fake upstream of bench/upstream.py answering after `--latency-ms` (50 ms: a
miss costs what a provider's answer costs), and six gateways (`inferplex serve --workers 1`), each with the
cache on (`default_on`, hits free) over one backend: the in-process `memory`, `sqlite` (a file of its own),
`redis` (its own key prefix, deleted after). Each backend twice: `-key`, every accounts stage on (an API key
with credits, rpm/tpm and a concurrency limit, the ledger and usage rows on PostgreSQL, the limits in Redis),
and `-master`, the master key on SQLite (no key lookup, limits or billing). A second model of each gateway
matches paraphrases (`semantic`, the bundled MiniLM, threshold 0.8).

Before anything is timed, each gateway is checked through HTTP: a repeated request answers `x-inferplex-cache:
hit` (buffered and streamed), a new prompt `miss`, a paraphrase `semantic-hit` with its similarity.

Each round takes every gateway in turn (order reversed every other round) through:
- latency, open loop at `--rate` req/s (bench/loadgen.py), the gateway and the direct upstream driven in the
  same window: a hit (one prompt, stored during the check), a miss (a prompt of its own per request: the
  exact lookup that finds nothing, the upstream, the store), buffered and streamed (a stream's latency is its
  last byte's); a semantic hit at `--semantic-rate` (one paraphrase, embedded on every request: a semantic
  hit is not stored as an exact entry). p50 / p99 from the write of the request to the last byte;
- throughput, `wrk -t1 -c50`: hits buffered and streamed, misses buffered (each request a new prompt:
  bench/lua is not used, the script is written per scenario), and the upstream called directly once a round.

Pinning as in bench/run.py: every gateway alone on core 0 (idle while another is measured), the upstream, wrk
and the load client on core 1, PostgreSQL and Redis where the kernel puts them. The table is printed and
written to `--out` (markdown and the raw JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen
import peers
import run as core_bench

import accounts

HERE = Path(__file__).resolve().parent
PIN = accounts.PIN
BACKENDS = ("memory", "sqlite", "redis")
ALL = [f"{backend}-{auth}" for backend in BACKENDS for auth in ("key", "master")]
HIT = "hi"  # the prompt every hit asks (stored by the check)
STORED = "What is the capital of France?"  # the semantic model's stored prompt
PARAPHRASE = "What's the capital city of France?"  # what each semantic hit asks
LATENCY = ("hit", "miss", "hit-stream", "miss-stream", "semantic")
THROUGHPUT = ("hit", "hit-stream", "miss")


def body(model: str, prompt: str, stream: bool) -> bytes:
    data: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if stream:
        data["stream"] = True
    return json.dumps(data, separators=(",", ":")).encode()


def target(name: str, url: str, key: str, model: str, stream: bool, prompt: str = HIT) -> loadgen.Target:
    """One pre-encoded request, as `loadgen.Target.build` makes it, with this prompt."""
    t = loadgen.Target.build(name, url, key, model, stream)
    head = t.request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    raw = body(model, prompt, stream)
    head = [line for line in head if not line.lower().startswith(b"content-length:")]
    head.append(b"Content-Length: " + str(len(raw)).encode())
    return loadgen.Target(name, t.host, t.port, b"\r\n".join(head) + b"\r\n\r\n" + raw)


class Unique(loadgen.Target):
    """A target whose every request asks a prompt of its own (this run's token and a counter of fixed width,
    so the head's Content-Length holds): a cache miss each time. `loadgen.run_rate` reads `request` once per
    request."""

    def __init__(self, name: str, url: str, key: str, model: str, stream: bool, run: str) -> None:
        base = target(name, url, key, model, stream, f"miss {run} {0:010d}")
        self._marker = f"miss {run} ".encode()
        self._n = 0
        super().__init__(name, base.host, base.port, base.request)

    @property
    def request(self) -> bytes:
        self._n += 1
        at = self._template.index(self._marker) + len(self._marker)
        return self._template[:at] + f"{self._n:010d}".encode() + self._template[at + 10 :]

    @request.setter
    def request(self, value: bytes) -> None:
        self._template = value


def wrk_script(tmp: Path, name: str, key: str, model: str, stream: bool, unique: str | None) -> Path:
    """A wrk script: the same request each time, or (`unique`: this run's token) a new prompt each time."""
    lines = ['wrk.method = "POST"', 'wrk.headers["Content-Type"] = "application/json"',
             f'wrk.headers["Authorization"] = "Bearer {key}"']  # fmt: skip
    if unique is None:
        lines.append(f"wrk.body = {json.dumps(body(model, HIT, stream).decode())}")
    else:
        head, tail = body(model, f"wrk {unique} @@", stream).decode().split("@@")
        made = f"{json.dumps(head)} .. n .. {json.dumps(tail)}"
        lines += ["local n = 0", "request = function()", "  n = n + 1",
                  f"  return wrk.format(nil, nil, nil, {made})", "end"]  # fmt: skip
    path = tmp / f"{name}-{'stream' if stream else 'buffered'}-{'unique' if unique else 'same'}.lua"
    path.write_text("\n".join(lines) + "\n")
    return path


def config(up: str, tmp: Path, name: str, storage: dict[str, Any], prefix: str) -> dict[str, Any]:
    backend = name.split("-")[0]
    cfg = accounts.config(up, tmp, storage)
    semantic = {**cfg["models"][0], "name": "bench-semantic", "cache": {"semantic": True, "threshold": 0.8}}
    cfg["models"].append(semantic)
    cfg["cache"] = {"enabled": True, "backend": backend, "redis_url": accounts.REDIS_URL,
                    "redis_prefix": f"{prefix}cache:{name}:",
                    "sqlite_path": str(tmp / f"{name}.cache.sqlite3")}  # fmt: skip
    return cfg


def start(name: str, up: str, tmp: Path, prefix: str, src: str | None, created: list[str]) -> accounts.Server:
    if name.endswith("-key"):
        db = "inferplex_bench_cache_" + secrets.token_hex(4)
        accounts.pg_admin(f'CREATE DATABASE "{db}"')
        created.append(db)
        storage = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}",
                   "redis_url": accounts.REDIS_URL, "redis_prefix": f"{prefix}{name}:"}  # fmt: skip
    else:
        storage = {"database_url": f"sqlite+aiosqlite:///{tmp / name}.db"}
    return accounts.start_gateway(name, config(up, tmp, name, storage, prefix), tmp, name.endswith("-key"), src)


def check(s: accounts.Server, run: str) -> dict[str, str]:
    """Through HTTP, before anything is timed: a repeat is a hit, a new prompt a miss, a paraphrase a semantic
    hit. Stores the entries the hits are measured on. Returns what each answered (and the similarity)."""
    seen: dict[str, str] = {}
    headers = {"Authorization": f"Bearer {s.key}", "Content-Type": "application/json"}

    def ask(model: str, prompt: str, stream: bool) -> str:
        r = httpx.post(s.url, content=body(model, prompt, stream), headers=headers, timeout=120)
        if r.status_code != 200:
            raise SystemExit(f"{s.name} answered {r.status_code}: {r.text[:300]}")
        status = r.headers.get("x-inferplex-cache", "none")
        similarity = r.headers.get("x-inferplex-cache-similarity")
        return f"{status} {similarity}" if similarity else status

    for stream in (False, True):
        ask("bench-model", HIT, stream)
        seen["hit-stream" if stream else "hit"] = ask("bench-model", HIT, stream)
        seen["miss-stream" if stream else "miss"] = ask("bench-model", f"check {run} {stream}", stream)
    ask("bench-semantic", STORED, False)
    seen["semantic"] = ask("bench-semantic", PARAPHRASE, False)
    core_bench.log(f"{s.name}: {seen}")
    return seen


def latency(s: accounts.Server, direct: str, run: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in LATENCY:
        accounts.wait_quiet(args.quiet_wait)
        stream = kind.endswith("stream")
        model = "bench-semantic" if kind == "semantic" else "bench-model"
        mine: loadgen.Target
        if kind.startswith("miss"):
            mine = Unique("server", s.url, s.key, model, stream, f"{run}-{s.name}-{len(s.rounds)}")
        else:
            mine = target("server", s.url, s.key, model, stream, PARAPHRASE if kind == "semantic" else HIT)
        up = target("direct", direct, "sk-bench", "bench-model", stream)
        rate = args.semantic_rate if kind == "semantic" else args.rate
        r = asyncio.run(loadgen.rate_many([up, mine], rate, args.duration, args.warmup))
        out[kind] = {"server": r["server"], "direct": r["direct"]}
    return out


def throughput(s: accounts.Server, run: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in THROUGHPUT:
        accounts.wait_quiet(args.quiet_wait)
        unique = f"{run}-{s.name}-{len(s.rounds)}" if kind == "miss" else None
        stream = kind.endswith("stream")
        # the warm-up's misses ask prompts of their own too: the measured run's counter starts again at 1
        warm = wrk_script(tmp, s.name, s.key, "bench-model", stream, unique and unique + "-warm")
        peers.wrk(s.url, warm, args.wrk_warmup_s, PIN.load)  # warm-up: connections, caches
        script = wrk_script(tmp, s.name, s.key, "bench-model", stream, unique)
        out[kind] = peers.wrk(s.url, script, args.wrk_s, PIN.load)
    return out


def med(values: list[float]) -> float:
    clean = [v for v in values if v == v]
    return statistics.median(clean) if clean else float("nan")


def tables(servers: list[accounts.Server], direct_wrk: list[dict[str, Any]], args: argparse.Namespace) -> str:
    def pair(rounds: list[dict[str, Any]], kind: str, who: str) -> str:
        p50 = med([r["latency"][kind][who]["service"]["p50_ms"] for r in rounds])
        p99 = med([r["latency"][kind][who]["service"]["p99_ms"] for r in rounds])
        return f"{p50:.2f} / {p99:.2f}"

    lines = [f"Latency, p50 / p99 ms, open loop at {args.rate:g} req/s (semantic at {args.semantic_rate:g}); the "
             "upstream called directly in the same windows:", "",
             "| scenario | hit | miss | direct | hit, streamed | miss, streamed | direct, streamed "
             "| semantic hit | direct (semantic's window) | failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for s in servers:
        failed = sum(
            r["latency"][k]["server"]["errors"] + r["latency"][k]["server"]["non_2xx"]
            for r in s.rounds
            for k in LATENCY
        )
        cells = [s.name, pair(s.rounds, "hit", "server"), pair(s.rounds, "miss", "server"),
                 pair(s.rounds, "hit", "direct"), pair(s.rounds, "hit-stream", "server"),
                 pair(s.rounds, "miss-stream", "server"), pair(s.rounds, "hit-stream", "direct"),
                 pair(s.rounds, "semantic", "server"), pair(s.rounds, "semantic", "direct"), str(failed)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    direct = med([w["rps"] for w in direct_wrk])
    lines += ["", f"Throughput, `wrk -t1 -c50`, requests/s (the upstream called directly: {direct:,.0f} req/s, "
              f"its {args.latency_ms:g} ms bounding 50 connections at {50_000 / args.latency_ms:,.0f}):", "",
              "| scenario | hits | hits, streamed | misses | hits / misses | failed |",
              "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for s in servers:
        rps = {k: med([r["throughput"][k]["rps"] for r in s.rounds]) for k in THROUGHPUT}
        failed = sum(
            r["throughput"][k]["non_2xx"] + r["throughput"][k]["socket_errors"] for r in s.rounds for k in THROUGHPUT
        )
        cells = [s.name, f"{rps['hit']:,.0f}", f"{rps['hit-stream']:,.0f}", f"{rps['miss']:,.0f}",
                 f"{rps['hit'] / rps['miss']:.1f}x" if rps["miss"] else "-", str(failed)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", help=f"comma-separated subset of {','.join(ALL)}")
    p.add_argument("--rate", type=float, default=50, help="req/s of the latency slots")
    p.add_argument("--semantic-rate", type=float, default=10, help="req/s of the semantic hits (an embedding each)")
    p.add_argument("--duration", type=float, default=6, help="seconds timed per latency slot")
    p.add_argument("--warmup", type=float, default=1, help="seconds before each latency slot's samples count")
    p.add_argument("--wrk-s", type=int, default=6, help="seconds per wrk run")
    p.add_argument("--wrk-warmup-s", type=int, default=1)
    p.add_argument("--latency-ms", type=float, default=50, help="the upstream's fixed latency")
    p.add_argument("--quiet-wait", type=float, default=2, help="at most this long before each slot for a quiet machine")
    p.add_argument("--src", help="run the gateways from this src/ directory (another checkout, or a snapshot)")
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args()
    wanted = [n for n in ALL if not args.only or n in args.only.split(",")]
    started, run = datetime.now(UTC), secrets.token_hex(4)
    prefix = f"inferplex_bench:{run}:"
    servers: list[accounts.Server] = []
    created: list[str] = []
    direct_wrk: list[dict[str, Any]] = []
    port = accounts.free_port()
    cmd = [sys.executable, str(HERE / "upstream.py"), "--port", str(port), "--latency-ms", str(args.latency_ms)]
    with tempfile.TemporaryDirectory(prefix="inferplex-cache-bench-") as d:
        tmp = Path(d)
        upstream = peers.popen(cmd, PIN.load, tmp, "upstream")
        try:
            accounts.wait_http(f"http://127.0.0.1:{port}/health", upstream)
            up = f"http://127.0.0.1:{port}/v1"
            for name in wanted:
                core_bench.log(f"starting {name}")
                servers.append(start(name, up, tmp, prefix, args.src, created))
            PIN.pin_self()
            checks = {s.name: check(s, run) for s in servers}
            direct = up + "/chat/completions"
            for n in range(args.rounds):
                core_bench.log(f"round {n + 1} of {args.rounds} (load {core_bench.loadavg()})")
                script = wrk_script(tmp, "direct", "sk-bench", "bench-model", False, None)
                direct_wrk.append(peers.wrk(direct, script, args.wrk_s, PIN.load))
                for s in servers if n % 2 == 0 else servers[::-1]:
                    s.rounds.append({"latency": latency(s, direct, run, args)})
                    s.rounds[-1]["throughput"] = throughput(s, run, tmp, args)
                    hit = s.rounds[-1]["latency"]["hit"]["server"]["service"]["p50_ms"]
                    core_bench.log(
                        f"{s.name}: hit p50 {hit:.2f} ms, {s.rounds[-1]['throughput']['hit']['rps']:.0f} hits/s"
                    )
            time.sleep(1)  # the last settlements land
            reconciled = {s.name: accounts.reconciles(s) for s in servers if s.account is not None}
        finally:
            accounts.tear_down(servers, upstream, created)
            accounts.drop_redis_prefix(prefix)
    text = tables(servers, direct_wrk, args)
    cmd_line = " ".join([".venv/bin/python", "bench/cache.py", *sys.argv[1:]])
    header = (f"`{cmd_line}`, {started:%Y-%m-%d %H:%M} UTC, median of {args.rounds} round(s), load average at the "
              f"end {core_bench.loadavg()}; {PIN.describe()}. Checked before timing: "
              + "; ".join(f"{name} {seen}" for name, seen in checks.items())
              + f". Balance equals ledger sum: {reconciled}.")  # fmt: skip
    print(header + "\n\n" + text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    (out / f"cache-{stamp}.md").write_text(header + "\n\n" + text + "\n")
    raw = {"direct_wrk": direct_wrk, "servers": {s.name: s.rounds for s in servers}, "checks": checks}
    (out / f"cache-{stamp}.json").write_text(json.dumps(raw, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
