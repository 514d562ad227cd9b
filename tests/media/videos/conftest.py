"""Video jobs: a strict fake Sora upstream reached through two providers with different keys, gateways in front
of it (in-process on SQLite, or `inferplex serve` processes on SQLite or PostgreSQL), and keys with credit."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.accounts.conftest import Admin, own_database
from tests.fakes.openai_videos_upstream import FakeSora
from tests.gateway_server import GatewayServer

KEY_A, KEY_B = "sk-sora-deployment-a", "sk-sora-deployment-b"
MASTER = "ipx-videos-test-master"
# USD per second: 720x1280 at 0.10 (sora-2's published price), 1024x1792 at 0.50 (sora-2-pro's high resolution).
PRICES = {"720x1280": 100_000, "1280x720": 100_000, "1024x1792": 500_000, "1792x1024": 500_000}  # micro-USD/s


@pytest.fixture(scope="session", autouse=True)
def _sora_keys() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("SORA_KEY_A", KEY_A)
    mp.setenv("SORA_KEY_B", KEY_B)
    mp.setenv("VIDEOS_TEST_MASTER", MASTER)
    yield
    mp.undo()


@pytest.fixture
def sora() -> Iterator[FakeSora]:
    fake = FakeSora(keys={KEY_A, KEY_B}, polls_needed=3).start()
    yield fake
    fake.stop()


def video_config(sora: FakeSora, data_dir: Path, database_url: str | None = None, **jobs: Any) -> dict[str, Any]:
    """`sora-2` on two deployments (providers `sora-a` and `sora-b`, each its own key), `sora-2-pro` on `sora-b`
    alone, priced per second by resolution; the poller quick (tests wait seconds, not minutes)."""
    provider = {"kind": "openai", "base_url": sora.base_url, "timeouts": {"connect": 2, "read": 10}}
    pricing = {"video_second": "0.10", "video_second_by": {"1024x1792": "0.50", "1792x1024": "0.50"}}
    return {
        "server": {"data_dir": str(data_dir), "master_key": "env:VIDEOS_TEST_MASTER"},
        "providers": [
            {"name": "sora-a", "api_key": "env:SORA_KEY_A", **provider},
            {"name": "sora-b", "api_key": "env:SORA_KEY_B", **provider},
        ],
        "models": [
            {
                "name": "sora-2",
                "type": "video",
                "deployments": [{"provider": "sora-a", "model": "sora-2"}, {"provider": "sora-b", "model": "sora-2"}],
                "pricing": pricing,
            },
            {
                "name": "sora-2-pro",
                "type": "video",
                "deployments": [{"provider": "sora-b", "model": "sora-2-pro"}],
                "pricing": pricing,
            },
        ],
        "storage": {"database_url": database_url or f"sqlite:///{data_dir / 'inferplex.db'}"},
        "jobs": {"tick_s": 0.05, "poll_initial_s": 0.05, "poll_max_s": 0.2, "lease_s": 5, **jobs},
    }


def gateway(config: dict[str, Any]) -> GatewayServer:
    return GatewayServer(config, MASTER)


@pytest.fixture
def server(sora: FakeSora, tmp_path: Path) -> Iterator[GatewayServer]:
    with gateway(video_config(sora, tmp_path, max_concurrent_per_key=50)) as s:
        yield s


@pytest.fixture
def admin(server: GatewayServer) -> Iterator[Admin]:
    a = Admin(server.url, MASTER)
    yield a
    a.close()


def new_key(admin: Admin, credits: int = 50_000_000, **body: Any) -> tuple[str, str]:
    """A key with an account of its own holding `credits` micro-USD: (secret, account id)."""
    made = admin.create_key(credits_micros=credits, **body)
    return made["key"], made["account_id"]


def wait_for(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(every)


def balance(admin: Admin, account: str) -> int:
    return int(admin.account(account)["balance_micros"])


@pytest.fixture
def pg_url() -> Iterator[str]:
    with own_database("inferplex_videos_") as url:
        yield url


def write_config(config: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def env() -> dict[str, str]:
    return {**os.environ, "SORA_KEY_A": KEY_A, "SORA_KEY_B": KEY_B, "VIDEOS_TEST_MASTER": MASTER}


def up(url: str, timeout: float = 60.0) -> None:
    def ok() -> bool:
        try:
            return httpx.get(url + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ok, timeout, 0.1)
