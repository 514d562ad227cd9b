"""The cyclic collector on a clock, beside its count.

`inferplex serve` freezes start-up's objects and lets the young generation grow to 200,000 net new container
objects before a collection (serving/worker.py), because a collection's cost per request falls with its
frequency. But that count grows only with what outlives its request: garbage freed by reference counting
takes its count back. What it does count is garbage in reference cycles, which reference counting never frees,
and a gateway makes some every second whatever its load (SQLAlchemy clauses built by the background pollers,
an exception kept with its traceback): the hour-long soak (bench/soak.py) held ~30 MB of such garbage per
process before the first collection came, at minute 54. So the server also collects the young generation every
`YOUNG_S` and the middle one every `MIDDLE_S`: each scans only what was made since, a fraction of a millisecond,
and bounds the garbage waiting to what ten seconds make.
"""

from __future__ import annotations

import gc

YOUNG_S = 10.0
MIDDLE_S = 60.0


class ClockedCollector:
    """Called on the server's tick with the monotonic time; collects when a period has passed."""

    def __init__(self, now: float) -> None:
        self._young_at = now + YOUNG_S
        self._middle_at = now + MIDDLE_S

    def tick(self, now: float) -> None:
        if now < self._young_at:
            return
        self._young_at = now + YOUNG_S
        if now >= self._middle_at:
            self._middle_at = now + MIDDLE_S
            gc.collect(1)
        else:
            gc.collect(0)
