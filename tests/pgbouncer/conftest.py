"""Fixtures for PostgreSQL behind PgBouncer in transaction mode: Debian's pgbouncer (installed with apt-get
when missing and we may, else the tests are skipped saying why) on a free port in front of 127.0.0.1:5432,
a fresh database per test module, and gateway apps whose `storage.database_url` is the pooler.

The pooler keeps few server sessions (`default_pool_size` 3) for many clients, so consecutive statements of
one client land on different sessions all the time: what a busy production pooler does now and then, and
what makes a statement prepared by name, a LISTEN or a session lock fail here at once instead of rarely.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.accounts.conftest import billing_config, own_database
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port

MASTER = "ipx-pgbouncer-test-master"
SERVER_SESSIONS = 3  # PgBouncer's default_pool_size: server sessions per database, shared by every client


def _install_pgbouncer() -> str | None:
    """Make `pgbouncer` exist: None when it does, else why it cannot (the reason to skip)."""
    if shutil.which("pgbouncer") is not None:
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "no pgbouncer, and installing it needs root and apt-get (apt-get install pgbouncer)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command, limit in ((["apt-get", "update"], 300), (["apt-get", "install", "-y", "pgbouncer"], 600)):
        try:
            subprocess.run(command, env=env, check=True, timeout=limit, capture_output=True)
        except (OSError, subprocess.SubprocessError) as error:
            return f"no pgbouncer, and `{' '.join(command)}` failed: {error}"
    return None if shutil.which("pgbouncer") else "apt-get installed pgbouncer, but it is not on PATH"


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: the port it listens on, and its log (what it said about our sessions)."""

    port: int
    log: Path

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def show(self, what: str) -> list[dict[str, str]]:
        """`SHOW <what>` on PgBouncer's admin console (psql: the console speaks only the simple protocol)."""
        command = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "pgbouncer", "--csv"]
        out = subprocess.run([*command, "-c", f"SHOW {what}"], capture_output=True, text=True, check=True, timeout=10)
        return list(csv.DictReader(io.StringIO(out.stdout)))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def bouncer() -> Iterator[Bouncer]:
    """PgBouncer in transaction mode in front of the local PostgreSQL, every database passed through, trust
    auth; stopped (and its directory removed) afterwards, also when a test fails."""
    reason = _install_pgbouncer()
    if reason is not None:
        pytest.skip(reason)
    tmp = Path(tempfile.mkdtemp(prefix="ipx-pgbouncer-"))
    port = free_port()
    (tmp / "userlist.txt").write_text('"postgres" ""\n')
    (tmp / "pgbouncer.ini").write_text(
        "[databases]\n"
        "* = host=127.0.0.1 port=5432\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp / 'userlist.txt'}\n"
        "pool_mode = transaction\nserver_round_robin = 1\n"
        f"default_pool_size = {SERVER_SESSIONS}\nmax_client_conn = 1000\n"
        f"logfile = {tmp / 'pgbouncer.log'}\n"
        "admin_users = postgres\n"
    )
    command = ["pgbouncer", str(tmp / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: it switches to the database's system user
        shutil.chown(tmp, "postgres")
        for f in tmp.iterdir():
            shutil.chown(f, "postgres")
        command[1:1] = ["-u", "postgres"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "pgbouncer exited"
            assert time.monotonic() < deadline, "pgbouncer did not start listening"
            time.sleep(0.05)
        yield Bouncer(port, tmp / "pgbouncer.log")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A fresh PostgreSQL database of the module's own (its name), dropped afterwards."""
    with own_database("inferplex_pgbouncer_") as url:
        yield url.rsplit("/", 1)[1]


def direct_url(database: str) -> str:
    return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}"


def pooled_config(fake: FakeOpenAI, database: str, bouncer: Bouncer, *, direct: bool, **storage: Any) -> dict[str, Any]:
    """The accounts tests' config (priced models, sleep-300), its store reached through `bouncer` in
    transaction mode, with PostgreSQL's own URL for sessions when `direct`."""
    extra = {"pooler": "transaction", "pool_size": 5, **storage}
    if direct:
        extra["direct_database_url"] = direct_url(database)
    tmp = Path(tempfile.mkdtemp(prefix="ipx-test-"))
    config = billing_config(fake, tmp, bouncer.url(database), storage=extra, accounts={"max_queue_wait_s": 20})
    config["server"]["data_dir"] = str(tmp)
    return config


def start_together(configs: list[dict[str, Any]]) -> list[GatewayServer]:
    """One gateway app per config, started at the same moment (so their migrations race, as replicas' do);
    every one that started is stopped again if another fails to."""
    servers = [GatewayServer(c, MASTER) for c in configs]
    errors: list[BaseException] = []

    def start(server: GatewayServer) -> None:
        try:
            server.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        for s in servers:
            s.stop()
        raise errors[0]
    return servers


@pytest.fixture(scope="module")
def apps(fake_openai: FakeOpenAI, database: str, bouncer: Bouncer) -> Iterator[list[GatewayServer]]:
    """Two gateway apps sharing the database through PgBouncer, each listening for key changes on
    PostgreSQL itself (`storage.direct_database_url`)."""
    servers = start_together([pooled_config(fake_openai, database, bouncer, direct=True) for _ in range(2)])
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def eventually(check: Callable[[], bool], within_s: float = 10.0) -> None:
    """Wait until `check()` holds (the usage log writes its rows in the background), at most `within_s`."""
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)
