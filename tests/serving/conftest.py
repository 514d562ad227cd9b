"""`inferplex serve` as a real process (with `--workers`, a supervisor and its workers) for the serving tests.

Each server gets a config file, a data directory and a port of its own, its output in a log file the test
can read, and its own process group, which the finalizer kills whatever the test did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.gateway_server import free_port, wait_ready
from tests.serving.upstream import PacedUpstream

MASTER_KEY = "ipx-serving-test-key"


@pytest.fixture(scope="session")
def upstream() -> Iterator[PacedUpstream]:
    fake = PacedUpstream().start()
    yield fake
    fake.stop()


def config(
    upstream: PacedUpstream, data_dir: Path, models: tuple[str, ...] = ("ok", "paced-5"), **server: Any
) -> dict[str, Any]:
    return {
        "server": {
            "master_key": "env:IPX_SERVING_MASTER_KEY",
            "data_dir": str(data_dir),
            "log_level": "info",
            **server,
        },
        "providers": [
            {"name": "fake", "kind": "openai", "base_url": upstream.base_url, "api_key": "env:IPX_SERVING_UPSTREAM_KEY"}
        ],
        "models": [
            {"name": m, "deployments": [{"provider": "fake", "model": m}], "pricing": {"input": "1", "output": "1"}}
            for m in models
        ],
    }


class Served:
    """One `inferplex serve` process (the supervisor, with `--workers` over 1)."""

    def __init__(self, tmp: Path, cfg: dict[str, Any], workers: int) -> None:
        self.config_path = tmp / "inferplex.yaml"
        self.write_config(cfg)
        self.port = free_port()
        self.log_path = tmp / "serve.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "inferplex", "serve", "--config", str(self.config_path)]
        cmd += ["--port", str(self.port), "--workers", str(workers)]
        env = {**os.environ, "IPX_SERVING_MASTER_KEY": MASTER_KEY, "IPX_SERVING_UPSTREAM_KEY": "sk-x"}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def write_config(self, cfg: dict[str, Any] | str) -> None:
        self.config_path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=MASTER_KEY, max_retries=retries, timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc.poll() is None or text in self.log(), f"exited {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"{text!r} not logged:\n{self.log()}"
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 60) -> None:
        wait_ready(self.url, self.proc, self.log, timeout)

    def ready_pid(self) -> int:
        """The pid of the worker that answered `/health/ready` on a new connection."""
        with httpx.Client() as c:
            pid: int = c.get(self.url + "/health/ready", timeout=5).json()["pid"]
            return pid

    def worker_pids(self, expected: int, tries: int = 400) -> set[int]:
        """The distinct pids answering on new connections, until `expected` of them answered."""
        seen: set[int] = set()
        for _ in range(tries):
            seen.add(self.ready_pid())
            if len(seen) >= expected:
                break
        return seen

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        else:  # its workers may outlive it only by a moment (they are sent SIGTERM when it dies)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(cfg: dict[str, Any], workers: int = 1, ready: bool = True) -> Served:
        served = Served(tmp_path, cfg, workers)
        started.append(served)
        if ready:
            served.wait_ready()
        return served

    yield start
    for served in started:
        served.kill()
