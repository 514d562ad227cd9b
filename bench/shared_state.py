"""How a machine's workers share limits without Redis: the coordinator process against SQLite tables, with
in-process memory (not shared: the floor) and Redis (what a fleet uses) for scale.

Each request costs its limit store one admit (an rpm and a tpm bucket, one concurrency slot) and one finish
(the tpm correction, the slot given back): the pair is what is measured.
- latency: one caller, admit then finish, in turn: microseconds per pair (p50, p99);
- throughput: `--procs` processes (the workers) each with `--concurrency` callers looping over the pair on
  one shared key for `--seconds`: pairs per second in all; the CPU the workers spent per pair (the store's
  client and the callers' loop: what a request pays on its worker, the gateway's bottleneck) and the CPU the
  store's own process spent per pair (the coordinator's, or Redis'; SQLite has none: its cost is in the
  workers). On a machine shared with other work, pairs/s moves with the load; CPU per pair much less.
Every store batches concurrent calls per event-loop pass (batching.Batcher), as the gateway's do.

    python bench/shared_state.py [--seconds 3] [--procs 2] [--concurrency 64] [--only coordinator,sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import psutil

from inferplex.batching import Batcher
from inferplex.limits import Hold, Rate, Verdict
from inferplex.limits.memory import MemoryLimits
from inferplex.shared_state import spawn
from inferplex.shared_state.limits import SharedLimits

T = TypeVar("T")
REDIS_URL = "redis://127.0.0.1:6379/0"
BIG = 10**12  # limits no run reaches: every call does the full work and is admitted


class SqliteLimits:
    """The alternative: GCRA buckets and concurrency holders as SQLite rows, one write transaction per batch
    of concurrent calls (BEGIN IMMEDIATE serialises the workers), run off the event loop as the gateway's
    SQLite driver does. Only what this benchmark calls (admit, finish) is implemented."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS tat (key TEXT PRIMARY KEY, tat REAL NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS held (key TEXT, holder TEXT, PRIMARY KEY (key, holder))")
        self._batch: Batcher[tuple[str, Any, Any], Any] = Batcher(self._run)

    async def _run(self, ops: list[tuple[str, Any, Any]]) -> list[Any]:
        return await asyncio.to_thread(self._apply, ops)

    def _apply(self, ops: list[tuple[str, Any, Any]]) -> list[Any]:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            out: list[Any] = []
            for kind, rates, slots in ops:
                if kind == "a":
                    out.append(self._admit(now, rates, slots))
                else:
                    for r in rates:
                        self._bump(now, r)
                    db.executemany("DELETE FROM held WHERE key = ? AND holder = ?", slots)
                    out.append(None)
            db.execute("COMMIT")
            return out
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _tat(self, key: str, now: float) -> float:
        row = self.db.execute("SELECT tat FROM tat WHERE key = ?", (key,)).fetchone()
        return max(row[0] if row else now, now)

    def _bump(self, now: float, r: Rate) -> None:
        tat = self._tat(r.key, now) + r.amount * r.window_s / r.limit
        self.db.execute("INSERT OR REPLACE INTO tat (key, tat) VALUES (?, ?)", (r.key, max(tat, now)))

    def _admit(self, now: float, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        for i, r in enumerate(rates):
            wait = self._tat(r.key, now) + r.amount * r.window_s / r.limit - r.window_s - now
            if wait > 0:
                return Verdict(wait, i, tuple(False for _ in holds), 0.0)
        for r in rates:
            self._bump(now, r)
        taken = []
        for h in holds:
            count = self.db.execute("SELECT count(*) FROM held WHERE key = ?", (h.key,)).fetchone()[0]
            ok = count < h.limit
            if ok:
                self.db.execute("INSERT INTO held (key, holder) VALUES (?, ?)", (h.key, h.holder))
            taken.append(ok)
        return Verdict(0.0, -1, tuple(taken), 0.0)

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        result: Verdict = await self._batch.enqueue(("a", rates, holds))
        return result

    def finish(self, charges: Sequence[Rate], releases: Sequence[tuple[str, str]]) -> asyncio.Future[None]:
        return self._batch.enqueue(("f", charges, releases), keep=True)

    async def aclose(self) -> None:
        await self._batch.aclose()
        self.db.close()


Factory = Callable[[], Any]


def _run(main: Coroutine[Any, Any, T]) -> T:
    """On uvloop, as the gateway's workers run."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def _pair(store: Any, holder: str) -> None:
    rates = [Rate("k:rpm", 1, BIG, 60.0), Rate("k:tpm", 120, BIG, 60.0)]
    verdict = await store.admit(rates, [Hold("k:conc", BIG, holder)])
    assert verdict.wait == 0 and verdict.taken == (True,), verdict
    await store.finish([Rate("k:tpm", 30, BIG, 60.0, age_s=0.01)], [("k:conc", holder)])


async def _latency(make: Factory, n: int) -> list[float]:
    store = make()
    # A store that cannot be reached fails open (admits everything): make sure this one really enforces.
    once = [Rate(f"check:{time.monotonic_ns()}", 1, 1, 60.0)]
    if (await store.admit(once, [])).wait != 0 or (await store.admit(once, [])).wait <= 0:
        raise SystemExit(f"{store!r} does not enforce a limit: is it reachable?")
    times = []
    ids = itertools.count()
    for i in range(n + 200):
        started = time.perf_counter()
        await _pair(store, f"lat-{next(ids)}")
        if i >= 200:  # warmed up: connections open, code paths hot
            times.append(time.perf_counter() - started)
    await store.aclose()
    return times


async def _loop(make: Factory, concurrency: int, seconds: float, tag: str) -> tuple[int, float]:
    """(pairs done, CPU seconds this process spent on them, its threads included)."""
    store = make()
    await _pair(store, f"{tag}-warm")
    done = 0
    ids = itertools.count()
    end = time.monotonic() + seconds
    cpu0 = time.process_time()

    async def caller() -> None:
        nonlocal done
        while time.monotonic() < end:
            await _pair(store, f"{tag}-{next(ids)}")
            done += 1

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    await store.aclose()
    return done, time.process_time() - cpu0


def _worker(make: Factory, concurrency: int, seconds: float, tag: str, out: Any, start: Any) -> None:
    start.wait()
    out.put(_run(_loop(make, concurrency, seconds, tag)))


def _throughput(
    make: Factory, procs: int, concurrency: int, seconds: float, server: psutil.Process | None
) -> tuple[float, float | None]:
    ctx = multiprocessing.get_context("fork")
    out, start = ctx.Queue(), ctx.Event()
    workers = [
        ctx.Process(target=_worker, args=(make, concurrency, seconds, f"w{i}", out, start)) for i in range(procs)
    ]
    for w in workers:
        w.start()
    cpu0 = sum(server.cpu_times()[:2]) if server else 0.0
    started = time.perf_counter()
    start.set()
    results = [out.get(timeout=seconds + 60) for _ in workers]
    total = sum(done for done, _ in results)
    worker_cpu = sum(cpu for _, cpu in results)
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join()
    cpu = (sum(server.cpu_times()[:2]) - cpu0) if server else None
    store_us = cpu / total * 1e6 if cpu is not None and total else None
    return total / elapsed, worker_cpu / total * 1e6, store_us


def _redis_pid() -> int | None:
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "redis-server":
            return proc.pid
    return None


def _measure(name: str, args: argparse.Namespace, tmp: Path) -> tuple[float, float, float, float, float | None]:
    """One round of one store: (p50 µs, p99 µs, pairs/s, workers' CPU µs per pair, store CPU µs per pair)."""
    server: psutil.Process | None = None
    coordinator = None
    make: Factory
    if name == "memory":
        make = MemoryLimits
    elif name == "coordinator":
        sock = str(tmp / "state.sock")
        coordinator = spawn(sock)
        server = psutil.Process(coordinator.pid)
        make = partial(SharedLimits, sock)
    elif name == "sqlite":
        make = partial(SqliteLimits, str(tmp / f"limits-{time.monotonic_ns()}.db"))
    elif name == "redis":
        from inferplex.limits.redis import RedisLimits

        make = partial(RedisLimits, REDIS_URL, f"ipx-bench:{os.getpid()}:{time.monotonic_ns()}:")
        pid = _redis_pid()
        server = psutil.Process(pid) if pid else None
    else:
        raise SystemExit(f"unknown store {name}")
    try:
        times = _run(_latency(make, args.latency_n))
        p50 = statistics.median(times) * 1e6
        p99 = statistics.quantiles(times, n=100)[98] * 1e6
        procs = 1 if name == "memory" else args.procs  # memory is not shared: one process is all it can be
        rate, worker_us, store_us = _throughput(make, procs, args.concurrency, args.seconds, server)
    finally:
        if coordinator is not None:
            coordinator.terminate()
            coordinator.wait()
    print(f"{name}: {p50:.0f}/{p99:.0f} us, {rate:,.0f} pairs/s", file=sys.stderr, flush=True)
    return p50, p99, rate, worker_us, store_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="the stores interleaved this many times; medians")
    parser.add_argument("--only", default="memory,coordinator,sqlite,redis")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ipx-ssb-"))
    names = args.only.split(",")
    runs: dict[str, list[tuple[float, float, float, float, float | None]]] = {name: [] for name in names}
    try:
        for _ in range(args.rounds):
            for name in names:
                runs[name].append(_measure(name, args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\nadmit+finish pairs, median of {args.rounds} interleaved rounds; throughput: {args.procs} worker"
        f" processes x {args.concurrency} callers, {args.seconds:g} s, one key; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "\n| store | shared across workers | one caller: µs per pair p50 / p99 | pairs/s, all workers"
        " | workers' CPU µs per pair | store process CPU µs per pair |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        p50, p99, rate, worker_us = (statistics.median(r[i] for r in runs[name]) for i in range(4))  # type: ignore[misc]
        cpus = [r[4] for r in runs[name] if r[4] is not None]
        shared = "no (one process)" if name == "memory" else "yes"
        cpu_text = f"{statistics.median(cpus):.1f}" if cpus else "-"
        print(f"| {name} | {shared} | {p50:.0f} / {p99:.0f} | {rate:,.0f} | {worker_us:.1f} | {cpu_text} |")


if __name__ == "__main__":
    main()
