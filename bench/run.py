"""The gateway-core benchmark (`make bench`): the gateway against a fast fake upstream, direct calls measured
in the same run, a markdown table out.

    .venv/bin/python bench/run.py                    # everything, about 70 s
    .venv/bin/python bench/run.py --quick            # short runs, a check of the harness (~30 s)
    .venv/bin/python bench/run.py --server granian   # the same app under granian instead of uvicorn
    .venv/bin/python bench/run.py --server reference # a minimal aiohttp proxy instead, to calibrate
    .venv/bin/python bench/run.py --profile          # plus py-spy profiles of the gateway under wrk load
    .venv/bin/python bench/run.py --gc freeze,50000  # garbage-collector experiment (bench/asgi_app.py)

What runs (all on 127.0.0.1, every phase bounded in time):
- two fake upstreams (bench/upstream.py): 0 ms latency (throughput, streams) and 50 ms (latency test);
- the gateway, one process, started as `inferplex serve --config <tmp> --port <free>` (uvicorn, uvloop,
  httptools), with models `bench-model` (0 ms upstream) and `bench-model-50ms` (50 ms upstream);
- CPU pinning on a machine with 2+ cores: the gateway alone on core 0; the upstreams, wrk, this script's
  own load generator (bench/loadgen.py) and py-spy on core 1. So the gateway has one core, and everything
  it is measured against shares the other: "direct" rows are the upstream and load generator on that one
  core, which is why direct throughput is a lower bound of what the upstream can do.

Phases: (1) buffered throughput, wrk -t1 -c50 -d10s, direct then gateway (+ gateway CPU use); (2) streamed
throughput, the same with "stream":true; (3) added latency at a steady 100 requests/s, open loop, direct and
gateway driven in the same 20 s window against the 50 ms upstream; (4) time to first streamed byte, 500
sequential streams alternating direct/gateway; (5) gateway resident memory (VmRSS) after all of that.
Results: printed, and written to bench/results/<UTC time>.{md,json} (gitignored) and bench/results/latest.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
from report import report  # noqa: E402

VENV_BIN = Path(sys.executable).parent
KEY = "bench-key-0123456789"
UPSTREAM_KEY = "bench-upstream-key"

CONFIG = """\
server: {{master_key: env:BENCH_KEY, log_level: warning, data_dir: {data_dir}}}
providers:
  - {{name: fake, kind: openai, base_url: "http://127.0.0.1:{fast}/v1", api_key: env:BENCH_UPSTREAM_KEY}}
  - {{name: fake50, kind: openai, base_url: "http://127.0.0.1:{slow}/v1", api_key: env:BENCH_UPSTREAM_KEY}}
models:
  - name: bench-model
    deployments: [{{provider: fake, model: upstream-model}}]
    pricing: {{free: true}}
  - name: bench-model-50ms
    deployments: [{{provider: fake50, model: upstream-model}}]
    pricing: {{free: true}}
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all bound at once, so they cannot repeat)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


class Pinning:
    def __init__(self, enabled: bool) -> None:
        cores = sorted(os.sched_getaffinity(0))
        self.enabled = enabled and len(cores) >= 2 and shutil.which("taskset") is not None
        self.gateway = str(cores[0]) if self.enabled else None
        self.load = str(cores[1]) if self.enabled else None

    def prefix(self, core: str | None) -> list[str]:
        return ["taskset", "-c", core] if core is not None else []

    def pin_self(self) -> None:
        if self.load is not None:
            os.sched_setaffinity(0, {int(self.load)})

    def describe(self) -> str:
        if not self.enabled:
            return "no pinning (fewer than 2 cores or no taskset)"
        return f"gateway on core {self.gateway}; upstreams, wrk, load generator on core {self.load}"


