"""Inferplex against its peers and the floor, side by side in one run: the table of issue 25, regenerated.

    .venv/bin/python bench/peers.py --quick              # a check that everything starts and answers (~4 min)
    .venv/bin/python bench/peers.py --rounds 2           # the table (on a quiet machine, ~25 min)
    .venv/bin/python bench/peers.py --only floor,inferplex-master --quick   # a subset

What runs, all on 127.0.0.1, all at once (each server idles while another is measured):
- two fake upstreams (bench/upstream.py): 0 ms (throughput, streams/s) and 50 ms (latency, first byte);
- the aiohttp floor (bench/reference_proxy.py), one process, and two processes sharing the port (SO_REUSEPORT);
- Inferplex with the master key (SQLite, nothing else); Inferplex with every stage on (an API key with
  credits, rpm/tpm and a concurrency limit, PostgreSQL, Redis, the usage log); the latter with `--workers 2`
  when this checkout's `inferplex serve` has the option;
- LiteLLM's proxy (1 worker, no database, a master key only: its lightest set-up) and Portkey's gateway (Node.js),
  installed by bench/peers_install.py (pinned versions, their own environments under bench/.peers/).

Each round takes every server in turn (order reversed every other round, so none always follows the same
one) through: `wrk -t1 -c50` buffered (req/s) and streamed (streams/s) against the 0 ms upstream; the open-loop
client of bench/loadgen.py at 20, 100 and 400 req/s against the 50 ms upstream, the upstream called directly
in the same window (added latency = the server's minus the direct one's, p50 and p99); ten streams at once,
each a sequential loop, the time to the first `data:` byte (added = minus the direct upstream's, measured in
the same round). After the rounds, each server's resident memory (VmRSS summed over its processes). The table
shows the median over rounds, and each throughput's ratio to the floor with as many processes.

Pinning, as in bench/run.py: a one-process server alone on core 0, the upstreams, wrk and the load client on
core 1. A two-process server (the floor x2, `--workers 2`) gets both cores and shares them with the load,
which is what using the whole machine means. A rate the server cannot keep up with is shown as saturated
(fewer than 90% answered within the run, or errors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen
import peers_install
import run as core_bench
import soak

import accounts

HERE = Path(__file__).resolve().parent
UP_KEY = "sk-bench-upstream"
PIN = accounts.PIN
RATES = (20.0, 100.0, 400.0)
SRC: str | None = None  # --src: the gateway's src/ directory, when not this checkout's
ALL = [
    "floor",
    "floor-x2",
    "inferplex-master",
    "inferplex-every-stage",
    "inferplex-every-stage-w2",
    "portkey",
    "litellm",
]


@dataclass
class Server:
    """A server under test: how to call it (URL, key, extra headers, the model names of both upstreams)."""

    name: str
    label: str
    procs: list[subprocess.Popen[bytes]]
    url: str
    key: str | None
    models: tuple[str, str]  # (0 ms upstream, 50 ms upstream)
    headers: tuple[dict[str, str], dict[str, str]] = ({}, {})  # extra headers per upstream (Portkey's)
    processes: int = 1
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def target(self, slow: bool, stream: bool) -> loadgen.Target:
        t = loadgen.Target.build(self.name, self.url, self.key, self.models[slow], stream)
        return with_headers(t, self.headers[slow])

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def with_headers(t: loadgen.Target, headers: dict[str, str]) -> loadgen.Target:
    """The same pre-encoded request with more headers (loadgen only writes Authorization)."""
    if not headers:
        return t
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
    head, _, body = t.request.partition(b"\r\n\r\n")
    return loadgen.Target(t.name, t.host, t.port, head + b"\r\n" + extra + b"\r\n" + body)


# --- wrk with any headers: a Lua script written per server -------------------------------------------------


def wrk_script(tmp: Path, s: Server, stream: bool) -> Path:
    headers = {"Content-Type": "application/json", **s.headers[0]}
    if s.key:
        headers["Authorization"] = f"Bearer {s.key}"
    body: dict[str, Any] = {"model": s.models[0], "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body, separators=(',', ':')))}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    path = tmp / f"{s.name}-{'stream' if stream else 'buffered'}.lua"
    path.write_text("\n".join(lines) + "\n")
    return path


def wrk(url: str, script: Path, seconds: int, core: str | None) -> dict[str, Any]:
    """`wrk -t1 -c50`: requests/s, and how many answers were not 2xx or failed."""
    cmd = [*PIN.prefix(core), "wrk", "-t1", "-c50", f"-d{seconds}s", "--timeout", "5s", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30, check=False).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    err = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": float(m.group(1)) if m else float("nan"),
        "non_2xx": int(bad.group(1)) if bad else 0,
        "socket_errors": sum(int(x) for x in err.groups()) if err else 0,
    }


# --- first byte with ten streams at once ------------------------------------------------------------------


async def first_bytes(t: loadgen.Target, concurrency: int, seconds: float) -> dict[str, Any]:
    """`concurrency` loops, each streaming one request after another on its own connection, for `seconds`:
    the time from each request's write to the first `data:` byte (after one unrecorded request per loop)."""
    times: list[float] = []
    bad = 0

    async def loop() -> None:
        nonlocal bad
        conn = await loadgen.connect(t)
        try:
            await asyncio.wait_for(conn.request(t.request), 10)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                status = await asyncio.wait_for(conn.request(t.request), 10)
                if status == 200 and conn.first_data:
                    times.append(conn.first_data - sent)
                else:
                    bad += 1
        except (OSError, TimeoutError):
            bad += 1
        finally:
            if conn.transport is not None:
                conn.transport.close()

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return {**loadgen.summary(times), "bad": bad}


