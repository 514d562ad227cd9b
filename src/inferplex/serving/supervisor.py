"""The supervisor of `inferplex serve --workers N`: one listening socket, N worker processes.

- The socket is bound once, here, and inherited by every worker (serving/worker.py), which all accept on
  it: the kernel hands each connection to one waiting worker. (SO_REUSEPORT, a socket per worker, balances
  by a hash of the connection instead, but a worker that stops accepting takes the connections queued on
  its own socket with it: a drain or a reload would reset them. docs/deploy.md has the measurements.)
- Migrations run once, here, before any worker starts; the shared-state coordinator (limits and breakers
  global across workers without Redis) is started here too, and its address given to the workers, and so
  is a private directory where the workers leave snapshots of their metrics, so that `/metrics` on any
  worker reports the whole server (observe/metrics_workers.py); it is removed when the supervisor exits.
- A worker that dies is restarted, after a back-off that grows while it keeps dying; a slot that dies
  `BURST` times within `BURST_WINDOW_S` makes the supervisor give up: it drains the rest and exits 1,
  loudly, rather than loop.
- SIGTERM and SIGINT are forwarded to every worker as a drain (serving/drain.py); the supervisor exits 0
  once they have (each within its grace).
- SIGHUP reloads: the config is re-read and checked as at start (a bad one is refused with a log line, and
  the workers keep serving the old), its migrations run, a new set of workers starts, and once every new
  worker serves, the old ones are drained one at a time. Both sets accept on the same socket meanwhile, so
  no connection is refused and no request dropped. (`--host`/`--port` are the socket's: they need a restart.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from inferplex.config import Config
from inferplex.serving.worker import worker_count

log = logging.getLogger("inferplex")

TICK_S = 0.05
START_S = 120.0  # a worker that has not started serving by then is counted as failed
BURST = 5  # deaths of one slot within BURST_WINDOW_S: the supervisor gives up
BURST_WINDOW_S = 60.0
BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 4.0)  # before the 1st, 2nd, ... restart of a slot within the window
BACKLOG = 2048
EXTRA_STOP_S = 15.0  # past a worker's own drain bound before the supervisor kills it


@dataclass(frozen=True, slots=True)
class Plan:
    """What `serve` was asked on its command line: these outlive a reload (the config file may not)."""

    host: str
    port: int
    source: str | None  # the config file, re-read on SIGHUP; None: the embedded defaults
    workers: int | None  # `--workers`, which wins over `server.workers`


@dataclass(slots=True)
class Worker:
    slot: int
    generation: int
    proc: subprocess.Popen[bytes]
    ready: bool = False
    draining_since: float | None = None


@dataclass(slots=True)
class _Slot:
    """A slot's recent deaths (for the back-off and the give-up) and when it is due to be restarted."""

    deaths: list[float] = field(default_factory=list)
    restart_at: float | None = None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket every worker inherits."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def migrate(config: Config) -> None:
    """Apply pending migrations once, before any worker starts (a worker's start then finds none)."""
    from inferplex.accounts.wiring import database_url
    from inferplex.store.engine import open_database

    async def run() -> None:
        storage = config.storage  # a pooler and a direct URL as the workers see them (docs/deploy.md)
        db = open_database(
            database_url(config), 1, storage.timeout_s, direct_url=storage.direct_database_url, pooler=storage.pooler
        )
        try:
            await db.migrate()
        finally:
            await db.aclose()

    asyncio.run(run())


