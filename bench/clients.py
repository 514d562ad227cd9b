"""HTTP client micro-benchmark: aiohttp vs httpx (and httpx2, pyreqwest, pyqwest if installed) doing the
gateway's upstream call, at concurrency 50.

Starts the fake upstream (bench/upstream.py, 0 ms) and, for each client in a fresh process pinned where
the gateway would run (core 0; upstream on core 1), runs 50 coroutines that POST the same chat body and
read the answer (buffered: whole JSON body; stream: the SSE body chunk by chunk) for a fixed time.
Reports requests/s and client CPU time per request (the number that matters inside the gateway, which
shares its one core with the server side).

    .venv/bin/python bench/clients.py                 # both clients, buffered and streamed, 5 s each
    .venv/bin/python bench/clients.py --duration 3
    .venv/bin/python bench/clients.py --only inferplex --src <other checkout>/src   # the gateway's call, A/B
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BODY = json.dumps({"model": "upstream-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
SBODY = json.dumps(
    {"model": "upstream-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
).encode()
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer upstream-key"}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def drive(call, concurrency: int, duration: float) -> tuple[int, float, float]:  # type: ignore[no-untyped-def]
    """Warm up 1 s, then count completed calls for `duration` seconds."""
    count = 0
    stop_at = 0.0
    recording = False

    async def worker() -> None:
        nonlocal count
        while True:
            now = time.perf_counter()
            if stop_at and now >= stop_at:
                return
            await call()
            if recording:
                count += 1

    warm_end = time.perf_counter() + 1.0
    stop_at = warm_end + duration
    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(max(warm_end - time.perf_counter(), 0))
    recording = True
    c0, t0 = cpu(), time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*tasks), duration + 30)
    return count, time.perf_counter() - t0, cpu() - c0


async def run_aiohttp(url: str, stream: bool, concurrency: int, duration: float) -> tuple[int, float, float]:
    import aiohttp
    import orjson

    # The gateway's own session settings (src/inferplex/providers/http.py: new_session).
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=1024, ttl_dns_cache=300, keepalive_timeout=30)
    async with aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",)) as s:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)

        async def buffered() -> None:
            async with s.post(url, data=BODY, headers=HEADERS, timeout=timeout) as r:
                orjson.loads(await r.read())
                assert r.status == 200

        async def streamed() -> None:
            async with s.post(url, data=SBODY, headers=HEADERS, timeout=timeout) as r:
                n = 0
                async for chunk in r.content.iter_any():
                    n += len(chunk)
                assert r.status == 200 and n

        return await drive(streamed if stream else buffered, concurrency, duration)


async def run_httpx(
    url: str, stream: bool, concurrency: int, duration: float, module: str = "httpx"
) -> tuple[int, float, float]:
    import importlib

    import orjson

    httpx = importlib.import_module(module)

    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024, keepalive_expiry=30)
    timeout = httpx.Timeout(connect=10, read=300, write=300, pool=None)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as c:

        async def buffered() -> None:
            r = await c.post(url, content=BODY, headers=HEADERS)
            orjson.loads(r.content)
            assert r.status_code == 200

        async def streamed() -> None:
            async with c.stream("POST", url, content=SBODY, headers=HEADERS) as r:
                n = 0
                async for chunk in r.aiter_raw():
                    n += len(chunk)
                assert r.status_code == 200 and n

        return await drive(streamed if stream else buffered, concurrency, duration)


async def run_pyreqwest(url: str, stream: bool, concurrency: int, duration: float) -> tuple[int, float, float]:
    """reqwest (Rust) through pyreqwest: its I/O runs on a Tokio thread, counted in this process's CPU."""
    import orjson
    from pyreqwest.client import ClientBuilder

    async with ClientBuilder().no_proxy().build() as c:

        async def buffered() -> None:
            r = await c.post(url).headers(HEADERS).body_bytes(BODY).build().send()
            orjson.loads(memoryview(await r.bytes()))
            assert r.status == 200

        async def streamed() -> None:
            # A read-ahead limit of 0, or the response head waits for 64 KiB of body: no use for SSE.
            req = c.post(url).headers(HEADERS).body_bytes(SBODY).streamed_read_buffer_limit(0).build_streamed()
            async with req as r:
                n = 0
                while (chunk := await r.body_reader.read_chunk()) is not None:
                    n += len(chunk)
                assert r.status == 200 and n

        return await drive(streamed if stream else buffered, concurrency, duration)


