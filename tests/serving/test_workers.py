"""`inferplex serve --workers N`: N processes on one port under a supervisor that restarts, drains and reloads
them (real processes, real signals, the openai SDK)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway_server import free_port
from tests.serving.conftest import config
from tests.serving.test_drain import _stream
from tests.serving.upstream import PacedUpstream

HI = [{"role": "user", "content": "hi"}]


class Load:
    """Buffered chats from `threads` threads, each on its own connection pool, until stopped: every
    outcome counted (the SDK does not retry: a dropped request is a failure here)."""

    def __init__(self, served: Any, threads: int = 4, model: str = "ok") -> None:
        self.served, self.model = served, model
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        client = self.served.client()
        while not self._stop.is_set():
            try:
                answer = client.chat.completions.create(model=self.model, messages=HI)
                assert answer.choices[0].message.content == "ok"
                self.ok += 1
            except Exception as exc:
                self.failures.append(repr(exc))

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


def test_n_workers_share_the_port_and_each_answers(serve: Any, upstream: PacedUpstream, tmp_path: Path) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    pids = served.worker_pids(2)
    assert len(pids) == 2 and served.proc.pid not in pids
    assert pids <= _children(served.proc.pid)
    client = served.client()
    for _ in range(10):
        assert client.chat.completions.create(model="ok", messages=HI).choices[0].message.content == "ok"
    log = served.log()
    for pid in pids:
        assert f"[{pid}]" in log  # each worker's log lines carry its pid


def test_a_killed_worker_is_restarted_and_requests_keep_succeeding(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    victim, survivor = sorted(served.worker_pids(2))
    with Load(served) as load:
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        served.wait_log(f"(pid {victim}) exited with code -9: restarting it")
        served.wait_log("restarted (pid")
        time.sleep(2)
    # Requests in flight on the killed worker die with it (the SDK would retry them: max_retries=0 here);
    # every other request succeeded, before, during and after the restart.
    assert load.ok > 20
    assert len(load.failures) <= 4, load.failures
    pids = served.worker_pids(2)
    assert len(pids) == 2 and victim not in pids and survivor in pids


def test_sigterm_drains_every_worker_the_stream_completes_and_exit_is_0(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path, ("ok", "paced-20"), drain_s=10), workers=2)
    served.wait_log("serving with 2 workers")
    pids = served.worker_pids(2)
    started, out = threading.Event(), {}
    reader = threading.Thread(target=_stream, args=(served, "paced-20", started, out))
    reader.start()
    assert started.wait(10)
    served.signal(signal.SIGTERM)
    signalled = time.monotonic()
    time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):  # the socket is closed: new connections are refused
        httpx.get(served.url + "/health", timeout=2)
    reader.join(15)
    assert "error" not in out, out.get("error")
    assert out["text"] == "".join(f"tick {i} " for i in range(20)) and out["usage"] == 20
    assert served.proc.wait(15) == 0
    assert time.monotonic() - signalled < 10
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_sighup_under_load_loses_no_request_and_the_new_config_serves(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    old = served.worker_pids(2)
    with pytest.raises(openai.NotFoundError):
        served.client().chat.completions.create(model="added", messages=HI)
    with Load(served) as load:
        time.sleep(0.5)
        served.write_config(config(upstream, tmp_path, ("ok", "paced-5", "added")))
        served.signal(signal.SIGHUP)
        served.wait_log("new workers serving")
        deadline = time.monotonic() + 30
        while "old worker" not in served.log() or served.log().count("exited with code 0") < 2:
            assert time.monotonic() < deadline, served.log()
            time.sleep(0.1)
        time.sleep(0.5)
    assert load.failures == [] and load.ok > 20
    new = served.worker_pids(2)
    assert len(new) == 2 and not new & old
    answer = served.client().chat.completions.create(model="added", messages=HI)
    assert answer.choices[0].message.content == "ok"


def test_a_bad_config_on_sighup_is_refused_and_the_old_one_keeps_serving(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    old = served.worker_pids(2)
    served.write_config("server: {port: not-a-number}\nmodels: []\n")
    served.signal(signal.SIGHUP)
    served.wait_log("reload refused")
    assert "server.port" in served.log()
    client = served.client()
    for _ in range(5):
        assert client.chat.completions.create(model="ok", messages=HI).choices[0].message.content == "ok"
    assert served.worker_pids(2) == old
    assert served.proc.poll() is None


def _restarted_pid(served: Any, after: int) -> int:
    """The pid of the worker restarted after the one whose pid was `after` died."""
    served.wait_log(f"(pid {after}) exited with code -9: restarting it")
    deadline = time.monotonic() + 30
    while True:
        tail = served.log().split(f"(pid {after}) exited with code -9", 1)[1]
        if "restarted (pid " in tail:
            return int(tail.split("restarted (pid ", 1)[1].split(")", 1)[0])
        assert time.monotonic() < deadline, served.log()
        time.sleep(0.05)


def test_a_worker_that_keeps_dying_makes_the_supervisor_give_up_loudly(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    pid = served.ready_pid()
    for _ in range(4):  # the first four deaths are restarted, each after a longer back-off
        os.kill(pid, signal.SIGKILL)
        pid = _restarted_pid(served, pid)
    os.kill(pid, signal.SIGKILL)  # the fifth within a minute
    assert served.proc.wait(60) == 1
    assert "died 5 times within 60 s (last exit code -9): giving up" in served.log()


def test_the_shared_state_coordinator_is_restarted_when_it_dies(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path), workers=2)
    served.wait_log("serving with 2 workers")
    line = next(x for x in served.log().splitlines() if "shared-state coordinator at" in x)
    path, pid = line.split(" at ", 1)[1].split(" (pid ")
    os.kill(int(pid.rstrip(")")), signal.SIGKILL)
    served.wait_log("shared-state coordinator exited with code -9: restarting it")
    deadline = time.monotonic() + 30
    while served.log().count(f"shared-state coordinator at {path}") < 2:
        assert time.monotonic() < deadline, served.log()
        time.sleep(0.05)
    client = served.client()
    for _ in range(5):
        assert client.chat.completions.create(model="ok", messages=HI).choices[0].message.content == "ok"


def test_a_separate_metrics_listener_is_served_by_one_worker_and_every_worker_starts(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    listen = free_port()
    cfg = config(upstream, tmp_path)
    cfg["observability"] = {"metrics": {"listen": f"127.0.0.1:{listen}"}}
    served = serve(cfg, workers=2)
    served.wait_log("serving with 2 workers")
    assert len(served.worker_pids(2)) == 2
    scrape = httpx.get(f"http://127.0.0.1:{listen}/metrics")
    assert scrape.status_code == 200 and "inferplex_" in scrape.text
