"""moto's S3 server (`moto.server`): a real HTTP server speaking S3's REST API, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.gateway_server import free_port


@contextmanager
def moto_server(env: dict[str, str] | None = None) -> Iterator[str]:
    """Its URL once it answers; stopped afterwards. `env` adds to the process's environment (moto reads its
    switches there, e.g. `INITIAL_NO_AUTH_ACTION_COUNT` to enforce IAM authentication)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # it logs every request there: a pipe nobody reads would fill and stall it
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, "moto's server exited"
            try:
                httpx.get(url + "/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
