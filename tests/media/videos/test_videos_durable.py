"""Video jobs are durable rows: a job outlives the gateway process that started it, and replicas sharing
PostgreSQL poll each job one at a time and settle it once. The gateways here are `inferplex serve` processes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from tests.accounts.conftest import Admin
from tests.fakes.openai_videos_upstream import FakeSora
from tests.gateway_server import free_port, serve_command
from tests.media.videos.conftest import MASTER, PRICES, balance, env, new_key, up, video_config, wait_for, write_config

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")


def _start(config: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = serve_command(config, port)
    with open(config.parent / f"gateway-{port}.log", "wb") as log:  # the process keeps its own handle
        proc = subprocess.Popen(command, env=env(), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        up(url)
    except BaseException:
        proc.kill()
        raise
    return proc, url


@contextmanager
def serving(config: Path, count: int = 1) -> Iterator[list[str]]:
    started = [_start(config) for _ in range(count)]
    try:
        yield [url for _, url in started]
    finally:
        for proc, _ in started:
            proc.terminate()
        for proc, _ in started:
            proc.wait(15)


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=url + "/v1", max_retries=0, timeout=30)


def test_a_job_survives_a_gateway_crash_mid_generation(sora: FakeSora, tmp_path: Path) -> None:
    sora.polls_needed, sora.duration_s = 2, 4.0
    path = write_config(video_config(sora, tmp_path, lease_s=2), tmp_path / "config.yaml")
    proc, url = _start(path)
    try:
        admin = Admin(url, MASTER)
        key, account = new_key(admin)
        admin.close()
        video = _client(url, key).videos.create(model="sora-2", prompt="through a crash", seconds="8")
        theirs = sora.created[-1]["id"]
        wait_for(lambda: sora.polls.get(theirs, 0) >= 1)  # the first gateway is polling it
    finally:
        proc.kill()  # no shutdown: a crash
        proc.wait(15)
    assert sora.jobs[theirs].status != "completed"
    with serving(path) as (again,):
        c = _client(again, key)
        done = wait_for(lambda: (v := c.videos.retrieve(video.id)).status == "completed" and v, timeout=30)
        assert done.id == video.id
        assert c.videos.download_content(video.id).content == sora.content_bytes(theirs)
        admin = Admin(again, MASTER)
        wait_for(lambda: balance(admin, account) == 50_000_000 - 8 * PRICES["720x1280"])
        kinds = [row["kind"] for row in admin.ledger(account)]
        assert kinds.count("settle") == 1
        admin.close()


def test_two_replicas_on_postgresql_never_poll_one_job_at_once(sora: FakeSora, tmp_path: Path, pg_url: str) -> None:
    """Each status call takes 150 ms and both replicas look for due jobs every 20 ms: were a job ever claimed
    by both, the fake would see two calls on it at once. Each job is settled exactly once."""
    sora.polls_needed, sora.status_delay_s = 4, 0.15
    config = video_config(
        sora, tmp_path, pg_url, tick_s=0.02, poll_initial_s=0.01, poll_max_s=0.03, lease_s=5, max_concurrent_per_key=50
    )
    path = write_config(config, tmp_path / "config.yaml")
    with serving(path, 2) as urls:
        admin = Admin(urls[0], MASTER)
        key, account = new_key(admin, credits=100_000_000)
        made = [
            _client(urls[i % 2], key).videos.create(model="sora-2", prompt=f"replica job {i}").id for i in range(16)
        ]
        for i, video_id in enumerate(made):
            c = _client(urls[(i + 1) % 2], key)
            wait_for(lambda v=video_id, c=c: c.videos.retrieve(v).status == "completed", timeout=60)  # type: ignore[misc]
        assert len(sora.max_in_flight) == 16
        assert max(sora.max_in_flight.values()) == 1, sora.max_in_flight
        assert sora.wrong_key == []
        wait_for(lambda: balance(admin, account) == 100_000_000 - 16 * 4 * PRICES["720x1280"])
        ledger = admin.ledger(account)
        settles = [row["request_id"] for row in ledger if row["kind"] == "settle"]
        assert len(settles) == len(set(settles)) == 16
        assert sum(row["amount_micros"] for row in ledger) == balance(admin, account)
        admin.close()
