"""Bench-only launcher: the gateway app under another ASGI server, built exactly as `inferplex serve` does.

    BENCH_CONFIG=cfg.yaml BENCH_KEY=... granian --interface asgi --loop uvloop --factory \
        --working-dir bench asgi_app:create
    BENCH_CONFIG=cfg.yaml BENCH_KEY=... python bench/asgi_app.py uvicorn PORT   # same as `inferplex serve`

`create()` loads the config named by $BENCH_CONFIG and returns `inferplex.app.create_app(config, key)`.

Experiments (not what `inferplex serve` does): BENCH_GC=freeze calls `gc.freeze()` once the app is built,
so the cyclic collector stops re-scanning the start-up heap (modules, pydantic schemas, config);
BENCH_GC=freeze,50000 also raises the generation-0 threshold to 50,000 allocations. BENCH_GC_STATS=1 times
every collection (gc.callbacks) and prints, at exit, collections and seconds per generation against the
process's CPU seconds. BENCH_GC_CYCLES=1 disables the collector and, at exit, lists the types of the objects
that only the collector could free (reference cycles left behind by requests).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _gc_stats() -> None:
    import atexit
    import gc
    import time

    started: list[float] = [0.0]
    count = [0, 0, 0]
    spent = [0.0, 0.0, 0.0]
    cpu0 = time.process_time()

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            count[info["generation"]] += 1
            spent[info["generation"]] += time.process_time() - started[0]

    def report() -> None:
        cpu = time.process_time() - cpu0
        per = ", ".join(f"gen{g}: {count[g]} in {spent[g]:.3f}s" for g in range(3))
        print(
            f"gc: {per}; total {sum(spent):.3f}s of {cpu:.3f}s CPU ({100 * sum(spent) / max(cpu, 1e-9):.1f}%)",
            file=sys.stderr,
            flush=True,
        )

    gc.callbacks.append(callback)
    atexit.register(report)


def _gc_cycles() -> None:
    import atexit
    import collections
    import gc

    gc.collect()
    gc.disable()

    def report() -> None:
        gc.set_debug(gc.DEBUG_SAVEALL)
        found = gc.collect()
        kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        top = ", ".join(f"{k} {n}" for k, n in kinds.most_common(25))
        print(f"gc cycles: {found} unreachable objects; {top}", file=sys.stderr, flush=True)

    atexit.register(report)


def create() -> Any:
    from inferplex.app import create_app
    from inferplex.cli import master_key
    from inferplex.config import load_config

    config = load_config(os.environ["BENCH_CONFIG"])
    app = create_app(config, master_key(config))
    if os.environ.get("BENCH_GC_STATS"):
        _gc_stats()
    if os.environ.get("BENCH_GC_CYCLES"):
        _gc_cycles()
    gc_mode = os.environ.get("BENCH_GC", "")
    if gc_mode:
        import gc

        parts = gc_mode.split(",")
        gc.collect()
        if "freeze" in parts:
            gc.freeze()
        numbers = [int(p) for p in parts if p.isdigit()]
        if numbers:
            gc.set_threshold(numbers[0], *gc.get_threshold()[1:])
    return app


if __name__ == "__main__":
    import uvicorn

    from inferplex.http_server import GatewayHTTPProtocol

    server, port = sys.argv[1], int(sys.argv[2])
    assert server == "uvicorn"
    uvicorn.run(
        create(),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http=GatewayHTTPProtocol,
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
    )
