"""Stable placeholders for redacted values, and putting the originals back, in streams too.

`Vault` hands out `[EMAIL_1]`, `[EMAIL_2]`, ... per kind, the same placeholder for the same value within a
request, so the model can still tell two addresses apart and refer to them. `Restorer` is the stream side:
the model's answer arrives in arbitrary pieces, so a placeholder can be split across chunks (`[EM` + `AIL_1]`).
It holds back only a tail that could still become a placeholder, and releases everything else at once, so
restoring costs the caller no more latency than the length of one placeholder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLACEHOLDER = re.compile(r"\[([A-Z][A-Z_]*)_(\d+)\]")
# A tail that may still grow into a placeholder: "[", "[EM", "[EMAIL_", "[EMAIL_1".
_PARTIAL = re.compile(r"\[(?:[A-Z][A-Z_]*(?:_\d*)?)?$")
MAX_PLACEHOLDER = 40


@dataclass(slots=True)
class Vault:
    by_value: dict[tuple[str, str], str] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def placeholder(self, kind: str, value: str) -> str:
        key = (kind, value)
        found = self.by_value.get(key)
        if found is None:
            n = self.counts.get(kind, 0) + 1
            self.counts[kind] = n
            found = self.by_value[key] = f"[{kind}_{n}]"
            self.originals[found] = value
        return found

    def restore(self, text: str) -> tuple[str, int]:
        """`text` with every known placeholder replaced by its original, and how many were replaced."""
        n = 0

        def put_back(m: re.Match[str]) -> str:
            nonlocal n
            original = self.originals.get(m.group(0))
            if original is None:
                return m.group(0)
            n += 1
            return original

        return PLACEHOLDER.sub(put_back, text), n


@dataclass(slots=True)
class Restorer:
    """Restores placeholders in text that arrives piece by piece; `feed` then `flush` at the end."""

    vault: Vault
    pending: str = ""
    restored: int = 0

    def feed(self, piece: str) -> str:
        text = self.pending + piece
        cut = text.rfind("[")
        if cut != -1 and len(text) - cut < MAX_PLACEHOLDER and _PARTIAL.match(text, cut):
            text, self.pending = text[:cut], text[cut:]
        else:
            self.pending = ""
        out, n = self.vault.restore(text)
        self.restored += n
        return out

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        out, n = self.vault.restore(text)
        self.restored += n
        return out
