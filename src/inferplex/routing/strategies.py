"""Ranking deployments: pure functions from what is known about each candidate to an order of preference.

The router tries candidates in the returned order (skipping those cooling down or full), so every strategy
is one `rank` call: weighted random draws without replacement, fewest in flight, lowest moving-average
latency (with a little exploration so a slow deployment that recovers is noticed), lowest price, or the
configured priority. Randomness comes from the `random.Random` passed in, so tables of cases can pin it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

STRATEGIES = ("weighted", "least_busy", "lowest_latency", "lowest_cost", "priority", "throughput")

# Expected output length used to weigh time per token against time to first token.
LATENCY_TOKENS = 100
# Share of lowest-latency picks that go to a random candidate, so that a recovered deployment is re-measured.
EXPLORE = 0.05


@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    weight: float = 1.0
    priority: int = 0
    price: float = 0.0  # input + output USD per million tokens, for comparison only (billing uses integers)
    in_flight: int = 0
    ttft_ms: float | None = None
    per_token_ms: float | None = None

    @property
    def latency_ms(self) -> float | None:
        if self.ttft_ms is None:
            return None
        return self.ttft_ms + LATENCY_TOKENS * (self.per_token_ms or 0.0)


def weighted_order(cands: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """Draw without replacement, each draw proportional to weight; zero weights go last, in random order."""
    pool = [c for c in cands if c.weight > 0]
    zero = [c for c in cands if c.weight <= 0]
    out: list[Candidate] = []
    while pool:
        total = sum(c.weight for c in pool)
        point = rng.random() * total
        for i, c in enumerate(pool):
            point -= c.weight
            if point < 0 or i == len(pool) - 1:
                out.append(pool.pop(i))
                break
    rng.shuffle(zero)
    return out + zero


def _by(cands: Sequence[Candidate], rng: random.Random, key: object) -> list[Candidate]:
    """Sort by `key`, ties broken by a weighted draw (so equal candidates share the load by weight)."""
    shuffled = weighted_order(cands, rng)
    rank = {c.key: i for i, c in enumerate(shuffled)}
    return sorted(shuffled, key=lambda c: (key(c), rank[c.key]))  # type: ignore[operator]


def _unknown_first(value: float | None) -> float:
    # A deployment never measured is tried first: it costs one request to learn its latency.
    return -1.0 if value is None else value


def rank(cands: Sequence[Candidate], strategy: str, rng: random.Random) -> list[Candidate]:
    if strategy == "weighted":
        return weighted_order(cands, rng)
    if strategy == "least_busy":
        return _by(cands, rng, lambda c: c.in_flight)
    if strategy == "lowest_cost":
        return _by(cands, rng, lambda c: c.price)
    if strategy == "priority":
        return _by(cands, rng, lambda c: c.priority)
    if strategy in ("lowest_latency", "throughput"):
        if len(cands) > 1 and rng.random() < EXPLORE:
            return weighted_order(cands, rng)
        if strategy == "throughput":
            return _by(cands, rng, lambda c: _unknown_first(c.per_token_ms))
        return _by(cands, rng, lambda c: _unknown_first(c.latency_ms))
    raise ValueError(f"unknown routing strategy {strategy!r}")


# OpenRouter's per-request `provider.sort` overrides the configured strategy.
SORT_STRATEGY = {"price": "lowest_cost", "latency": "lowest_latency", "throughput": "throughput"}


def apply_order(ranked: list[Candidate], providers: Sequence[str], provider_of: dict[str, str]) -> list[Candidate]:
    """Put candidates whose provider is in `providers` first, in that order; the rest keep their rank."""
    if not providers:
        return ranked
    pos = {p: i for i, p in enumerate(providers)}
    return sorted(ranked, key=lambda c: pos.get(provider_of[c.key], len(pos)))
