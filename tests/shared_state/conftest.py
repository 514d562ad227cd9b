"""Workers sharing one machine without Redis: a coordinator (shared_state/) and gateway processes that use it.

`workers` starts real `inferplex serve` processes on ports of their own, each told the coordinator's socket
as the supervisor tells its workers (INFERPLEX_SHARED_STATE), all on one SQLite file: what
`inferplex serve --workers N` runs, with each worker reachable on its own port so a test can choose which
one a request goes to. Everything started is stopped at the end, also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inferplex.shared_state import ENV, spawn
from tests.gateway_server import free_port

MASTER = "ipx-shared-state-master"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for Unix sockets (a path over 107 bytes cannot be bound; pytest's tmp paths can be)."""
    path = Path(tempfile.mkdtemp(prefix="ipx-ss-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Coordinator:
    """A coordinator process, as the supervisor runs it (`spawn`), that a test may kill and start again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.proc = spawn(path)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def respawn(self) -> None:
        """What the supervisor does when the coordinator has died: start it again on the same path."""
        stop(self.proc)
        self.proc = spawn(self.path)


@pytest.fixture
def coordinator(socket_dir: Path) -> Iterator[Coordinator]:
    running = Coordinator(str(socket_dir / "state.sock"))
    yield running
    stop(running.proc)


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def workers(config: dict[str, Any], tmp: Path, count: int, socket: str | None) -> Iterator[list[str]]:
    """`count` gateway processes with `config` (SQLite in `tmp`), sharing the coordinator at `socket` when
    given; yields their base URLs."""
    config = {**config, "server": {**config.get("server", {}), "master_key": "env:INFERPLEX_TEST_MASTER"}}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}
    env.pop(ENV, None)
    if socket is not None:
        env[ENV] = socket
    ports = [free_port() for _ in range(count)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            # `--workers 1`: each process is one worker, and the test is its supervisor.
            command = [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port)]
            command += ["--workers", "1"]
            log = tmp / f"worker-{port}.log"  # a file, not a pipe: a full pipe would block a chatty worker
            with log.open("wb") as out:
                procs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=out))
            # One at a time: the first runs the migrations on the fresh SQLite file (the supervisor's job).
            _wait_until_up(f"http://127.0.0.1:{port}", procs[-1], log)
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        for proc in procs:
            stop(proc)


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.1)


def statuses(responses: Sequence[httpx.Response]) -> list[int]:
    return [r.status_code for r in responses]
