"""One serving process: the whole server with `--workers 1`, or one of a supervisor's workers.

A supervisor's worker is started as `python -m inferplex.serving.worker` (a fresh interpreter, not a fork:
nothing of the supervisor's state, threads or event loop is inherited), with the listening socket the
supervisor bound as an inherited file descriptor, and a pipe on which it reports "ready" once its app has
started. It re-reads the config file itself; the supervisor has already validated that file and run its
migrations, so a worker's start only checks that the schema is current.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from inferplex.config import Config, load_config, parse_config
from inferplex.defaults import DEFAULT_CONFIG
from inferplex.serving.drain import DrainingProtocol, DrainingServer
from inferplex.serving.readiness import readiness_of

log = logging.getLogger("inferplex")

LOG_FORMAT = "%(asctime)s %(name)s [%(process)d] %(message)s"


def configure_logging(config: Config) -> None:
    """The gateway's log lines (starts, drains, restarts) with the pid, which tells the workers apart."""
    logging.basicConfig(level=config.server.log_level.upper(), format=LOG_FORMAT)


def serve(
    config: Config,
    master_key: str,
    host: str,
    port: int,
    sock: socket.socket | None = None,
    slot: int | None = None,
    on_started: Callable[[], None] | None = None,
) -> int:
    """Run the gateway until drained; on `sock` if given (a supervisor's), else bound to host:port."""
    import uvicorn

    from inferplex.app import create_app

    app = create_app(config, master_key)
    readiness = readiness_of(app)
    readiness.worker = slot
    uv_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=DrainingProtocol,
        lifespan="on",
        log_level=config.server.log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,  # X-Forwarded-For is trusted only from configured proxies (accounts/auth)
    )
    server = DrainingServer(uv_config, readiness, config.server.drain_delay_s, config.server.drain_s, on_started)
    # Requests leave almost no reference cycles, but the default thresholds run full collections that
    # pause the loop for tens of ms under load (docs/benchmarks.md): freeze what start-up allocated and
    # collect the young generation less often. A young collection scans what is still alive, not what was
    # allocated, so its cost per request falls with its frequency: 200,000 saved 2% of CPU over 50,000.
    gc.collect()
    gc.freeze()
    gc.set_threshold(200_000, 50, 50)
    server.run(sockets=[sock] if sock is not None else None)
    return 0 if server.started else 3


def _die_with(parent: int) -> None:
    """Be sent SIGTERM (a drain) if the supervisor dies, rather than serve on as an orphan nobody manages."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG (Linux)
    if os.getppid() != parent:  # it died before the line above
        sys.exit(0)


def for_slot(config: Config, slot: int, workers: int = 1) -> Config:
    """The config worker `slot` of `workers` runs.

    - A separate metrics listener (`observability.metrics.listen`) binds a port of its own, which one process
      only can hold, so worker 0 serves it (with the whole server's series, as /metrics on any worker:
      observe/metrics_workers.py) and the others leave it out rather than fail to start.
    - `storage.pool_size` is the server's PostgreSQL connections (what an operator sizes `max_connections`
      by), so each worker keeps its share, rounded up: N workers each opening the whole pool held N times
      the connections, and on a server near `max_connections` the extra ones were refused mid-request.
    """
    metrics = config.observability.metrics
    update: dict[str, object] = {}
    if slot != 0 and metrics.listen is not None:
        update["observability"] = config.observability.model_copy(
            update={"metrics": metrics.model_copy(update={"listen": None})}
        )
    if workers > 1:
        share = max(1, math.ceil(config.storage.pool_size / workers))
        update["storage"] = config.storage.model_copy(update={"pool_size": share})
    return config.model_copy(update=update) if update else config


def worker_count(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """One worker per core this process may use: its CPU affinity (which a container's cpuset narrows), and no
    more than its cgroup's CPU quota rounded up (a Kubernetes CPU limit: 1.5 CPUs, 2 workers)."""
    cores = len(os.sched_getaffinity(0)) or 1
    quota = cpu_quota(cpu_max)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def cpu_quota(cpu_max: Path) -> float | None:
    """The CPUs cgroup v2's `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none) allows, if it sets a quota."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        return int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None  # no cgroup v2 file, or "max": no quota


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferplex.serving.worker")
    parser.add_argument("--config")
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--ready-fd", type=int, required=True, help="where to say `SLOT PID` once serving")
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1, help="how many workers share the server's pools")
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with(args.parent)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload is the supervisor's: it starts new workers
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a sibling's scrape asking for metrics, until the app listens
    config = load_config(args.config) if args.config else parse_config(DEFAULT_CONFIG, "<embedded defaults>")
    config = for_slot(config, args.slot, args.workers)
    os.environ["INFERPLEX_WORKER_SLOT"] = str(args.slot)  # the `worker` label of its process_* metrics
    configure_logging(config)
    sock = socket.socket(fileno=args.fd)
    host, port = sock.getsockname()[:2]
    master_key = os.environ["INFERPLEX_MASTER_KEY"]  # resolved once, by the supervisor

    def started() -> None:
        log.info("worker %d serving (pid %d)", args.slot, os.getpid())
        with contextlib.suppress(OSError):
            os.write(args.ready_fd, f"{args.slot} {os.getpid()}\n".encode())
            os.close(args.ready_fd)

    return serve(config, master_key, host, port, sock, args.slot, started)


if __name__ == "__main__":
    raise SystemExit(main())
