"""`inferplex serve --workers 2` on one port, no Redis: the supervisor runs the coordinator, and a limit holds
across its workers exactly; when the coordinator is killed, the supervisor starts it again and limits hold
again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from inferplex.shared_state import answers
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import free_port
from tests.shared_state.conftest import MASTER, statuses, stop


@pytest.fixture
def served(fake_openai: FakeOpenAI, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    config = billing_config(fake_openai, tmp_path)
    config["server"]["master_key"] = "env:INFERPLEX_TEST_MASTER"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    env = {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}
    env.pop("INFERPLEX_SHARED_STATE", None)
    command = [sys.executable, "-m", "inferplex", "serve", "--config", str(path), "--port", str(port), "--workers", "2"]
    with (tmp_path / "serve.log").open("wb") as log:  # a file, not a pipe: a full pipe would block the server
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_two_workers(url, proc, tmp_path / "serve.log")
        yield url, proc
    finally:
        stop(proc)


def _wait_for_two_workers(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until two distinct worker pids answer on the port (each request on a new connection)."""
    pids: set[int] = set()
    deadline = time.monotonic() + 90
    while len(pids) < 2:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"two workers did not answer: {pids}"
        try:
            r = httpx.get(url + "/health/ready")
            if r.status_code == 200:
                pids.add(r.json()["pid"])
        except httpx.HTTPError:
            time.sleep(0.1)


def _burst(url: str, key: str, n: int) -> list[int]:
    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n)) as client:
            body = {"model": "priced", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2}
            calls = [
                client.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
                for _ in range(n)
            ]
            return statuses(await asyncio.gather(*calls))

    return asyncio.run(run())


def _coordinator(supervisor: int) -> psutil.Process | None:
    """The supervisor's live coordinator process, if it has one."""
    for child in psutil.Process(supervisor).children():
        try:
            if "inferplex.shared_state" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                return child
        except psutil.Error:  # gone, or a zombie not yet reaped
            continue
    return None


def _listening(coordinator: psutil.Process) -> bool:
    command = coordinator.cmdline()
    return answers(command[command.index("--socket") + 1])


def test_a_60_a_minute_key_admits_exactly_60_of_200_across_the_workers_of_one_server(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, _ = served
    admin = Admin(url, MASTER)
    rule = {"metric": "requests", "period": "minute", "max": 60}
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule])["key"]
    got = _burst(url, key, 200)
    assert (got.count(200), got.count(429)) == (60, 140)
    admin.close()


def test_the_supervisor_restarts_a_killed_coordinator_and_limits_hold_again(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, proc = served
    admin = Admin(url, MASTER)
    first = _coordinator(proc.pid)
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (found := _coordinator(proc.pid)) is None or found.pid == first.pid or not _listening(found):
        assert time.monotonic() < deadline, "the coordinator was not restarted"
        time.sleep(0.1)
    key = admin.create_key(credits_micros=10**6, rpm=5)["key"]
    got = _burst(url, key, 20)
    assert (got.count(200), got.count(429)) == (5, 15)
    admin.close()
