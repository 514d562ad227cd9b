"""What the latency-aware and load-aware strategies read: per-deployment moving averages and in-flight counts.

Kept per replica, in memory: latency is a local observation (each replica measures its own path) and the
in-flight count is exactly what this replica has open. Operators read the same numbers (routing/health.py).
"""

from __future__ import annotations

from dataclasses import dataclass

ALPHA = 0.2  # weight of a new sample in the exponential moving average


@dataclass(slots=True)
class DeploymentStats:
    in_flight: int = 0
    ttft_ms: float | None = None
    per_token_ms: float | None = None

    def observe_ttft(self, ms: float) -> None:
        self.ttft_ms = ms if self.ttft_ms is None else self.ttft_ms + ALPHA * (ms - self.ttft_ms)

    def observe_per_token(self, ms: float) -> None:
        self.per_token_ms = ms if self.per_token_ms is None else self.per_token_ms + ALPHA * (ms - self.per_token_ms)


class Stats:
    def __init__(self) -> None:
        self._by_key: dict[str, DeploymentStats] = {}

    def __getitem__(self, key: str) -> DeploymentStats:
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = DeploymentStats()
        return found

    def get(self, key: str) -> DeploymentStats | None:
        """The deployment's statistics if it was ever tried, without creating them (for readers)."""
        return self._by_key.get(key)
