"""The limits a principal carries (its key's and its account's), worked out into the buckets and slots
the limit stores keep, once per key record rather than once per request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferplex.limits import Rate

WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rate limit as the stores key it (`key:<id>:rpm`), and how a refusal names it."""

    key: str
    tokens: bool  # charged the request's tokens (tpm), else one per request (rpm)
    limit: int
    what: str


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """Every bucket (rpm then tpm, key before account) and concurrency slot a principal's requests use."""

    buckets: tuple[Bucket, ...] = ()
    slots: tuple[tuple[str, int], ...] = ()  # (slot key, limit)

    @classmethod
    def of(cls, scopes: Sequence[tuple[str, Limits]]) -> LimitPlan:
        """`scopes`: (`key:<id>` or `acct:<id>`, its limits)."""
        buckets: list[Bucket] = []
        for name, lim in scopes:
            kind = name.split(":")[0]
            if lim.rpm:
                buckets.append(Bucket(f"{name}:rpm", False, lim.rpm, f"{kind}: {lim.rpm} requests per minute"))
            if lim.tpm:
                buckets.append(Bucket(f"{name}:tpm", True, lim.tpm, f"{kind}: {lim.tpm} tokens per minute"))
        slots = tuple((f"{name}:conc", lim.max_concurrent) for name, lim in scopes if lim.max_concurrent)
        return cls(tuple(buckets), slots)

    def rates(self, tokens: int) -> list[Rate]:
        """What admitting a request takes: one from each rpm bucket, `tokens` from each tpm bucket."""
        return [Rate(b.key, tokens if b.tokens else 1, b.limit, WINDOW_S) for b in self.buckets]

    def charges(self, tokens: int) -> list[Rate]:
        """What settling takes: the output `tokens` from each tpm bucket."""
        return [Rate(b.key, tokens, b.limit, WINDOW_S) for b in self.buckets if b.tokens]

    @property
    def counts_tokens(self) -> bool:
        return any(b.tokens for b in self.buckets)


NO_LIMITS = LimitPlan()
