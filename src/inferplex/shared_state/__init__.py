"""State that must be global across a machine's workers without Redis: rate and concurrency limits, and
breakers, kept by one coordinator process that the workers reach over a Unix socket.

The supervisor (`inferplex serve --workers N`) starts the coordinator before the workers with `spawn`, and
hands its socket's path to each worker in `INFERPLEX_SHARED_STATE`; a worker that finds the variable set and
no Redis configured (`storage.redis_url`, `routing.redis_url`) keeps its limits and breakers there
(limits.py, cooldowns.py). If the coordinator dies, the supervisor calls `spawn` again with the same path:
the workers reconnect on their next call. Everything else a worker shares (keys and their revocation,
tokens, credits and the ledger) is in the database already.

Why a coordinator process rather than SQLite tables or shared memory: measured in bench/shared_state.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

ENV = "INFERPLEX_SHARED_STATE"


def configured() -> str | None:
    """The coordinator's socket path this worker was given, if any."""
    return os.environ.get(ENV) or None


def answers(path: str) -> bool:
    """Whether a coordinator is listening on `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def spawn(path: str, *, wait_s: float = 10.0) -> subprocess.Popen[bytes]:
    """Start a coordinator on the Unix socket `path` and return once it accepts connections. It exits when
    the calling process does (it watches its parent), so call it from the supervisor itself. Raises
    RuntimeError if one already answers there or it does not start within `wait_s`."""
    if answers(path):
        raise RuntimeError(f"a shared state coordinator already answers on {path}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "inferplex.shared_state", "--socket", path, "--parent", str(os.getpid())],
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + wait_s
    while not answers(path):
        if proc.poll() is not None:
            raise RuntimeError(f"the shared state coordinator exited with {proc.returncode}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the shared state coordinator did not listen on {path} within {wait_s:g}s")
        time.sleep(0.01)
    return proc
