"""A small, exact HTTP/1.1 load client for the latency and time-to-first-byte benchmarks.

wrk measures throughput; this measures latency the way a caller sees it:

- `rate`: open loop at a fixed request rate (wrk2/vegeta style, which Debian does not package). Request i
  is due at t0 + i/rate whatever happened before it, on a keep-alive connection from a pool that grows when
  every connection is busy, and its latency is counted from the moment it was *due* (so a stall is not
  hidden by coordinated omission). Several targets can be driven in the same window, each on its own
  schedule, so that direct and gateway calls see the same machine noise.
- `ttfb`: N sequential streamed requests, alternating between targets, each timed from the write of the
  request to the first SSE `data:` byte of the body, and to the last byte.

Hand-rolled asyncio protocol on uvloop: a few microseconds per request, so the client is not what is
measured. Only 127.0.0.1/localhost URLs are accepted, every loop is bounded in time.

    python bench/loadgen.py rate --rps 100 --duration 20 URL [URL ...]
    python bench/loadgen.py ttfb --n 500 URL [URL ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
BODY: dict[str, Any] = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Target:
    """One endpoint to call: a full request, pre-encoded."""

    name: str
    host: str
    port: int
    request: bytes

    @classmethod
    def build(cls, name: str, url: str, key: str | None, model: str, stream: bool) -> Target:
        u = urlsplit(url)
        if u.scheme != "http" or u.hostname not in LOOPBACK:
            raise SystemExit(f"refusing {url}: only http://127.0.0.1 targets")
        body: dict[str, Any] = dict(BODY, model=model)
        if stream:
            body["stream"] = True
        raw = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {u.path or '/'} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
        )
        if key:
            head += f"Authorization: Bearer {key}\r\n"
        return cls(name, u.hostname or "127.0.0.1", u.port or 80, (head + "\r\n").encode() + raw)


class Conn(asyncio.Protocol):
    """One keep-alive connection; one request at a time. Parses Content-Length and chunked bodies."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()
        self.waiter: asyncio.Future[int] | None = None
        self.closed = False
        self.reset()

    def reset(self) -> None:
        self.buf = bytearray()
        self.status = 0
        self.headers_done = False
        self.length: int | None = None
        self.chunked = False
        self.body_seen = 0
        self.first_data = 0.0
        self.t_head = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.lost.done():
            self.lost.set_result(None)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection closed"))

    def request(self, data: bytes) -> asyncio.Future[int]:
        assert self.transport is not None
        if self.closed:
            raise ConnectionError("connection closed")
        self.reset()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buf += data
        if not self.headers_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.t_head = now
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            self.status = int(head[0].split(" ", 2)[1])
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    self.length = int(value)
                elif name == "transfer-encoding" and "chunked" in value.lower():
                    self.chunked = True
            del self.buf[: end + 4]
            self.headers_done = True
        if not self.first_data and b"data:" in self.buf:
            self.first_data = now
        if self.chunked:
            self._chunks()
        elif self.length is not None:
            if len(self.buf) >= self.length:
                if not self.first_data and self.length:
                    self.first_data = now
                del self.buf[: self.length]
                self._done()
        else:  # read until close: not used by these servers
            pass

    def _chunks(self) -> None:
        while True:
            end = self.buf.find(b"\r\n")
            if end < 0:
                return
            size = int(bytes(self.buf[:end]).split(b";", 1)[0], 16)
            if size == 0:
                if len(self.buf) < end + 4:
                    return
                del self.buf[: end + 4]
                self._done()
                return
            if len(self.buf) < end + 2 + size + 2:
                return
            del self.buf[: end + 2 + size + 2]

    def _done(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(self.status)


async def connect(t: Target) -> Conn:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(Conn, t.host, t.port)
    return proto


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def summary(values_s: list[float]) -> dict[str, float]:
    v = sorted(x * 1000 for x in values_s)
    return {
        "n": len(v),
        "mean_ms": sum(v) / len(v) if v else float("nan"),
        "p50_ms": percentile(v, 50),
        "p90_ms": percentile(v, 90),
        "p99_ms": percentile(v, 99),
        "max_ms": v[-1] if v else float("nan"),
    }


@dataclass
class RateResult:
    latencies: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    errors: int = 0
    retries: int = 0
    non_2xx: int = 0
    sent: int = 0
    connections: int = 0


async def run_rate(
    t: Target, rps: float, duration: float, warmup: float, offset: float = 0.0, max_conns: int = 512
) -> RateResult:
    """Open-loop: request i is due at start + i/rps; latency is measured from that due time."""
    loop = asyncio.get_running_loop()
    res = RateResult()
    idle: list[Conn] = []
    tasks: set[asyncio.Task[None]] = set()
    open_conns = 0

    async def one(due: float, record: bool) -> None:
        nonlocal open_conns
        conn = None
        try:
            for attempt in range(2):
                # A keep-alive connection the server closed while idle is dropped, and a request that finds
                # its reused connection closed before any answer is sent again once, as real clients do.
                while idle and idle[-1].closed:
                    idle.pop()
                    open_conns -= 1
                reused = bool(idle)
                if reused:
                    conn = idle.pop()
                else:
                    if open_conns >= max_conns:
                        res.errors += 1
                        return
                    open_conns += 1
                    res.connections = max(res.connections, open_conns)
                    conn = await connect(t)
                sent = time.perf_counter()
                try:
                    status = await asyncio.wait_for(conn.request(t.request), 10)
                except ConnectionError:
                    if reused and attempt == 0 and not conn.headers_done:
                        open_conns -= 1
                        conn = None
                        res.retries += 1
                        continue
                    raise
                break
            end = time.perf_counter()
            if record:
                res.sent += 1
                if 200 <= status < 300:
                    res.latencies.append(end - due)
                    res.service.append(end - sent)
                    res.lag.append(sent - due)
                else:
                    res.non_2xx += 1
            assert conn is not None
            idle.append(conn)
            conn = None
        except (TimeoutError, OSError):
            if record:
                res.errors += 1
        finally:
            if conn is not None:
                open_conns -= 1
                if conn.transport is not None:
                    conn.transport.close()

    total = warmup + duration
    n = int(total * rps)
    start = time.perf_counter() + 0.05 + offset
    for i in range(n):
        due = start + i / rps
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(due, record=i >= warmup * rps))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=15)
    for c in idle:
        if c.transport is not None:
            c.transport.close()
    return res


