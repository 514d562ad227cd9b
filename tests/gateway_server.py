"""Runs the real gateway (uvicorn, real sockets) in a background thread for tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from inferplex.app import create_app
from inferplex.config import Config, parse_config
from inferplex.http_server import GatewayHTTPProtocol


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_command(config: Path | str, port: int) -> list[str]:
    """`inferplex serve` as one process (`--workers 1`) on `port`: what a test that starts, kills or restarts
    a gateway process means by one (serve's default is a supervisor with a worker per core)."""
    return [sys.executable, "-m", "inferplex", "serve", "--config", str(config), "--port", str(port), "--workers", "1"]


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Callable[[], str], timeout: float = 60) -> None:
    """Until a gateway process answers `GET /health/ready` with 200 (serving, not draining); failing with its
    log if it exits first or is not ready within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log()}"
        try:
            if httpx.get(url + "/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"not ready within {timeout:g} s:\n{log()}"
        time.sleep(0.1)


class GatewayServer:
    def __init__(self, config: Config | dict[str, Any], master_key: str = "ipx-test-master-key") -> None:
        if isinstance(config, dict) and "data_dir" not in config.get("server", {}):
            # Each test gateway keeps its SQLite store and generated secrets in a directory of its own.
            config = {
                **config,
                "server": {**config.get("server", {}), "data_dir": tempfile.mkdtemp(prefix="ipx-test-")},
            }
        self.config = config if isinstance(config, Config) else parse_config(config, "<test>")
        self.master_key = master_key
        self.port = free_port()
        app = create_app(self.config, master_key)
        uv_config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            loop="asyncio",
            http=GatewayHTTPProtocol,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
            proxy_headers=False,  # as `inferplex serve`: X-Forwarded-For counts only from accounts.trusted_proxies
        )
        self.server = uvicorn.Server(uv_config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.master_key}"}

    def start(self) -> GatewayServer:
        self._thread = threading.Thread(target=self.server.run, daemon=True, name=f"gateway-{self.port}")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)

    def __enter__(self) -> GatewayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
