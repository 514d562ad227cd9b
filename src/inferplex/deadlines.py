"""`Deadline(delay)`: `asyncio.timeout` for the hot path, with one timer per event loop for all of them.

Every upstream attempt is bounded. `asyncio.timeout` starts a loop timer per use (under uvloop, a libuv
timer started and stopped), which with its own bookkeeping cost about 5 µs per request, a few percent of
what the gateway spends on one (docs/benchmarks.md). Here the deadlines of a loop share one heap and one
timer, set for the earliest: a request's deadline is almost always later than every one already waiting
(they are all "now + the same budget"), so entering costs a heap push and leaving a flag, and the timer is
re-armed only when an earlier deadline arrives.

The semantics are `asyncio.timeout`'s: on expiry the task is cancelled, and leaving the block turns that
cancellation (and only that one: `Task.uncancel` tells it from an outside cancel) into `TimeoutError`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from types import TracebackType

_PENDING, _EXPIRED, _DONE = 0, 1, 2


class _Entry:
    __slots__ = ("state", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.state = _PENDING


class _Timers:
    """The deadlines of one loop: a heap of (when, sequence, entry), and a timer at its earliest."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, _Entry]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = float("inf")
        self._finished = 0  # done entries still in the heap: compacted when they outnumber the live ones

    def add(self, when: float, entry: _Entry) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), entry))
        if when < self._armed_at:
            self._arm(when)

    def finished(self) -> None:
        self._finished += 1
        if self._finished > 1024 and self._finished * 2 > len(self._heap):
            self._heap = [item for item in self._heap if item[2].state == _PENDING]
            heapq.heapify(self._heap)
            self._finished = 0

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed_at = None, float("inf")
        now = self._loop.time()
        heap = self._heap
        while heap and (heap[0][0] <= now or heap[0][2].state != _PENDING):
            _, _, entry = heapq.heappop(heap)
            if entry.state == _PENDING:
                entry.state = _EXPIRED
                entry.task.cancel()
            else:
                self._finished -= 1
        if heap:
            self._arm(heap[0][0])


_TIMERS: dict[asyncio.AbstractEventLoop, _Timers] = {}


def _timers(loop: asyncio.AbstractEventLoop) -> _Timers:
    timers = _TIMERS.get(loop)
    if timers is None:
        if len(_TIMERS) > 16:  # loops of finished `asyncio.run`s (tests): forget those that are closed
            for old in [lp for lp in _TIMERS if lp.is_closed()]:
                del _TIMERS[old]
        timers = _TIMERS[loop] = _Timers(loop)
    return timers


class Deadline:
    """`with Deadline(seconds):` (inside a task) raises TimeoutError when the block outlasts `seconds`.

    A plain context manager: entering and leaving never wait, and an `async with` would cost two
    coroutines per use."""

    __slots__ = ("_cancelling", "_delay", "_entry", "_timers")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._entry: _Entry | None = None
        self._cancelling = 0
        self._timers: _Timers | None = None

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline must be entered inside a task")
        loop = asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        self._entry = entry = _Entry(task)
        self._timers = _timers(loop)
        self._timers.add(loop.time() + self._delay, entry)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        entry, timers = self._entry, self._timers
        assert entry is not None and timers is not None
        if entry.state == _PENDING:
            entry.state = _DONE
            timers.finished()
            return
        # Expired: the cancellation was ours; unless another came on top of it, it leaves as TimeoutError.
        if entry.task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    def expired(self) -> bool:
        """Whether the deadline passed (the block was cancelled because of it)."""
        return self._entry is not None and self._entry.state == _EXPIRED
