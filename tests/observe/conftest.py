"""Fixtures the observability tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.observe.otlp_collector import Collector


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    """An OTLP/HTTP collector on 127.0.0.1 that keeps the spans it is sent (otlp_collector.py)."""
    c = Collector().start()
    yield c
    c.stop()
