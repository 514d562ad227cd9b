"""Per-request timing marks and the `timings` object every response reports (Inferada's names)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from math import floor

from inferplex import responses


@dataclass(slots=True)
class Timings:
    start: float
    upstream_start: float = 0.0
    first_token: float = 0.0
    upstream_end: float = 0.0
    queued_ms: float = 0.0
    processors_ms: float = 0.0
    cache: str | None = None  # the response cache's outcome (cache/): hit, semantic-hit, miss, bypass
    cache_ms: float = 0.0  # the lookup (and, after a miss, the store) as the cache measured them

    @classmethod
    def begin(cls) -> Timings:
        return cls(time.perf_counter())

    def mark_upstream_start(self) -> None:
        self.upstream_start = time.perf_counter()

    def absorb_queue(self, queued_ms: float) -> None:
        """A wait inside the adapter (a local model's queue) counts as queueing, not as upstream time."""
        if queued_ms > 0:
            self.queued_ms += queued_ms
            self.upstream_start += queued_ms / 1000

    def mark_first_token(self) -> None:
        if not self.first_token:
            self.first_token = time.perf_counter()

    def mark_upstream_end(self) -> None:
        self.upstream_end = time.perf_counter()

    @property
    def ttft_ms(self) -> float:
        if not self.first_token or not self.upstream_start:
            return 0.0
        return (self.first_token - self.start) * 1000

    def _spans(self) -> tuple[float, float, float]:
        """(total ms, upstream ms, when the upstream part ended) so far."""
        now = time.perf_counter()
        end = self.upstream_end or now
        return (now - self.start) * 1000, (end - self.upstream_start) * 1000 if self.upstream_start else 0.0, end

    def spans_ms(self) -> tuple[float, float]:
        """(total, upstream) so far, in ms to 0.01: what the usage log keeps of a request's timings."""
        total, upstream, _ = self._spans()
        return _round2(total), _round2(upstream)

    def as_dict(self, completion_tokens: int | None = None, *, stream: bool = False) -> responses.Timings:
        total, upstream, end = self._spans()
        gateway = total - upstream - self.queued_ms - self.processors_ms
        out: responses.Timings = {
            "total_ms": _round2(total),
            "upstream_ms": _round2(upstream),
            "gateway_ms": _round2(max(gateway, 0.0)),
        }
        if stream and self.first_token:
            out["ttft_ms"] = _round2(self.ttft_ms)
        if completion_tokens and upstream > 0:
            # Streams measure decode speed from the first token; buffered calls can only use the whole call.
            gen_ms = (end - self.first_token) * 1000 if stream and self.first_token else upstream
            out["tokens_per_second"] = _round2(completion_tokens * 1000 / (gen_ms or upstream))
        if self.queued_ms > 0:
            out["queued_ms"] = _round2(self.queued_ms)
        if self.processors_ms > 0:
            out["processors_ms"] = _round2(self.processors_ms)
        if self.cache is not None:
            out["cache"] = self.cache
            out["cache_ms"] = _round2(self.cache_ms)
        return out


def _round2(value: float) -> float:
    """Rounded half up to 0.01: the same float as `round(value, 2)` but for exact ties, at a fifth of its
    cost (every response reports four or five of these)."""
    return floor(value * 100 + 0.5) / 100
