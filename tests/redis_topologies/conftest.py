"""Real local Redis topologies for the gateway's Redis users: a Cluster (3 masters, each with a replica) and a
Sentinel set-up (a master, a replica, one sentinel), started from `redis-server` on free ports in a temporary
directory and stopped at the end, whatever happened. `redis-server` is installed with apt-get when missing and
we may; else the tests are skipped, saying why."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.accounts.conftest import pg_url  # noqa: F401  (a fixture: a PostgreSQL database of the module's own)
from tests.conftest import UPSTREAM_KEY
from tests.fakes.flip_upstream import FlipOpenAI

SERVICE = "inferplex-test"
# A node that stops answering for a second is failed over by its replica (Redis's default waits 15 s).
CLUSTER_NODE = ("--cluster-enabled", "yes", "--cluster-node-timeout", "1000")


def _install_redis() -> str | None:
    """None when `redis-server` and `redis-cli` exist (installing them if we may), else why not."""
    if shutil.which("redis-server") and shutil.which("redis-cli"):
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "redis-server is missing, and installing it needs root and apt-get (apt-get install redis-server)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server", "redis-tools"]):
        try:
            subprocess.run(command, env=env, check=True, timeout=600, capture_output=True)
        except (OSError, subprocess.SubprocessError) as error:
            return f"redis-server is missing, and `{' '.join(command)}` failed: {error}"
    return None if shutil.which("redis-server") else "apt-get ran, but redis-server is still missing"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """`n` ports free now, each with its cluster bus port (port + 10000) free too."""
    out: list[int] = []
    while len(out) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port < 55000 and port not in out and _free(port + 10000):
            out.append(port)
    return out


def eventually(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"not within {within_s}s: {what}"
        time.sleep(0.1)


class Servers:
    """`redis-server` processes of one test set-up; `stop` ends every one it started."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, port: int, *args: str, config: str | None = None) -> None:
        logfile = (self.tmp / f"redis-{port}.log").open("wb")
        command = ["redis-server", *([config] if config else []), "--port", str(port), "--dir", str(self.tmp)]
        command += ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1", *args]
        self.procs[port] = subprocess.Popen(command, stdout=logfile, stderr=subprocess.STDOUT)
        eventually(lambda: redis.Redis(port=port).ping(), 10, f"redis-server on {port} answers")

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.clear()


@pytest.fixture(scope="module")
def redis_binaries() -> None:
    reason = _install_redis()
    if reason is not None:
        pytest.skip(reason)


class Cluster:
    def __init__(self, servers: Servers, ports: list[int]) -> None:
        self.servers = servers
        self.ports = ports

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:2])

    @property
    def live(self) -> list[int]:
        """The nodes still running (a test may have killed one)."""
        return [p for p in self.ports if p in self.servers.procs]

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0])

    def master_of(self, key: str) -> int:
        with self.client() as c:
            node = c.get_node_from_key(key)
            assert node is not None
            return int(node.port)

    def replica_of(self, master: int) -> int:
        for port in self.ports:
            info = redis.Redis(port=port).info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == master:
                return port
        raise AssertionError(f"no replica of {master}")


@pytest.fixture(scope="module")
def cluster(redis_binaries: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three masters, each with one replica, formed by `redis-cli --cluster create` and waited for until every
    node says the cluster is ok."""
    tmp = tmp_path_factory.mktemp("cluster")
    servers = Servers(tmp)
    ports = free_ports(6)
    try:
        for port in ports:
            servers.start(port, *CLUSTER_NODE, "--cluster-config-file", f"nodes-{port}.conf")
        nodes = [f"127.0.0.1:{p}" for p in ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )

        def ok() -> bool:
            return all(cluster_ok(p) for p in ports)

        eventually(ok, 30, "the cluster is ok on every node")
        eventually(lambda: all(_replica_in_sync(p) for p in ports), 30, "every replica is in sync")
        yield Cluster(servers, ports)
    finally:
        servers.stop()


def cluster_ok(port: int) -> bool:
    return bool(redis.Redis(port=port).execute_command("CLUSTER INFO")["cluster_state"] == "ok")


def _replica_in_sync(port: int) -> bool:
    info = redis.Redis(port=port).info("replication")
    return info["role"] == "master" or info.get("master_link_status") == "up"


class SentinelSetup:
    def __init__(self, servers: Servers, master: int, replica: int, sentinel: int) -> None:
        self.servers = servers
        self.ports = (master, replica)
        self.sentinel = sentinel

    def url(self, db: int = 0) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/{SERVICE}/{db}"

    def master(self) -> int:
        addr = redis.Redis(port=self.sentinel).execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(addr[1])

    def has_replica(self) -> bool:
        """The sentinel knows a healthy replica: one it could promote."""
        replicas = redis.Redis(port=self.sentinel).sentinel_slaves(SERVICE)
        return any(r["is_slave"] and not r["is_sdown"] and not r["is_disconnected"] for r in replicas)


@pytest.fixture(scope="module")
def sentinel(redis_binaries: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A master, its replica, and one sentinel (quorum 1) that has seen the replica: ready to fail over."""
    tmp = tmp_path_factory.mktemp("sentinel")
    servers = Servers(tmp)
    master, replica, sentinel_port = free_ports(3)
    conf = tmp / "sentinel.conf"
    conf.write_text(
        f"sentinel monitor {SERVICE} 127.0.0.1 {master} 1\n"
        f"sentinel down-after-milliseconds {SERVICE} 1000\n"
        f"sentinel failover-timeout {SERVICE} 5000\n"
        f"sentinel parallel-syncs {SERVICE} 1\n"
    )
    try:
        servers.start(master)
        servers.start(replica, "--replicaof", "127.0.0.1", str(master))
        servers.start(sentinel_port, "--sentinel", config=str(conf))
        eventually(lambda: _replica_in_sync(replica), 30, "the replica is in sync")

        setup = SentinelSetup(servers, master, replica, sentinel_port)
        eventually(setup.has_replica, 30, "the sentinel has seen the replica")
        yield setup
    finally:
        servers.stop()


@pytest.fixture(scope="module")
def ups() -> Iterator[list[FlipOpenAI]]:
    """Two upstreams a test can break (p0) and keep working (p1), for the breaker tests."""
    started = [FlipOpenAI(UPSTREAM_KEY) for _ in range(2)]
    for up in started:
        up.start()
    yield started
    for up in started:
        up.stop()