# --- starting each server -------------------------------------------------------------------------------


def popen(cmd: list[str], core: str | None, logdir: Path, name: str, **kw: Any) -> subprocess.Popen[bytes]:
    with open(logdir / f"{name}.log", "ab") as log:
        return subprocess.Popen([*PIN.prefix(core), *cmd], stdout=log, stderr=subprocess.STDOUT, **kw)


def ready(url: str, procs: list[subprocess.Popen[bytes]], name: str, logdir: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            tail = (logdir / f"{name}.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{name} exited during start-up:\n{tail}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{name}: {url} did not answer within {timeout:.0f} s")


def check(s: Server) -> None:
    """Both upstreams answer through the server, buffered and streamed, before anything is timed."""
    for slow in (False, True):
        for stream in (False, True):
            body: dict[str, Any] = {"model": s.models[slow], "messages": [{"role": "user", "content": "hi"}]}
            if stream:
                body["stream"] = True
            headers = {**s.headers[slow], **({"Authorization": f"Bearer {s.key}"} if s.key else {})}
            r = httpx.post(s.url, json=body, headers=headers, timeout=30)
            if r.status_code != 200 or (stream and b"data:" not in r.content):
                raise SystemExit(f"{s.name} answered {r.status_code}: {r.text[:300]}")


def start_floor(name: str, processes: int, fast: str, slow: str, tmp: Path) -> Server:
    """bench/reference_proxy.py: one process, or `processes` sharing the port with SO_REUSEPORT."""
    cfg = tmp / "floor.yaml"
    cfg.write_text(f'base_url: "{fast}"\nbase_url: "{slow}"\n')
    port, key = accounts.free_port(), "ipx-bench-floor"
    env = {**os.environ, "BENCH_CONFIG": str(cfg), "BENCH_KEY": key, "BENCH_UPSTREAM_KEY": UP_KEY}
    core = PIN.gateway if processes == 1 else None
    cmd = [sys.executable, str(Path(__file__)), "--serve-floor", str(port)]
    procs = [popen(cmd, core, tmp, name, env=env) for _ in range(processes)]
    s = Server(name, f"aiohttp floor{f', {processes} processes' if processes > 1 else ''}", procs,
               f"http://127.0.0.1:{port}/v1/chat/completions", key, ("bench-model", "bench-model-50ms"),
               processes=processes)  # fmt: skip
    ready(f"http://127.0.0.1:{port}/health", procs, name, tmp)
    return s


def serve_floor(port: int) -> None:
    """One process of the floor, bound with SO_REUSEPORT so that several can share the port."""
    import reference_proxy
    import uvloop
    from aiohttp import web

    uvloop.install()
    app = reference_proxy.make_app()
    web.run_app(app, host="127.0.0.1", port=port, reuse_port=True, access_log=None, print=None)


def inferplex_config(fast: str, slow: str, tmp: Path, storage: dict[str, Any]) -> dict[str, Any]:
    cfg = accounts.config(fast, tmp, storage)
    cfg["providers"].append({**cfg["providers"][0], "name": "up50", "base_url": slow})
    cfg["models"].append({**cfg["models"][0], "name": "bench-model-50ms",
                          "deployments": [{"provider": "up50", "model": "bench-model"}]})  # fmt: skip
    return cfg


def start_inferplex(name: str, label: str, cfg: dict[str, Any], tmp: Path, workers: int | None, key: bool) -> Server:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = accounts.free_port()
    env = {**soak.source_env(SRC), "INFERPLEX_BENCH_UP": UP_KEY}
    cmd = [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    core = PIN.gateway if (workers or 1) == 1 else None
    proc = popen(cmd, core, tmp, name, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    s = Server(name, label, [proc], base + "/v1/chat/completions", accounts.MASTER,
               ("bench-model", "bench-model-50ms"), processes=workers or 1)  # fmt: skip
    try:
        ready(base + "/health", [proc], name, tmp)
        if key:
            s.key = soak.create_key(base)[0]
    except BaseException:
        s.stop()
        raise
    return s


def start_litellm(fast: str, slow: str, tmp: Path) -> Server:
    """LiteLLM's proxy, one worker, no database: a master key only (it refuses to start without one), so the key
    check is a comparison, its lightest set-up."""
    models = [
        {"model_name": name, "litellm_params": {"model": "openai/upstream-model", "api_base": base, "api_key": UP_KEY}}
        for name, base in (("bench-model", fast), ("bench-model-50ms", slow))
    ]
    cfg = tmp / "litellm.yaml"
    key = "sk-bench-litellm-" + secrets.token_hex(8)
    settings = {"model_list": models, "litellm_settings": {"telemetry": False}, "general_settings": {"master_key": key}}
    cfg.write_text(yaml.safe_dump(settings))
    port = accounts.free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "TELEMETRY": "False"}
    cmd = [str(peers_install.litellm_bin()), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
           "--num_workers", "1"]  # fmt: skip
    proc = popen(cmd, PIN.gateway, tmp, "litellm", env=env, start_new_session=True)
    s = Server("litellm", f"LiteLLM {peers_install.LITELLM}, 1 worker", [proc],
               f"http://127.0.0.1:{port}/v1/chat/completions", key, ("bench-model", "bench-model-50ms"))  # fmt: skip
    ready(f"http://127.0.0.1:{port}/health/liveliness", [proc], "litellm", tmp, timeout=240)
    return s


def start_portkey(fast: str, slow: str, tmp: Path) -> Server:
    """Portkey's gateway; the upstream is named per request in headers (provider openai, a custom host)."""
    port = accounts.free_port()
    cmd = ["node", str(peers_install.portkey_server()), f"--port={port}", "--headless"]
    proc = popen(cmd, PIN.gateway, tmp, "portkey", env={**os.environ, "NODE_ENV": "production"})
    headers = tuple({"x-portkey-provider": "openai", "x-portkey-custom-host": base} for base in (fast, slow))
    s = Server("portkey", f"Portkey {peers_install.PORTKEY}", [proc], f"http://127.0.0.1:{port}/v1/chat/completions",
               UP_KEY, ("upstream-model", "upstream-model"), (headers[0], headers[1]))  # fmt: skip
    ready(f"http://127.0.0.1:{port}/", [proc], "portkey", tmp)
    return s


# --- one round ------------------------------------------------------------------------------------------


def measure(s: Server, direct: dict[str, Any], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One round of every column for one server."""
    core = PIN.load if s.processes == 1 else None
    out: dict[str, Any] = {}
    accounts.wait_quiet(5)
    for kind, stream in (("rps", False), ("streams", True)):
        script = wrk_script(tmp, s, stream)
        wrk(s.url, script, args.wrk_warmup_s, core)  # warm-up: connections, caches, lazy imports
        out[kind] = wrk(s.url, script, args.wrk_s, core)
    for rate in RATES:
        accounts.wait_quiet(5)
        mine = s.target(slow=True, stream=False)
        targets = [direct["slow"], loadgen.Target("server", mine.host, mine.port, mine.request)]
        r = asyncio.run(loadgen.rate_many(targets, rate, args.rate_s, args.warmup_s))
        expected = rate * args.rate_s
        saturated = r["server"]["ok"] < 0.9 * expected or r["server"]["errors"] > 0
        out[f"at{rate:g}"] = {
            "added_p50_ms": r["server"]["service"]["p50_ms"] - r["direct"]["service"]["p50_ms"],
            "added_p99_ms": r["server"]["service"]["p99_ms"] - r["direct"]["service"]["p99_ms"],
            "ok": r["server"]["ok"], "errors": r["server"]["errors"], "non_2xx": r["server"]["non_2xx"],
            "achieved_rps": r["server"]["ok"] / args.rate_s, "saturated": saturated,
        }  # fmt: skip
    fb = asyncio.run(first_bytes(s.target(slow=True, stream=True), 10, args.ttfb_s))
    out["first_byte"] = {"p50_ms": fb["p50_ms"], "added_p50_ms": fb["p50_ms"] - direct["first_byte"]["p50_ms"],
                         "n": fb["n"], "bad": fb["bad"]}  # fmt: skip
    core_bench.log(f"{s.name}: {out['rps']['rps']:.0f} req/s, {out['streams']['rps']:.0f} streams/s, "
                   f"+{out['at20']['added_p50_ms']:.1f}/+{out['at20']['added_p99_ms']:.1f} ms at 20 req/s, "
                   f"first byte +{out['first_byte']['added_p50_ms']:.1f} ms")  # fmt: skip
    return out


# --- the table --------------------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    clean = [v for v in values if v == v]
    return statistics.median(clean) if clean else float("nan")


def failures(r: dict[str, Any]) -> int:
    """Calls of one round that failed (non-2xx answers, socket errors, timeouts), every column together: a
    fast server that fails calls is not fast."""
    total = sum(r[k]["non_2xx"] + r[k]["socket_errors"] for k in ("rps", "streams"))
    total += sum(r[f"at{rate:g}"]["errors"] + r[f"at{rate:g}"]["non_2xx"] for rate in RATES)
    return int(total + r["first_byte"]["bad"])


def table(servers: list[Server], memory: dict[str, float]) -> str:
    floors = {s.processes: s for s in servers if s.name.startswith("floor")}
    head = ("| | req/s (of the floor) | added p50 / p99 at 20 req/s | at 100 req/s | at 400 req/s "
            "| first byte, 10 streams at once | streams/s (of the floor) | RSS after, MB | failed calls |")  # fmt: skip
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in servers:
        rps = med([r["rps"]["rps"] for r in s.rounds])
        streams = med([r["streams"]["rps"] for r in s.rounds])
        floor = floors.get(s.processes)

        def ratio(value: float, kind: str, floor: Server | None = floor, s: Server = s) -> str:
            if floor is None or floor is s:
                return ""
            base = med([r[kind]["rps"] for r in floor.rounds])
            return f" ({value / base:.2f})" if base else ""

        cells = [f"{s.label}", f"{rps:,.0f}{ratio(rps, 'rps')}"]
        for rate in RATES:
            rows = [r[f"at{rate:g}"] for r in s.rounds]
            if sum(r["saturated"] for r in rows) * 2 > len(rows):
                cells.append(f"saturated at {med([r['achieved_rps'] for r in rows]):,.0f} req/s")
            else:
                p50, p99 = med([r["added_p50_ms"] for r in rows]), med([r["added_p99_ms"] for r in rows])
                cells.append(f"{p50:+.1f} / {p99:+.1f} ms")
        cells.append(f"{med([r['first_byte']['added_p50_ms'] for r in s.rounds]):+.1f} ms")
        cells.append(f"{streams:,.0f}{ratio(streams, 'streams')}")
        cells.append(f"{memory.get(s.name, float('nan')):.0f}")
        cells.append(f"{sum(failures(r) for r in s.rounds):,}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- the run ----------------------------------------------------------------------------------------------


def start_all(wanted: list[str], fast: str, slow: str, tmp: Path, cleanup: list[Any]) -> list[Server]:
    servers: list[Server] = []
    workers_option = soak.has_workers_option(SRC)
    one = 1 if workers_option else None
    for name in wanted:
        core_bench.log(f"starting {name}")
        if name == "floor":
            servers.append(start_floor(name, 1, fast, slow, tmp))
        elif name == "floor-x2":
            servers.append(start_floor(name, 2, fast, slow, tmp))
        elif name == "inferplex-master":
            cfg = inferplex_config(fast, slow, tmp, {"database_url": f"sqlite+aiosqlite:///{tmp / 'master.db'}"})
            servers.append(start_inferplex(name, "Inferplex, master key", cfg, tmp, one, key=False))
        elif name.startswith("inferplex-every-stage"):
            workers = 2 if name.endswith("-w2") else one
            if workers == 2 and not workers_option:
                core_bench.log(f"{name}: skipped (this checkout's `inferplex serve` has no --workers)")
                continue
            db, prefix = "inferplex_peers_" + secrets.token_hex(4), f"inferplex_peers:{secrets.token_hex(4)}:"
            accounts.pg_admin(f'CREATE DATABASE "{db}"')
            cleanup += [lambda db=db: accounts.pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'),
                        lambda prefix=prefix: accounts.drop_redis_prefix(prefix)]  # fmt: skip
            storage = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}",
                       "redis_url": accounts.REDIS_URL, "redis_prefix": prefix}  # fmt: skip
            label = "Inferplex, every stage on" + (", --workers 2" if workers == 2 else "")
            servers.append(start_inferplex(name, label, inferplex_config(fast, slow, tmp, storage), tmp, workers, True))
        elif name == "litellm":
            peers_install.install_litellm()
            servers.append(start_litellm(fast, slow, tmp))
        elif name == "portkey":
            peers_install.install_portkey()
            servers.append(start_portkey(fast, slow, tmp))
        cleanup.append(servers[-1].stop)
        check(servers[-1])
    return servers


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one short round: checks the harness; numbers are rough")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", help=f"comma-separated subset of {','.join(ALL)}")
    p.add_argument("--wrk-s", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--wrk-warmup-s", type=int, default=2, help="seconds of wrk before each measured run")
    p.add_argument("--rate-s", type=float, default=20, help="seconds timed at each fixed rate")
    p.add_argument("--warmup-s", type=float, default=2)
    p.add_argument("--ttfb-s", type=float, default=10, help="seconds of the ten-streams first-byte loop")
    p.add_argument("--src", help="run Inferplex from this src/ directory (another checkout, or a snapshot)")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--serve-floor", type=int, help=argparse.SUPPRESS)  # internal: one floor process
    args = p.parse_args()
    if args.serve_floor:
        serve_floor(args.serve_floor)
        return 0
    global SRC
    SRC = args.src
    if args.quick:
        args.rounds, args.wrk_s, args.wrk_warmup_s, args.rate_s, args.warmup_s, args.ttfb_s = 1, 3, 1, 4, 1, 3
    wanted = [n for n in ALL if not args.only or n in args.only.split(",")]
    started = datetime.now(UTC)
    cleanup: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="inferplex-peers-") as d:
        tmp = Path(d)
        try:
            ports = core_bench.free_ports(2)
            up = [sys.executable, str(HERE / "upstream.py")]
            slow_up = [*up, "--port", str(ports[1]), "--latency-ms", "50"]
            ups = [popen([*up, "--port", str(ports[0])], PIN.load, tmp, "upstream-0ms"),
                   popen(slow_up, PIN.load, tmp, "upstream-50ms")]  # fmt: skip
            cleanup += [u.terminate for u in ups]
            for port, u in zip(ports, ups, strict=True):
                ready(f"http://127.0.0.1:{port}/health", [u], "upstream", tmp)
            fast, slow = (f"http://127.0.0.1:{port}/v1" for port in ports)
            servers = start_all(wanted, fast, slow, tmp, cleanup)
            PIN.pin_self()
            direct_slow = loadgen.Target.build("direct", slow + "/chat/completions", UP_KEY, "upstream-model", False)
            stream_slow = loadgen.Target.build("direct", slow + "/chat/completions", UP_KEY, "upstream-model", True)
            for n in range(args.rounds):
                core_bench.log(f"round {n + 1} of {args.rounds} (load {core_bench.loadavg()})")
                direct = {"slow": direct_slow, "first_byte": asyncio.run(first_bytes(stream_slow, 10, args.ttfb_s))}
                for s in servers if n % 2 == 0 else servers[::-1]:
                    s.rounds.append(measure(s, direct, args, tmp))
            time.sleep(1)
            memory = {s.name: sum(core_bench.memory(p.pid)["VmRSS"] for p in s.procs) for s in servers}
        finally:
            for stop in reversed(cleanup):
                try:
                    stop()
                except Exception as exc:  # cleanup goes on whatever one step raised
                    print(f"cleanup: {exc}", file=sys.stderr)
            # every server's output, kept: a peer that answers slowly or fails says why there
            logs = Path(args.out) / f"peers-{started:%Y%m%dT%H%M%SZ}-logs"
            logs.mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("*.log"):
                shutil.copy(log, logs / log.name)
    text = table(servers, memory)
    cmd = " ".join(["python", "bench/peers.py", *sys.argv[1:]])
    header = (f"`{cmd}`, {started:%Y-%m-%d %H:%M} UTC, median of {args.rounds} round(s), load average at the "
              f"end {core_bench.loadavg()}; {PIN.describe()} (two-process servers on both cores).")  # fmt: skip
    print(header + "\n\n" + text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    (out / f"peers-{stamp}.md").write_text(header + "\n\n" + text + "\n")
    raw = {s.name: {"label": s.label, "processes": s.processes, "rounds": s.rounds} for s in servers}
    (out / f"peers-{stamp}.json").write_text(json.dumps({"memory_mb": memory, "servers": raw}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
