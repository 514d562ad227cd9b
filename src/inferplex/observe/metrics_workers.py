"""`/metrics` for the whole server when `inferplex serve --workers N` runs N processes on one port.

Each worker keeps its series in memory (metrics_series.py) and answers a scrape itself, so without this a
scraper would see whichever worker the kernel handed its connection to. The supervisor makes a private
directory and names it in every worker's environment (`INFERPLEX_METRICS_DIR`); each worker writes a
snapshot of its series there (`w-<pid>-<nonce>.json`, replaced atomically): once a second if anything
changed, when asked (SIGUSR1), and a last time when it drains. Nothing happens on the request path.

A scrape on any worker writes its own snapshot, asks its live siblings for theirs (SIGUSR1, then waits up
to `FLUSH_WAIT_S` for each file to be replaced), and merges every file: counters and histograms summed over
every worker that ever ran in this server, live or dead (a dead worker's last snapshot stays, so the
server's counters never drop when a worker is killed and restarted: at most what it counted after its last
snapshot, under a second, is lost), gauges of this worker's own load (in flight, queues) summed over the
live workers only, and each live worker's process_* and python_gc_* series labelled with its `worker` slot
and `pid` (a sum of processes' memory or start times would describe no process). A dead worker's file is
folded into `retired.json` by the next scrape, so restarts and reloads do not grow the directory; folding
takes the directory's lock exclusively and reading it shared, so no scrape counts a worker twice.

A sibling is signalled only if /proc says it is a live child of this worker's own parent (the supervisor),
so a pid the kernel reused for another process is never sent SIGUSR1.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("inferplex.observe")

ENV = "INFERPLEX_METRICS_DIR"
WRITE_EVERY_S = 1.0
FLUSH_WAIT_S = 0.5  # a sibling busier than this is merged from its last snapshot (under a second old)
POLL_S = 0.002
RETIRED = "retired.json"
LOCK = ".lock"

Snapshot = dict[str, Any]  # {"counters": {name: [[labels, value]]}, "histograms": {...}, "gauges": {...}}


@dataclass(slots=True)
class Part:
    """One worker's snapshot as a scrape merges it: `live` says whether its gauges still count."""

    data: Snapshot
    live: bool


def directory() -> Path | None:
    """The server's snapshot directory, when this process is one of a supervisor's workers."""
    found = os.environ.get(ENV)
    return Path(found) if found else None


class Shared:
    """This worker's snapshots, and the merge of its siblings' at a scrape."""

    def __init__(self, where: Path, snapshot: Callable[[], Snapshot]) -> None:
        self.dir = where
        self.snapshot = snapshot
        self.path = where / f"w-{os.getpid()}-{secrets.token_hex(4)}.json"
        self._last = b""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGUSR1, self.write, True)
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread: written each second only
            log.warning("metrics: SIGUSR1 not handled here; sibling scrapes read a snapshot up to 1 s old")
        self.write(True)  # only now: a sibling signals the pids it finds files for
        self._task = loop.create_task(self._every_second())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a late scrape's signal must not end a draining worker
        self.write(True)  # the final counts, kept after this process exits

    async def _every_second(self) -> None:
        while True:
            await asyncio.sleep(WRITE_EVERY_S)
            try:
                self.write()
            except Exception:
                log.exception("writing the metrics snapshot failed")

    def write(self, force: bool = False) -> None:
        """Replace this worker's file with its series now (unless unchanged and not forced)."""
        body = orjson.dumps(self.snapshot())
        if body == self._last and not force:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(body)
        os.replace(tmp, self.path)  # a new inode: how a scrape sees that a sibling answered
        self._last = body

    async def gather(self) -> list[Part]:
        """Every snapshot of this server, this worker's and its live siblings' fresh."""
        self.write(True)
        parent = os.getppid()
        asked: dict[Path, int] = {}
        dead: list[Path] = []
        for path in self._workers():
            if path == self.path:
                continue
            pid = _pid(path)
            if pid is not None and _alive(pid, parent):
                with contextlib.suppress(OSError):
                    inode = path.stat().st_ino
                    os.kill(pid, signal.SIGUSR1)
                    asked[path] = inode
            else:
                dead.append(path)
        deadline = time.monotonic() + FLUSH_WAIT_S
        while asked and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            asked = {p: i for p, i in asked.items() if _inode(p) == i}
        if dead:
            self._fold(dead)
        with self._locked(fcntl.LOCK_SH):
            parts = [Part(data, False) for data in [_read(self.dir / RETIRED)] if data is not None]
            for path in self._workers():
                data = _read(path)
                pid = _pid(path)
                if data is not None:
                    live = path == self.path or (pid is not None and _alive(pid, parent))
                    parts.append(Part(data, live))
        return parts

    def _workers(self) -> list[Path]:
        return sorted(self.dir.glob("w-*.json"))

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        with (self.dir / LOCK).open("a") as lock:
            fcntl.flock(lock, how)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fold(self, dead: list[Path]) -> None:
        """Add dead workers' last snapshots into `retired.json` and remove their files, once each."""
        with self._locked(fcntl.LOCK_EX):
            retired = _read(self.dir / RETIRED) or {"counters": {}, "histograms": {}, "gauges": {}, "folded": []}
            folded = [n for n in retired.get("folded", []) if (self.dir / n).exists()]
            for path in dead:
                data = None if path.name in folded else _read(path)
                if data is not None:
                    retired = add(retired, data)
                    folded.append(path.name)
            retired["folded"] = folded
            tmp = self.dir / (RETIRED + ".tmp")
            tmp.write_bytes(orjson.dumps(retired))
            os.replace(tmp, self.dir / RETIRED)
            for path in dead:  # named in `folded` until the next fold, so a crash here cannot count one twice
                path.unlink(missing_ok=True)


def add(into: Snapshot, data: Snapshot) -> Snapshot:
    """`into` plus `data`'s counters and histograms (gauges are a live worker's only: not kept)."""
    out: Snapshot = {"counters": {}, "histograms": {}, "gauges": {}, "folded": into.get("folded", [])}
    for kind in ("counters", "histograms"):
        for name in {*into.get(kind, {}), *data.get(kind, {})}:
            merged: dict[tuple[str, ...], list[float]] = {}
            for rows in (into.get(kind, {}).get(name, []), data.get(kind, {}).get(name, [])):
                sum_rows(merged, rows)
            out[kind][name] = [[list(k), v] for k, v in merged.items()]
    return out


def sum_rows(into: dict[tuple[str, ...], list[float]], rows: list[list[Any]]) -> None:
    """Add snapshot rows (`[labels, value or bucket counts]`) into per-label cells."""
    for labels, value in rows:
        cells = value if isinstance(value, list) else [value]
        key = tuple(labels)
        found = into.get(key)
        if found is None:
            into[key] = [float(v) for v in cells]
        elif len(found) == len(cells):
            for i, v in enumerate(cells):
                found[i] += v


def _pid(path: Path) -> int | None:
    try:
        return int(path.name.split("-")[1])
    except (IndexError, ValueError):
        return None


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _alive(pid: int, parent: int) -> bool:
    """Whether `pid` is a running (not zombie) child of `parent`: a sibling worker, not a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False
        try:  # no /proc (not Linux): only whether it exists
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False
        return True
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    return len(fields) > 1 and fields[0] not in ("Z", "X", "x") and int(fields[1]) == parent


def _read(path: Path) -> Snapshot | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
