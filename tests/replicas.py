"""Gateway replicas as separate `inferplex serve` processes: what tests of limits and ledgers across replicas use.

Each process is a real server with its own event loop and stores, as in production; they share PostgreSQL
or Redis through the configs given. Started together (two replicas starting at once both run the migrations,
under PostgreSQL's advisory lock), each waited for until `/health` answers, terminated at the end, and the
Redis keys under the test's prefix deleted, so a test never leaves state for the next.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.accounts.conftest import REDIS_URL
from tests.gateway_server import free_port, serve_command


@contextmanager
def serve(configs: Sequence[Path], env: Mapping[str, str], redis_prefix: str | None = None) -> Iterator[list[str]]:
    """One `inferplex serve` per config file; yields their base URLs."""
    ports = [free_port() for _ in configs]
    procs = [
        subprocess.Popen(
            serve_command(path, port),
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for path, port in zip(configs, ports, strict=True)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        _wait_until_up(urls, procs)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(15)
        if redis_prefix is not None:
            forget_redis_prefix(redis_prefix)


def _wait_until_up(urls: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    for url, proc in zip(urls, procs, strict=True):
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)


def forget_redis_prefix(prefix: str) -> None:
    """Delete every key under `prefix` (a test's own), so no test leaves Redis state for the next."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()
