"""What the response cache decided for one request (`Context.cache`).

Its own module because the context holds it and the cache's seams (cache/base.py) name the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["hit", "semantic-hit", "miss", "bypass"]
HITS: frozenset[str] = frozenset({"hit", "semantic-hit"})
MILLION = 1_000_000


@dataclass(slots=True)
class CacheOutcome:
    """What the cache decided for one request, on `Context.cache` (None: caching does not apply to it)."""

    status: Status
    # the entry's id (a hash, never the prompt): the response header names it so an operator can purge it
    entry: str | None = None
    similarity: float | None = None  # a semantic hit's cosine similarity
    # what a hit is charged, in millionths of the stored answer's cost (free: 0, full: 1,000,000)
    charge_ppm: int = MILLION
    lookup_ms: float = 0.0
    # a hit's price list (config.Pricing): the deployment's that produced the stored answer, at its tier; None:
    # the model's own (an entry stored without it)
    pricing: Any = None
    # private to the cache: what `keep` / `record` need to store the answer after a miss
    plan: Any = field(default=None, repr=False)

    @property
    def hit(self) -> bool:
        return self.status in HITS

    def charge(self, cost_micros: int) -> int:
        """A hit's price from what the answer would cost: integer micro-USD, rounded down."""
        if not self.hit:
            return cost_micros
        return cost_micros * self.charge_ppm // MILLION
