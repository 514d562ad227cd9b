"""The served process's collector on a clock (serving/collector.py): garbage in a reference cycle is freed within
`YOUNG_S`, also under serve's thresholds, where the count alone would wait for 200,000 new objects."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from inferplex.serving.collector import MIDDLE_S, YOUNG_S, ClockedCollector


class Node:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def serve_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.collect()
    gc.set_threshold(200_000, 50, 50)  # as serving/worker.py
    yield
    gc.set_threshold(*before)


def cycle() -> weakref.ref[Node]:
    return weakref.ref(Node())  # unreachable at once, but only the cyclic collector frees it


def test_a_cycle_is_freed_within_the_young_period_not_before(serve_thresholds: None) -> None:
    collector = ClockedCollector(now=1000.0)
    garbage = cycle()
    collector.tick(1000.0 + YOUNG_S / 2)
    assert garbage() is not None  # nothing collected between periods: no cost per tick
    collector.tick(1000.0 + YOUNG_S)
    assert garbage() is None


def test_a_cycle_that_outlived_a_young_collection_is_freed_by_the_middle_one(serve_thresholds: None) -> None:
    collector = ClockedCollector(now=0.0)
    alive = Node()  # survives the young collection: moved to the middle generation
    collector.tick(YOUNG_S)
    garbage = weakref.ref(alive)
    del alive
    t = YOUNG_S
    while t + YOUNG_S < MIDDLE_S:
        t += YOUNG_S
        collector.tick(t)
    assert garbage() is not None  # young collections do not look at the middle generation
    collector.tick(MIDDLE_S)
    assert garbage() is None
