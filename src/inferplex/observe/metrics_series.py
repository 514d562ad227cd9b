"""Counters and histograms kept as plain numbers in dicts, turned into Prometheus families only when scraped.

prometheus-client's own metric objects take a lock and look their label child up on every update, which is
work every request would pay for while nobody reads it. The gateway's hooks run on its one event loop, and
so does every scrape (the `/metrics` route and the separate listener are both served on it), so nothing
here is shared between threads: a series is a dict from its label values to a number (or to a histogram's
bucket counts), the label tuple itself is the cached child, and `collect` builds the families the
exposition format needs, once per scrape. The registry, the text format and its escaping stay
prometheus-client's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


class Counter:
    __slots__ = ("doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.values: dict[Labels, list[float]] = {}

    def cell(self, key: Labels) -> list[float]:
        """The series' one-number cell, for a hot path that keeps it (`cell[0] += n`)."""
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = [0.0]
        return found

    def inc(self, key: Labels, amount: float = 1.0) -> None:
        self.cell(key)[0] += amount

    def family(self) -> Metric:
        out = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in self.values.items():
            out.add_metric(key, value[0])
        return out


class Histogram:
    """Per label tuple: one count per bucket (not yet cumulative) and the sum last."""

    __slots__ = ("bounds", "doc", "labels", "les", "name", "values")

    def __init__(self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.bounds = tuple(buckets)
        self.les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self.values: dict[Labels, list[float]] = {}

    def row(self, key: Labels) -> list[float]:
        """The series' counts, for a hot path that keeps them (`observe_row`)."""
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = [0.0] * (len(self.bounds) + 2)
        return found

    def observe(self, key: Labels, value: float) -> None:
        observe_row(self.bounds, self.row(key), value)

    def family(self) -> Metric:
        out = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for key, row in self.values.items():
            total, buckets = 0.0, []
            for le, count in zip(self.les, row, strict=False):
                total += count
                buckets.append((le, total))
            out.add_metric(list(key), buckets, row[-1])
        return out


def observe_row(bounds: tuple[float, ...], row: list[float], value: float) -> None:
    row[bisect_left(bounds, value)] += 1  # the first bucket whose bound is >= value (le); past them all: +Inf
    row[-1] += value


class Gauge:
    """A value per label tuple, set when read (`read` is called at each scrape)."""

    __slots__ = ("doc", "labels", "name", "read")

    def __init__(
        self, name: str, doc: str, labels: Sequence[str], read: Callable[[], Iterable[tuple[Labels, float]]]
    ) -> None:
        self.name, self.doc, self.labels, self.read = name, doc, list(labels), read

    def family(self) -> Metric:
        out = GaugeMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in self.read():
            out.add_metric(key, value)
        return out


class Collector:
    """A registry's view of a set of series (prometheus-client calls `collect` at each scrape)."""

    def __init__(self) -> None:
        self.series: list[Counter | Histogram | Gauge] = []

    def add(self, series: Counter | Histogram | Gauge) -> None:
        self.series.append(series)

    def collect(self) -> Iterator[Metric]:
        for series in self.series:
            yield series.family()
