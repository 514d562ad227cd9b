"""A fleet as it is deployed: three `inferplex serve --workers 1` replicas behind HAProxy, with the shipped
config (deploy/haproxy/haproxy.cfg), sharing a PostgreSQL database and Redis prefixes of the test's own.

The replicas are real processes, killed and stopped with real signals; HAProxy is Debian's (installed when
missing, as a fresh CI machine needs). The upstream is the fake OpenAI server holding each call 300 ms (so
requests overlap), counting what is in flight per `user` (each key's load names its own), which is how a
test sees a concurrency limit from outside the gateway.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from aiohttp import web

from tests.accounts.conftest import REDIS_URL, billing_config, migrated_db, own_database, pg_url
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import free_port, wait_ready
from tests.replicas import forget_redis_prefix

HAPROXY_CFG = Path(__file__).parents[2] / "deploy" / "haproxy" / "haproxy.cfg"
MASTER = "ipx-fleet-master-key"
# storage.redis_lease_s: a lost replica's slots and reservations come back within about this. Not shorter: a
# replica starved of CPU for longer than its lease (this machine is shared) would be taken for lost.
LEASE_S = 10.0
DRAIN_DELAY_S = 3.0  # server.drain_delay_s: above what HAProxy's checks need to take a replica out (2-3 s)
DRAIN_S = 15.0

__all__ = ["migrated_db", "pg_url"]  # the store fixtures, for test_liveness.py


class CountingUpstream(FakeOpenAI):
    """The fake OpenAI upstream, also counting calls in flight (and the most at once) per `user`."""

    def __init__(self) -> None:
        super().__init__(os.environ.get("FAKE_UPSTREAM_KEY", "sk-fake-upstream"))
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        user = str(orjson.loads(await request.read()).get("user", ""))
        self.calls[user] += 1
        self.in_flight[user] += 1
        self.most[user] = max(self.most[user], self.in_flight[user])
        try:
            return await super().chat(request)
        finally:
            self.in_flight[user] -= 1


class Replica:
    """One `inferplex serve` process on a fixed port (a replacement takes the same port and data directory)."""

    def __init__(self, name: str, config: Path, env: dict[str, str]) -> None:
        self.name, self.config, self.env = name, config, env
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix=f"ipx-fleet-{name}-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "inferplex", "serve", "--config", str(self.config)]
        command += ["--port", str(self.port), "--workers", "1"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 60) -> None:
        assert self.proc is not None, f"{self.name} was not started"
        wait_ready(self.url, self.proc, lambda: f"{self.name}\n{self.tail()}", timeout)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


class HAProxy:
    """Debian's haproxy on the shipped config, the replicas' addresses in its environment."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.port, self.stats_port = free_port(), free_port()
        env = {**os.environ, "INFERPLEX_LB_BIND": f"127.0.0.1:{self.port}"}
        env["INFERPLEX_LB_STATS"] = f"127.0.0.1:{self.stats_port}"
        env.update({f"INFERPLEX_GW{i + 1}": f"127.0.0.1:{r.port}" for i, r in enumerate(replicas)})
        self.log = Path(tempfile.mkstemp(prefix="ipx-fleet-haproxy-", suffix=".log")[1])
        with self.log.open("ab") as out:
            command = [_haproxy(), "-db", "-f", str(HAPROXY_CFG)]
            self.proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def states(self) -> dict[str, str]:
        """Each gateway server's status as HAProxy sees it (UP, DOWN, ...)."""
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2).text.lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "gateways" and r["svname"].startswith("gw")}

    def wait_until(self, server: str, status: str, timeout: float = 30) -> float:
        """Wait until `server` is `status` (UP, DOWN); how long it took."""
        start = time.monotonic()
        while (seen := self._state(server)) != status:
            assert time.monotonic() - start < timeout, f"{server} is {seen}, not {status}"
            time.sleep(0.1)
        return time.monotonic() - start

    def _state(self, server: str) -> str:
        assert self.proc.poll() is None, self.log.read_text(errors="replace")[-2000:]
        try:
            return self.states().get(server, "?").split(" ")[0]
        except httpx.HTTPError:
            return "?"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def _haproxy() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "haproxy"], check=True, capture_output=True)
        found = shutil.which("haproxy", path="/usr/sbin:/sbin:/usr/bin")
    assert found is not None, "haproxy is not installed and could not be"
    return found


class Fleet:
    def __init__(self, replicas: list[Replica], lb: HAProxy, upstream: CountingUpstream) -> None:
        self.replicas, self.lb, self.upstream = replicas, lb, upstream

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.lb.url, headers={"Authorization": f"Bearer {MASTER}"}, timeout=30)


def _config(upstream: CountingUpstream, tmp: Path, database_url: str, prefix: str) -> dict[str, Any]:
    config = billing_config(upstream, tmp, database_url)
    config["providers"][0]["timeouts"] = {"connect": 5, "read": 15}  # a loaded machine is not an upstream fault
    config["server"].update(master_key="env:INFERPLEX_TEST_MASTER", drain_delay_s=DRAIN_DELAY_S, drain_s=DRAIN_S)
    config["storage"].update(
        redis_url=REDIS_URL,
        redis_prefix=prefix + "limits:",
        redis_lease_s=LEASE_S,
        pool_size=4,
        spool_flush_s=0.5,
    )
    config["routing"] = {"redis_url": REDIS_URL, "redis_prefix": prefix + "routing:"}
    config["accounts"] = {"max_queue_wait_s": 5}
    return config


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Three replicas (each its own data directory: its spool), HAProxy in front, all up and checked UP."""
    upstream = CountingUpstream()
    upstream.start()
    prefix = f"inferplex_test:fleet:{os.urandom(6).hex()}:"
    replicas: list[Replica] = []
    lb: HAProxy | None = None
    try:
        with own_database("inferplex_fleet_") as database_url:
            env = {**os.environ, "INFERPLEX_TEST_MASTER": MASTER, "FAKE_UPSTREAM_KEY": upstream.state.api_key}
            for name in ("gw1", "gw2", "gw3"):
                data = tmp_path / name
                data.mkdir()
                path = tmp_path / f"{name}.yaml"
                path.write_text(yaml.safe_dump(_config(upstream, data, database_url, prefix)))
                replicas.append(Replica(name, path, env))
            for replica in replicas:
                replica.start()
            for replica in replicas:
                replica.wait_ready()
            lb = HAProxy(replicas)
            for replica in replicas:
                lb.wait_until(replica.name, "UP")
            yield Fleet(replicas, lb, upstream)
            for replica in replicas:  # before the database is dropped
                replica.stop()
    finally:
        if lb is not None:
            lb.stop()
        for replica in replicas:
            replica.stop()
        upstream.stop()
        forget_redis_prefix(prefix)