async def rate_many(targets: list[Target], rps: float, duration: float, warmup: float) -> dict[str, Any]:
    """Drive every target at `rps` in the same time window, schedules offset so they do not coincide."""
    step = 1 / rps / max(len(targets), 1)
    results = await asyncio.gather(
        *(run_rate(t, rps, duration, warmup, offset=i * step) for i, t in enumerate(targets))
    )
    out: dict[str, Any] = {}
    for t, r in zip(targets, results, strict=True):
        out[t.name] = {
            "rps": rps,
            "duration_s": duration,
            "ok": len(r.latencies),
            "errors": r.errors,
            "non_2xx": r.non_2xx,
            "connections": r.connections,
            "retries": r.retries,
            "send_lag": summary(r.lag),
            "latency": summary(r.latencies),
            "service": summary(r.service),
        }
    return out


async def ttfb_many(targets: list[Target], n: int, time_limit: float = 60.0) -> dict[str, Any]:
    """N sequential streamed requests per target, alternating targets request by request."""
    conns = [await connect(t) for t in targets]
    first: list[list[float]] = [[] for _ in targets]
    whole: list[list[float]] = [[] for _ in targets]
    bad = [0 for _ in targets]
    deadline = time.perf_counter() + time_limit
    # Warm-up: a few requests each, not recorded.
    for _ in range(20):
        for t, c in zip(targets, conns, strict=True):
            await asyncio.wait_for(c.request(t.request), 10)
    for _ in range(n):
        if time.perf_counter() > deadline:
            break
        for i, (t, c) in enumerate(zip(targets, conns, strict=True)):
            sent = time.perf_counter()
            status = await asyncio.wait_for(c.request(t.request), 10)
            end = time.perf_counter()
            if status != 200 or not c.first_data:
                bad[i] += 1
                continue
            first[i].append(c.first_data - sent)
            whole[i].append(end - sent)
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    return {
        t.name: {"n": len(first[i]), "bad": bad[i], "ttfb": summary(first[i]), "total": summary(whole[i])}
        for i, t in enumerate(targets)
    }


def _targets(args: argparse.Namespace, stream: bool) -> list[Target]:
    key = os.environ.get("BENCH_KEY")
    return [Target.build(f"t{i}:{url}", url, key, args.model, stream) for i, url in enumerate(args.urls)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rate", help="open-loop fixed rate; latency percentiles")
    r.add_argument("--rps", type=float, default=100)
    r.add_argument("--duration", type=float, default=20)
    r.add_argument("--warmup", type=float, default=2)
    r.add_argument("--stream", action="store_true")
    r.add_argument("--model", default="bench-model")
    r.add_argument("urls", nargs="+")
    f = sub.add_parser("ttfb", help="sequential streams; time to first data byte")
    f.add_argument("--n", type=int, default=500)
    f.add_argument("--model", default="bench-model")
    f.add_argument("urls", nargs="+")
    args = p.parse_args()
    if uvloop is not None:
        uvloop.install()
    if args.cmd == "rate":
        out = asyncio.run(rate_many(_targets(args, args.stream), args.rps, args.duration, args.warmup))
    else:
        out = asyncio.run(ttfb_many(_targets(args, True), args.n))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