class Coordinator:
    """The shared-state coordinator (inferplex.shared_state: limits and breakers global across the workers
    without Redis), kept running: restarted when it dies, at most once a second; the workers reconnect."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="inferplex-")
        self.path = str(Path(self._dir) / "shared_state.sock")
        self.proc: subprocess.Popen[bytes] | None = None
        self._next_try = 0.0
        from inferplex.shared_state import spawn

        self._spawn: Callable[[str], subprocess.Popen[bytes]] = spawn

    def start(self) -> None:
        self._next_try = time.monotonic() + 1.0
        try:
            self.proc = self._spawn(self.path)
        except (RuntimeError, OSError) as exc:
            log.error("shared-state coordinator did not start (retrying): %s", exc)
            self.proc = None
            return
        log.info("shared-state coordinator at %s (pid %d)", self.path, self.proc.pid)

    def keep_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            log.error("shared-state coordinator exited with code %s: restarting it", self.proc.returncode)
            self.proc = None
        if self.proc is None and time.monotonic() >= self._next_try:
            self.start()

    def stop(self) -> None:
        if self.proc is not None:
            _wait_or_kill(self.proc, 10, signal.SIGTERM)
            self.proc = None
        shutil.rmtree(self._dir, ignore_errors=True)


class Supervisor:
    def __init__(
        self,
        plan: Plan,
        config: Config,
        load: Callable[[str | None], tuple[Config, str]],
        master_key: Callable[[Config, str | None], str],
    ) -> None:
        self.plan = plan
        self.config = config
        self.load = load  # reads and checks a config as `serve` does at start; raises if it is bad
        self.master_key = master_key
        self.workers: dict[int, Worker] = {}  # the current generation, by slot
        self.old: list[Worker] = []  # a previous generation's, drained one at a time
        self.slots: dict[int, _Slot] = {}
        self.generation = 0
        self.coordinator: Coordinator | None = None
        self._stop: int | None = None
        self._reload = False
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)
        self._ready_buffer = b""
        self._ready_pids: set[int] = set()
        self.sock: socket.socket | None = None
        self.metrics_dir: str | None = None

    # signals: the handlers only note what was asked; the loop does it
    def _on_stop(self, sig: int, frame: FrameType | None) -> None:
        self._stop = sig

    def _on_hup(self, sig: int, frame: FrameType | None) -> None:
        self._reload = True

    def count(self, config: Config) -> int:
        return self.plan.workers or config.server.workers or worker_count()

    def _coordinate(self, config: Config, n: int) -> None:
        """Start the coordinator if these workers need it: several of them, and no `storage.redis_url` (with
        one, the limits and the breakers are kept in Redis, and a coordinator would only hold ~40 MB of memory
        for nothing). Once started it stays (a reload may need it again)."""
        if self.coordinator is None and n > 1 and not config.storage.redis_url:
            self.coordinator = Coordinator()
            self.coordinator.start()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        self.sock = bind(self.plan.host, self.plan.port)
        migrate(self.config)
        self.metrics_dir = tempfile.mkdtemp(prefix="inferplex-metrics-")
        n = self.count(self.config)
        self._coordinate(self.config, n)
        self.generation = 1
        self.workers = {slot: self._spawn(slot, self.config, n) for slot in range(n)}
        log.info("supervisor (pid %d): starting %d workers", os.getpid(), n)
        try:
            return self._loop()
        finally:
            if self.coordinator is not None:
                self.coordinator.stop()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            self.sock.close()
            os.close(self._ready_r)
            os.close(self._ready_w)

    def _loop(self) -> int:
        announced = False
        while True:
            self._read_ready()
            if not announced and all(w.ready for w in self.workers.values()):
                announced = True
                pids = ", ".join(f"{w.slot}: {w.proc.pid}" for w in self.workers.values())
                log.info("serving with %d workers (slot: pid) %s", len(self.workers), pids)
            if self._stop is not None:
                log.warning("%s: draining every worker", signal.Signals(self._stop).name)
                return self._drain_all(0)
            if self._reload:
                self._reload = False
                self._do_reload()
            if self._reap():
                return self._drain_all(1)
            self._drain_old()
            if self.coordinator is not None:
                self.coordinator.keep_alive()
            time.sleep(TICK_S)

    def _spawn(self, slot: int, config: Config, n: int) -> Worker:
        assert self.sock is not None
        env = dict(os.environ)
        env["INFERPLEX_MASTER_KEY"] = self.master_key(config, self.plan.source)
        if self.coordinator is not None:
            env["INFERPLEX_SHARED_STATE"] = self.coordinator.path
        if self.metrics_dir is not None:
            env["INFERPLEX_METRICS_DIR"] = self.metrics_dir  # observe/metrics_workers.py
        cmd = [sys.executable, "-m", "inferplex.serving.worker", "--slot", str(slot), "--workers", str(n)]
        cmd += ["--parent", str(os.getpid())]
        cmd += ["--fd", str(self.sock.fileno()), "--ready-fd", str(self._ready_w)]
        if self.plan.source:
            cmd += ["--config", self.plan.source]
        proc = subprocess.Popen(cmd, env=env, pass_fds=(self.sock.fileno(), self._ready_w))
        return Worker(slot, self.generation, proc)

    def _read_ready(self, *also: Worker) -> None:
        """Note the workers that said they serve (on the shared pipe: one `SLOT PID` line each)."""
        with contextlib.suppress(BlockingIOError):
            self._ready_buffer += os.read(self._ready_r, 65536)
        *lines, self._ready_buffer = self._ready_buffer.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError, IndexError):
                self._ready_pids.add(int(line.split()[1]))
        for worker in [*self.workers.values(), *self.old, *also]:
            if not worker.ready and worker.proc.pid in self._ready_pids:
                worker.ready = True
                self._ready_pids.discard(worker.proc.pid)

    def _reap(self) -> bool:
        """Restart the current workers that died (after their back-off); True if one keeps dying."""
        now = time.monotonic()
        for slot, worker in list(self.workers.items()):
            code = worker.proc.poll()
            state = self.slots.setdefault(slot, _Slot())
            if code is not None and state.restart_at is None:
                state.deaths = [t for t in state.deaths if now - t < BURST_WINDOW_S] + [now]
                if len(state.deaths) >= BURST:
                    log.error(
                        "worker %d died %d times within %.0f s (last exit code %s): giving up",
                        slot,
                        len(state.deaths),
                        BURST_WINDOW_S,
                        code,
                    )
                    return True
                delay = BACKOFF_S[min(len(state.deaths), len(BACKOFF_S)) - 1]
                pid = worker.proc.pid
                log.error("worker %d (pid %d) exited with code %s: restarting it in %.1f s", slot, pid, code, delay)
                state.restart_at = now + delay
            if state.restart_at is not None and now >= state.restart_at:
                state.restart_at = None
                self.workers[slot] = self._spawn(slot, self.config, len(self.workers))
                log.info("worker %d restarted (pid %d)", slot, self.workers[slot].proc.pid)
        return False

    def _drain_old(self) -> None:
        """The previous generation's workers, drained one at a time (the next once the last has exited)."""
        for worker in [w for w in self.old if w.proc.poll() is not None]:
            log.info("old worker %d (pid %d) exited with code %s", worker.slot, worker.proc.pid, worker.proc.returncode)
            self.old.remove(worker)
        if not self.old:
            return
        worker, now = self.old[0], time.monotonic()
        if worker.draining_since is None:
            worker.draining_since = now
            worker.proc.send_signal(signal.SIGTERM)
            log.info("draining old worker %d (pid %d)", worker.slot, worker.proc.pid)
        elif now - worker.draining_since > self._stop_bound():
            log.error("old worker pid %d did not stop within its drain: killing it", worker.proc.pid)
            worker.proc.kill()

    def _stop_bound(self) -> float:
        server = self.config.server
        return server.drain_delay_s + server.drain_s + EXTRA_STOP_S

    def _do_reload(self) -> None:
        try:
            config, _ = self.load(self.plan.source)
            migrate(config)
        except Exception as exc:
            log.error("SIGHUP: reload refused, the workers keep the config they have: %s", exc)
            return
        n = self.count(config)
        self._coordinate(config, n)
        self.generation += 1
        log.warning("SIGHUP: reloading: starting %d new workers", n)
        new = {slot: self._spawn(slot, config, n) for slot in range(n)}
        deadline = time.monotonic() + START_S
        while not all(w.ready for w in new.values()):
            failed = [w for w in new.values() if w.proc.poll() is not None]
            if failed or time.monotonic() > deadline or self._stop is not None:
                why = f"worker exited with code {failed[0].proc.returncode}" if failed else "not started"
                log.error("SIGHUP: reload failed (%s): the old workers keep serving", why)
                for worker in new.values():
                    worker.proc.send_signal(signal.SIGTERM)
                for worker in new.values():
                    _wait_or_kill(worker.proc, 30)
                return
            time.sleep(TICK_S)
            self._read_ready(*new.values())
        self.old += [w for w in self.workers.values() if w.proc.poll() is None]
        self.workers, self.config = new, config
        self.slots.clear()
        log.warning("SIGHUP: %d new workers serving; draining the %d old ones", n, len(self.old))

    def _drain_all(self, code: int) -> int:
        assert self.sock is not None
        self.sock.close()  # once the workers close theirs too, new connections are refused, not queued
        every = [*self.workers.values(), *self.old]
        for worker in every:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._stop_bound()
        for worker in every:
            _wait_or_kill(worker.proc, max(deadline - time.monotonic(), 0.1))
        log.info("supervisor: every worker drained")
        return code


def _wait_or_kill(proc: subprocess.Popen[bytes], timeout: float, sig: signal.Signals | None = None) -> None:
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.error("pid %d did not stop within %.0f s: killing it", proc.pid, timeout)
        proc.kill()
        proc.wait()
