"""The limits a principal carries: its key's and its account's (requests/tokens per minute, concurrency)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    def __bool__(self) -> bool:
        return bool(self.rpm or self.tpm or self.max_concurrent)


@dataclass(frozen=True, slots=True)
class PrincipalLimits:
    key: Limits = Limits()
    account: Limits = Limits()