async def run_pyqwest(url: str, stream: bool, concurrency: int, duration: float) -> tuple[int, float, float]:
    import orjson
    import pyqwest

    c = pyqwest.Client(pyqwest.HTTPTransport(enable_otel=False, follow_redirects=False))

    async def buffered() -> None:
        r = await c.post(url, headers=HEADERS, content=BODY)
        orjson.loads(r.content)
        assert r.status == 200

    async def streamed() -> None:
        async with c.stream("POST", url, headers=HEADERS, content=SBODY) as r:
            n = 0
            async for chunk in r.content:
                n += len(chunk)
            assert r.status == 200 and n

    return await drive(streamed if stream else buffered, concurrency, duration)


async def run_inferplex(url: str, stream: bool, concurrency: int, duration: float) -> tuple[int, float, float]:
    """The gateway's own upstream call (providers/http.py: `post_json`, `open_stream`) on its own session:
    aiohttp as the gateway drives it. `--src` picks another checkout's `src/` for an A/B."""
    from yarl import URL

    from inferplex.config import Timeouts
    from inferplex.providers import failures, http

    body, sbody = json.loads(BODY), json.loads(SBODY)
    s, t, target = http.new_session(), Timeouts(), URL(url)
    # the provider's error map (issue 20), or its name in a checkout from before it
    errors: Any = failures.OPENAI.bind("bench") if hasattr(failures, "OPENAI") else "bench"

    async def buffered() -> None:
        await http.post_json(s, target, body, HEADERS, t, errors)

    async def streamed() -> None:
        r = await http.open_stream(s, target, sbody, HEADERS, t, errors)
        try:
            n = 0
            async for chunk in r.content.iter_any():
                n += len(chunk)
            assert n
        finally:
            r.close()

    try:
        return await drive(streamed if stream else buffered, concurrency, duration)
    finally:
        await s.close()


def child(client: str, url: str, stream: bool, concurrency: int, duration: float) -> None:
    import uvloop

    if client == "inferplex":
        coro = run_inferplex(url, stream, concurrency, duration)
    elif client == "aiohttp":
        coro = run_aiohttp(url, stream, concurrency, duration)
    elif client == "pyreqwest":
        coro = run_pyreqwest(url, stream, concurrency, duration)
    elif client == "pyqwest":
        coro = run_pyqwest(url, stream, concurrency, duration)
    else:
        coro = run_httpx(url, stream, concurrency, duration, module=client)
    n, wall, cpu_s = uvloop.run(coro)
    print(json.dumps({"requests": n, "wall_s": wall, "cpu_s": cpu_s}))


def clients() -> list[str]:
    """aiohttp and httpx; httpx2 (pydantic's fork, a dependency of the openai SDK here), pyreqwest and pyqwest
    when installed (`pip install pyreqwest pyqwest`: not dependencies of the gateway)."""
    import importlib.util

    optional = ("httpx2", "pyreqwest", "pyqwest")
    return ["inferplex", "aiohttp", "httpx"] + [name for name in optional if importlib.util.find_spec(name)]


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("aiohttp", "httpx", "httpcore", "httpx2", "pyreqwest", "pyqwest", "uvloop"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--only", help="comma-separated clients (default: all installed)")
    ap.add_argument("--src", help="the `inferplex` client from this src/ directory (another checkout)")
    ap.add_argument("--child", nargs=3, metavar=("CLIENT", "URL", "STREAM"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2] == "1", args.concurrency, args.duration)
        return 0

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    two = len(os.sched_getaffinity(0)) >= 2
    pin_up, pin_client = (["taskset", "-c", "1"], ["taskset", "-c", "0"]) if two else ([], [])
    up = subprocess.Popen(
        [*pin_up, sys.executable, str(HERE / "upstream.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(1.0)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {load}, {versions()}")
        print(f"concurrency {args.concurrency}, {args.duration:g} s per case; client on core 0, upstream on core 1\n")
        print("| client | call | requests/s | client CPU µs / request |")
        print("|---|---|---|---|")
        env = {**os.environ, **({"PYTHONPATH": str(Path(args.src).resolve())} if args.src else {})}
        for stream in (False, True):
            for client in args.only.split(",") if args.only else clients():
                kind = "1" if stream else "0"
                cmd = [*pin_client, sys.executable, __file__, "--duration", str(args.duration),
                       "--concurrency", str(args.concurrency), "--child", client, url, kind]  # fmt: skip
                out = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.duration + 60, check=False, env=env
                )
                if out.returncode != 0:
                    print(f"| {client} | {'stream' if stream else 'buffered'} | failed: {out.stderr[-300:]!r} | |")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rps = r["requests"] / r["wall_s"]
                us = 1e6 * r["cpu_s"] / max(r["requests"], 1)
                print(f"| {client} | {'stream' if stream else 'buffered'} | {rps:,.0f} | {us:,.0f} |", flush=True)
    finally:
        up.terminate()
        up.wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
