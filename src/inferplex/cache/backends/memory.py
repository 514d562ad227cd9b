"""The in-process backend: entries in one dict in least-recently-used order, bounded by bytes.

What a single gateway process without a store of its own keeps (`cache.backend: memory`, or auto with neither
Redis nor SQLite). Expiry is checked on read (an expired entry is dropped when asked for, or when the bound
evicts it first); the bound counts each entry's stored bytes plus a fixed overhead, so many tiny answers
cannot hold unbounded memory either. Vectors are kept per semantic partition in the order filed, the cursor
counting every vector ever filed there: a replica's index (cache/semantic.py) catches up from where it was.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from inferplex.cache.base import BackendStats, Entry, Purge

# What one entry costs besides its value: the Entry, its id and the dict slot, roughly.
OVERHEAD = 512


def matches(entry: Entry, selector: Purge) -> bool:
    """Whether a purge selects the entry: every field given must match."""
    return (
        (selector.entry is None or entry.id == selector.entry)
        and (selector.model is None or entry.model == selector.model)
        and (selector.namespace is None or entry.namespace == selector.namespace)
        and (selector.key_id is None or entry.key_id == selector.key_id)
        and (selector.scope is None or entry.scope == selector.scope)
    )


def size_of(entry: Entry) -> int:
    return len(entry.value) + len(entry.id) + OVERHEAD


class _Filed:
    """One partition's vectors in the order filed. A cursor counts every vector ever filed there: `base`
    of them were dropped from the front (expired or purged), the rest are `rows`."""

    __slots__ = ("base", "rows")

    def __init__(self) -> None:
        self.base = 0
        self.rows: list[tuple[str, bytes, float]] = []

    def compact(self, now: float, bound: int | None) -> None:
        """Drop the expired (or purged) rows at the front, and the oldest past `bound`."""
        dead = 0
        for _, _, expires in self.rows:
            if expires > now:
                break
            dead += 1
        if bound is not None:
            dead = max(dead, len(self.rows) - bound)
        if dead:
            del self.rows[:dead]
            self.base += dead


class MemoryBackend:
    name = "memory"

    def __init__(self, max_bytes: int, *, max_vectors_per_partition: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_vectors = max_vectors_per_partition
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        # partition -> what was filed there, in order (a lookup checks the entry still exists anyway)
        self._vectors: dict[str, _Filed] = {}

    async def get(self, entry_id: str) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None:
            return None
        if entry.expires_at <= time.time():
            self._drop(entry_id)
            return None
        self._entries.move_to_end(entry_id)
        return entry

    async def put(self, entry: Entry) -> None:
        if entry.id in self._entries:
            self._drop(entry.id)
        size = size_of(entry)
        if size > self.max_bytes:
            return  # larger than the whole bound: never stored
        self._entries[entry.id] = entry
        self._bytes += size
        while self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _drop(self, entry_id: str) -> None:
        entry = self._entries.pop(entry_id, None)
        if entry is not None:
            self._bytes -= size_of(entry)

    async def add_vector(self, partition: str, entry_id: str, vector: bytes, expires_at: float) -> None:
        filed = self._vectors.setdefault(partition, _Filed())
        filed.rows.append((entry_id, vector, expires_at))
        filed.compact(time.time(), self.max_vectors)

    async def vectors(self, partition: str, after: int) -> tuple[list[tuple[str, bytes]], int]:
        filed = self._vectors.get(partition)
        if filed is None:
            return [], after
        now = time.time()
        rows = filed.rows[max(after - filed.base, 0) :]
        return [(i, v) for i, v, expires in rows if expires > now], filed.base + len(filed.rows)

    async def purge(self, selector: Purge) -> int:
        """Remove the matching entries; the count is of live ones (an expired entry is dropped uncounted, as
        Redis would have forgotten it already)."""
        now = time.time()
        chosen = [e for e in self._entries.values() if matches(e, selector)]
        for entry in chosen:
            self._drop(entry.id)
        gone = {e.id for e in chosen}
        for partition in {e.partition for e in chosen if e.partition is not None}:
            filed = self._vectors.get(partition)
            if filed is not None:  # tombstones keep every cursor's position; compaction drops them in time
                filed.rows = [(i, v, 0.0 if i in gone else x) for i, v, x in filed.rows]
        return sum(1 for e in chosen if e.expires_at > now)

    async def stats(self) -> BackendStats:
        now = time.time()
        vectors = sum(1 for filed in self._vectors.values() for row in filed.rows if row[2] > now)
        return BackendStats("memory", len(self._entries), self._bytes, vectors, self.max_bytes)

    async def aclose(self) -> None:
        self._entries.clear()
        self._vectors.clear()
        self._bytes = 0
