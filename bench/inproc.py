"""The gateway app's own CPU per request, without the HTTP server and load generator around it.

Starts bench/upstream.py (pinned to the last core), builds the app exactly as `inferplex serve` does, runs
its lifespan, and drives `POST /v1/chat/completions` straight through the ASGI interface from N concurrent
tasks, on this one process pinned to the first core. What it reports is the app's CPU time per request
(the pipeline, Starlette, the aiohttp client and the event loop), with uvicorn and wrk taken out: a steadier
figure than `bench/run.py` for A/B tests of the gateway's own code on a noisy machine.

    .venv/bin/python bench/inproc.py [--requests 20000] [--concurrency 50] [--stream] [--src DIR]
    .venv/bin/python bench/inproc.py --no-upstream   # buffered calls answered in-process: only our code

`--no-upstream` replaces the adapter's HTTP call (`providers.http.post_json`) with a canned answer, so
the figure is the gateway's own code and Starlette alone: the steadiest A/B for changes to them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEY = "bench-key-0123456789"
BODY = b'{"model":"bench-model","messages":[{"role":"user","content":"Say hello."}],"max_tokens":64}'
STREAM_BODY = BODY[:-1] + b',"stream":true}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scope(path: str, key: str = KEY) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", b"Bearer " + key.encode()),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


async def _one(
    app: Any, body: bytes, key: str = KEY, path: str = "/v1/chat/completions", out: list[bytes] | None = None
) -> int:
    scope = _scope(path, key)
    scope["headers"].append((b"content-length", str(len(body)).encode()))
    sent = False
    status = 0
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            if out is not None:
                out.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(scope, receive, send)
    return status


async def _drive(app: Any, n: int, concurrency: int, body: bytes, key: str = KEY) -> tuple[float, float, int]:
    remaining = n
    bad = 0

    async def worker() -> None:
        nonlocal remaining, bad
        while remaining > 0:
            remaining -= 1
            if await _one(app, body, key) != 200:
                bad += 1

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - c0, time.perf_counter() - t0, bad


async def _main(args: argparse.Namespace, config_path: Path) -> None:
    import orjson

    from inferplex.app import create_app
    from inferplex.config import load_config

    if args.no_upstream:
        from inferplex.providers import http

        canned = orjson.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1735689600, "model": "upstream-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!", "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21},
        })  # fmt: skip

        async def post_json(*_: Any, **__: Any) -> tuple[Any, dict[str, str]]:
            await asyncio.sleep(0)
            return orjson.loads(canned), {}

        http.post_json = post_json  # type: ignore[assignment]

    app = create_app(load_config(str(config_path)), KEY)
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    startup_done = asyncio.Event()

    async def lifespan_receive() -> dict[str, Any]:
        return await messages.get()

    async def lifespan_send(message: dict[str, Any]) -> None:
        if message["type"].startswith("lifespan.startup"):
            startup_done.set()

    await messages.put({"type": "lifespan.startup"})
    life = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, lifespan_receive,
                                   lifespan_send))  # fmt: skip
    await startup_done.wait()
    body = STREAM_BODY if args.stream else BODY
    key = KEY
    if args.keyed:  # a key with credits, rpm, tpm and a concurrency limit, as bench/accounts.py uses
        spec = {"name": "bench", "credits_micros": 10**12, "rpm": 10**6, "tpm": 10**9, "max_concurrent": 10_000}
        created: list[bytes] = []
        assert await _one(app, orjson.dumps(spec), KEY, "/admin/keys", created) in (200, 201), created
        key = orjson.loads(b"".join(created))["key"]
    await _drive(app, min(2000, args.requests), args.concurrency, body, key)  # warm-up
    gc.collect()
    gc.freeze()
    gc.set_threshold(200_000, 50, 50)  # as `inferplex serve`
    results = []
    for _ in range(args.rounds):
        cpu, wall, bad = await _drive(app, args.requests, args.concurrency, body, key)
        results.append(1e6 * cpu / args.requests)
        print(f"  {1e6 * cpu / args.requests:7.1f} µs CPU/request, {args.requests / wall:7.0f} req/s, {bad} not 200",
              flush=True)  # fmt: skip
    results.sort()
    print(f"median {results[len(results) // 2]:.1f} µs CPU/request (min {results[0]:.1f})")
    await messages.put({"type": "lifespan.shutdown"})
    await life


def _storage(keyed: str | None, stack: contextlib.ExitStack) -> str:
    """The `storage:` section for `--keyed`; a PostgreSQL database and Redis prefix dropped when `stack` closes."""
    if keyed in (None, "sqlite"):
        return ""
    from accounts import drop_redis_prefix, pg_admin

    db, prefix = "inferplex_inproc_" + os.urandom(4).hex(), f"inferplex_inproc:{os.urandom(4).hex()}:"

    def clean() -> None:
        pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        drop_redis_prefix(prefix)

    pg_admin(f'CREATE DATABASE "{db}"')
    stack.callback(clean)
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
    extra = f", redis_url: 'redis://127.0.0.1:6379/0', redis_prefix: '{prefix}'" if keyed == "postgres-redis" else ""
    return f"storage: {{database_url: '{url}'{extra}}}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--no-upstream", action="store_true", help="answer buffered calls in-process")
    ap.add_argument("--src", help="import inferplex from this src/ directory instead")
    ap.add_argument(
        "--keyed",
        choices=["sqlite", "postgres", "postgres-redis"],
        help="call with an API key (credits, rpm, tpm, concurrency) on this storage; PostgreSQL and Redis on "
        "127.0.0.1 (a fresh database and key prefix, removed after)",
    )
    args = ap.parse_args()
    if args.src:
        sys.path.insert(0, str(Path(args.src).resolve()))
    os.environ["BENCH_KEY"] = KEY
    cores = sorted(os.sched_getaffinity(0))
    port = _free_port()
    upstream = subprocess.Popen(
        [*(["taskset", "-c", str(cores[-1])] if len(cores) > 1 else []), sys.executable, str(HERE / "upstream.py"),
         "--port", str(port)],
    )  # fmt: skip
    if len(cores) > 1:
        os.sched_setaffinity(0, {cores[0]})
    try:
        with tempfile.TemporaryDirectory(prefix="inferplex-inproc-") as tmp, contextlib.ExitStack() as stack:
            config = Path(tmp) / "bench.yaml"
            config.write_text(
                f"server: {{master_key: env:BENCH_KEY, log_level: warning, data_dir: {tmp}/data}}\n"
                "providers:\n  - {name: fake, kind: openai, api_key: env:BENCH_KEY, "
                f"base_url: 'http://127.0.0.1:{port}/v1'}}\n"
                "models:\n  - {name: bench-model, deployments: [{provider: fake, model: upstream-model}], "
                + ("pricing: {input: '0.15', output: '0.60'}}\n" if args.keyed else "pricing: {free: true}}\n")
                + _storage(args.keyed, stack)
            )
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            import uvloop

            uvloop.run(_main(args, config))
    finally:
        upstream.terminate()
        upstream.wait(5)


if __name__ == "__main__":
    main()