class Proc:
    """A child process in its own process group, stopped (TERM, then KILL) on exit."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.cmd = cmd
        self.logpath = logdir / f"{name}.log"
        self._log = open(self.logpath, "wb")
        self.p = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.logpath.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(5)
        self._log.close()


def wait_http(url: str, proc: Proc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise SystemExit(f"{proc.name} exited during start-up:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{proc.name} did not answer {url} within {timeout:.0f}s:\n{proc.tail()}")


def post(url: str, body: dict[str, Any], key: str) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def smoke(gateway: str, proc: Proc) -> None:
    """The gateway must answer both kinds of call correctly before anything is timed."""
    msg = {"role": "user", "content": "hi"}
    status, body = post(f"{gateway}/v1/chat/completions", {"model": "bench-model", "messages": [msg]}, KEY)
    if status != 200 or b'"chat.completion"' not in body:
        raise SystemExit(f"gateway smoke test failed: HTTP {status} {body[:300]!r}\n{proc.tail()}")
    status, body = post(
        f"{gateway}/v1/chat/completions", {"model": "bench-model", "messages": [msg], "stream": True}, KEY
    )
    if status != 200 or not body.rstrip().endswith(b"data: [DONE]") or b"chat.completion.chunk" not in body:
        raise SystemExit(f"gateway stream smoke test failed: HTTP {status} {body[:300]!r}\n{proc.tail()}")


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (granian serves from a child of its supervisor process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def memory(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM in MB, summed over the process tree."""
    out = {"VmRSS": 0.0, "VmHWM": 0.0, "processes": 0.0}
    for p in process_tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        out["processes"] += 1
        for line in lines:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] += int(value.split()[0]) / 1024
    return out


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def wrk(
    url: str, key: str, stream: bool, duration: int, connections: int, core: str | None, model: str = "bench-model"
) -> dict[str, Any]:
    env = dict(os.environ, BENCH_KEY=key, BENCH_STREAM="1" if stream else "0", BENCH_MODEL=model)
    cmd = [
        *(["taskset", "-c", core] if core else []),
        "wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "5s",
        "-s", str(HERE / "lua" / "post.lua"), url,
    ]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 30, check=False).stdout
    res: dict[str, Any] = {"cmd": " ".join(cmd[3:] if core else cmd), "raw": out}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res["rps"] = float(m.group(1)) if m else float("nan")
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    res["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    res["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    for p in ("50", "99"):
        m = re.search(rf"^\s+{p}%\s+(\S+)", out, re.M)
        res[f"p{p}_ms"] = _ms(m.group(1)) if m else float("nan")
    return res


def throughput(
    name: str, direct: str, gateway: str, gw: Proc, pin: Pinning, duration: int, stream: bool
) -> dict[str, Any]:
    log(f"{name}: wrk -c50 -d{duration}s direct (load {loadavg()})")
    wrk(direct, UPSTREAM_KEY, stream, 2, 50, pin.load)  # warm-up
    d = wrk(direct, UPSTREAM_KEY, stream, duration, 50, pin.load)
    log(f"{name}: direct {d['rps']:.0f} req/s; gateway (load {loadavg()})")
    wrk(gateway, KEY, stream, 2, 50, pin.load)  # warm-up: connections, caches
    c0, t0 = cpu_seconds(gw.pid), time.monotonic()
    g = wrk(gateway, KEY, stream, duration, 50, pin.load)
    cpu = cpu_seconds(gw.pid) - c0
    g["cpu_pct"] = 100 * cpu / (time.monotonic() - t0)
    # CPU time per request: what the gateway costs, whatever share of its core other processes took.
    g["cpu_us_per_req"] = 1e6 * cpu / max(g["requests"], 1)
    g["rps_per_core"] = 1e6 / g["cpu_us_per_req"] if g["requests"] else float("nan")
    log(f"{name}: gateway {g['rps']:.0f} req/s at {g['cpu_pct']:.0f}% CPU, {g['cpu_us_per_req']:.0f} µs CPU/request")
    return {"direct": d, "gateway": g, "loadavg_after": loadavg()}


def latency(direct: str, gateway: str, rps: float, duration: float) -> dict[str, Any]:
    log(f"latency: {rps:g} req/s open loop for {duration:g}s, direct and gateway together (load {loadavg()})")
    targets = [
        loadgen.Target.build("direct", direct, UPSTREAM_KEY, "upstream-model", stream=False),
        loadgen.Target.build("gateway", gateway, KEY, "bench-model-50ms", stream=False),
    ]
    out = asyncio.run(loadgen.rate_many(targets, rps, duration, warmup=3.0))
    out["loadavg_after"] = loadavg()
    d, g = out["direct"]["service"], out["gateway"]["service"]
    log(f"latency: p50 direct {d['p50_ms']:.2f} gateway {g['p50_ms']:.2f}; p99 {d['p99_ms']:.2f} / {g['p99_ms']:.2f}")
    return out


def ttfb(direct: str, gateway: str, n: int) -> dict[str, Any]:
    log(f"ttfb: {n} sequential streams each, alternating (load {loadavg()})")
    targets = [
        loadgen.Target.build("direct", direct, UPSTREAM_KEY, "upstream-model", stream=True),
        loadgen.Target.build("gateway", gateway, KEY, "bench-model", stream=True),
    ]
    out = asyncio.run(loadgen.ttfb_many(targets, n, time_limit=60))
    out["loadavg_after"] = loadavg()
    return out


def profile(gateway: str, gw: Proc, pin: Pinning, duration: int, outdir: Path, stamp: str) -> dict[str, Any]:
    """py-spy (pinned with the load) samples the gateway while wrk drives buffered, then streamed calls."""
    spy = shutil.which("py-spy") or str(VENV_BIN / "py-spy")
    if not Path(spy).exists():
        log("profile: py-spy not installed (pip install py-spy); skipped")
        return {}
    result: dict[str, Any] = {}
    for kind, stream in (("buffered", False), ("stream", True)):
        raw = outdir / f"profile-{stamp}-{kind}.txt"
        svg = outdir / f"profile-{stamp}-{kind}.svg"
        log(f"profile: py-spy record {kind} for {duration}s")
        cmd = [*pin.prefix(pin.load), spy, "record", "--pid", str(gw.pid), "--rate", "250", "--nonblocking",
               "--subprocesses"]  # fmt: skip
        spies = [
            subprocess.Popen([*cmd, "--duration", str(duration), "--format", "raw", "-o", str(raw)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
            subprocess.Popen([*cmd, "--duration", str(duration), "--format", "flamegraph", "-o", str(svg)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
        ]  # fmt: skip
        time.sleep(1)
        wrk(gateway, KEY, stream, duration, 50, pin.load)
        for s in spies:
            try:
                s.wait(duration + 30)
            except subprocess.TimeoutExpired:
                s.kill()
        if raw.exists():
            result[kind] = {"raw": str(raw), "svg": str(svg), "top": summarize_profile(raw)}
        else:
            err = spies[0].stderr.read().decode() if spies[0].stderr else ""
            log(f"profile: py-spy produced nothing: {err[:300]}")
    return result


def summarize_profile(raw: Path, top: int = 25) -> dict[str, Any]:
    """Shares of samples from py-spy's collapsed stacks: self time per function, self time per package (the
    top-level folder of the frame's file: uvicorn, starlette, aiohttp, asyncio, inferplex, ...), and
    inclusive time per inferplex function."""
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    pkg: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        n = int(count)
        total += n
        self_t[frames[-1]] += n
        m = re.search(r"\(([^/)]+)", frames[-1])
        pkg[(m.group(1).removesuffix(".py") if m else "?")] += n
        for f in set(frames):
            if "(inferplex/" in f:
                incl[f] += n
    pct = 100 / max(total, 1)
    return {
        "samples": total,
        "self": [(f, round(c * pct, 1)) for f, c in self_t.most_common(top)],
        "packages": [(f, round(c * pct, 1)) for f, c in pkg.most_common(12)],
        "inferplex_inclusive": [(f, round(c * pct, 1)) for f, c in incl.most_common(top)],
    }


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, timeout=5, check=False).stdout.strip()  # fmt: skip
        return f"{rev}{' + uncommitted src changes' if dirty else ''}" if rev else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def gateway_command(server: str, port: int, config: Path, pin: Pinning, gc_mode: str | None = None) -> list[str]:
    base = pin.prefix(pin.gateway)
    if server == "uvicorn" and gc_mode is not None:
        # Same app and uvicorn settings as `inferplex serve`, through the bench launcher that can tune the GC.
        return [*base, sys.executable, str(HERE / "asgi_app.py"), "uvicorn", str(port)]
    if server == "uvicorn":
        return [
            *base,
            str(VENV_BIN / "inferplex"),
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--workers",
            "1",
        ]
    if server == "granian":
        granian = shutil.which("granian", path=str(VENV_BIN)) or "granian"
        return [
            *base, granian, "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--runtime-threads", "1", "--log-level", "warning", "--no-ws",
            "--working-dir", str(HERE), "--factory", "asgi_app:create",
        ]  # fmt: skip
    if server == "reference":
        return [*base, sys.executable, str(HERE / "reference_proxy.py"), str(port)]
    raise SystemExit(f"unknown server {server}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short phases: checks the harness, numbers are rough")
    ap.add_argument(
        "--server",
        choices=["uvicorn", "granian", "reference"],
        help="uvicorn: `inferplex serve` (default); granian: the same app under granian "
        "(bench/asgi_app.py); reference: a minimal aiohttp proxy (bench/reference_proxy.py), not the "
        "gateway, for calibration",
        default="uvicorn",
    )
    ap.add_argument("--phases", default="throughput,stream,latency,ttfb", help="comma-separated subset")
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--rate-duration", type=float, default=20, help="seconds timed at the fixed rate")
    ap.add_argument("--rps", type=float, default=100)
    ap.add_argument("--ttfb-n", type=int, default=500)
    ap.add_argument("--profile", action="store_true", help="also record py-spy profiles (flamegraph + raw)")
    ap.add_argument(
        "--gc",
        metavar="MODE",
        help="experiment: run the app through bench/asgi_app.py with BENCH_GC=MODE (default | freeze | "
        "freeze,50000 | 50000) and report the time spent in garbage collection",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    ap.add_argument("--src", help="benchmark the inferplex package from this src/ directory instead")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.rate_duration, args.ttfb_n = 3, 5, 150
    if shutil.which("wrk") is None and {"throughput", "stream"} & set(args.phases.split(",")):
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    phases = set(args.phases.split(","))

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    pin = Pinning(not args.no_pin)
    r: dict[str, Any] = {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "host": f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "loadavg_before": loadavg(),
        "pinning": pin.describe(),
        "server": args.server,
        "source": args.src or f"{ROOT / 'src'} @ {git_rev()}",
        "command": " ".join(["python", "bench/run.py", *sys.argv[1:]]),
    }
    log(f"start; load average {r['loadavg_before']}; {pin.describe()}")

    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp, ExitStack() as stack:
        tmpdir = Path(tmp)
        fast, slow, gport = free_ports(3)
        env = dict(os.environ, BENCH_KEY=KEY, BENCH_UPSTREAM_KEY=UPSTREAM_KEY, PYTHONUNBUFFERED="1")
        env.pop("INFERPLEX_CONFIG", None)
        if args.src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(args.src).resolve()), env.get("PYTHONPATH", "")])
        config = tmpdir / "bench.yaml"
        config.write_text(CONFIG.format(fast=fast, slow=slow, data_dir=tmpdir / "data"))
        env["BENCH_CONFIG"] = str(config)
        if args.gc is not None:
            if args.server != "uvicorn":
                raise SystemExit("--gc works with --server uvicorn")
            env["BENCH_GC"] = "" if args.gc == "default" else args.gc
            env["BENCH_GC_STATS"] = "1"
            r["server"] = f"uvicorn via bench/asgi_app.py, BENCH_GC={args.gc}"

        def start(name: str, cmd: list[str]) -> Proc:
            p = Proc(name, cmd, env, tmpdir)
            stack.callback(p.stop)
            return p

        up = [sys.executable, str(HERE / "upstream.py")]
        up_fast = start("upstream-0ms", [*pin.prefix(pin.load), *up, "--port", str(fast)])
        up_slow = start("upstream-50ms", [*pin.prefix(pin.load), *up, "--port", str(slow), "--latency-ms", "50"])
        gw_cmd = gateway_command(args.server, gport, config, pin, args.gc)
        r["gateway_cmd"] = " ".join(gw_cmd).replace(str(config), "<tmp>/bench.yaml").replace(str(ROOT) + "/", "")
        gw = start("gateway", gw_cmd)
        pin.pin_self()
        wait_http(f"http://127.0.0.1:{fast}/health", up_fast)
        wait_http(f"http://127.0.0.1:{slow}/health", up_slow)
        wait_http(f"http://127.0.0.1:{gport}/health", gw)
        gateway = f"http://127.0.0.1:{gport}"
        smoke(gateway, gw)
        log(f"gateway pid {gw.pid} up on {gateway}; RSS {memory(gw.pid)['VmRSS']:.1f} MB")
        r["memory_at_start"] = memory(gw.pid)

        d_fast = f"http://127.0.0.1:{fast}/v1/chat/completions"
        d_slow = f"http://127.0.0.1:{slow}/v1/chat/completions"
        g_url = f"{gateway}/v1/chat/completions"
        if "throughput" in phases:
            r["throughput"] = throughput("buffered", d_fast, g_url, gw, pin, args.duration, stream=False)
        if "stream" in phases:
            r["stream_throughput"] = throughput("stream", d_fast, g_url, gw, pin, max(args.duration // 2, 3), True)
        if "latency" in phases:
            r["latency"] = latency(d_slow, g_url, args.rps, args.rate_duration)
        if "ttfb" in phases:
            r["ttfb"] = ttfb(d_fast, g_url, args.ttfb_n)
        if not gw.alive():
            raise SystemExit(f"the gateway died during the run:\n{gw.tail()}")
        time.sleep(1)
        r["memory"] = memory(gw.pid)
        log(f"gateway RSS after the runs {r['memory']['VmRSS']:.1f} MB (peak {r['memory']['VmHWM']:.1f})")
        if args.profile:
            r["profile"] = profile(g_url, gw, pin, max(args.duration, 5), outdir, stamp)
        if args.gc is not None:
            # The launcher prints its collector statistics at exit; uvicorn re-raises SIGTERM after its
            # shutdown (no atexit then), but SIGINT ends in KeyboardInterrupt, so atexit runs.
            gw.stop(signal.SIGINT)
            r["gc"] = next((line for line in gw.tail(50).splitlines() if line.startswith("gc:")), "gc: no report")
            log(r["gc"])
        r["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
        r["loadavg_after"] = loadavg()

    text = report(r)
    print(text)
    (outdir / f"{stamp}.md").write_text(text + "\n")
    (outdir / "latest.md").write_text(text + "\n")
    (outdir / f"{stamp}.json").write_text(json.dumps(r, indent=2, default=str))
    if "profile" in r:
        for kind, p in r["profile"].items():
            top = p["top"]
            print(f"\nprofile ({kind}, {top['samples']} samples; flamegraph {p['svg']})")
            print("  self time by package: " + ", ".join(f"{k} {v}%" for k, v in top["packages"]))
            print("  self time, top functions:")
            for f, share in top["self"][:15]:
                print(f"    {share:5.1f}%  {f}")
            print("  inclusive time, inferplex functions:")
            for f, share in top["inferplex_inclusive"][:12]:
                print(f"    {share:5.1f}%  {f}")
    log(f"results in {outdir / (stamp + '.md')}")
    missed = "**MISS**" in text
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
