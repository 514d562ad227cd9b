"""The semantic cache: a paraphrase of a cached prompt answered from the cache (docs/caching.md).

Two pieces, both behind the service (cache/service.py), which decides when they apply:
- `semantic_parts` splits a chat body into the part that must match exactly (hashed, with the tenant scope and
  the model, into a *partition*) and the text that is compared by meaning. Only entries of one partition are
  ever compared, so a paraphrase never crosses tenants, models, system prompts or sampling settings.
- `SemanticIndex` holds each partition's vectors in-process as one float32 matrix of unit rows: a search is a
  matrix-vector product (brute force, exact), which at the default bound of 10,000 vectors per partition costs
  about 0.15 ms, and 5 ms at 100,000 (then on a worker thread). The backend is the source of truth: every search
  first reads what was filed after the partition's cursor (`Backend.vectors`), so a vector another replica
  filed is found, and a restarted process rebuilds its copy on first use (10,000 vectors: ~15 ms).

Why no approximate index (HNSW: hnswlib, faiss, usearch install from PyPI; pgvector and Redis's vector search
are not available from this machine's registries): measured at 384 dimensions, brute force answers 10,000
vectors as fast as HNSW does (0.1 ms), exactly, with nothing to build; at 100,000 HNSW is ~30x faster per
search (0.25 ms against 8) but found the true nearest only 82-84% of the time (M 16, ef 64), took 28-47 s to
build (0.3-0.5 ms an insertion) and needs deletions handled. A partition is one tenant's one model and one
exact prefix, so partitions past 100,000 vectors are not the case this is built for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from inferplex.cache.embedders import Embedder, TextTooLong, open_embedder, unit_rows

if TYPE_CHECKING:
    from inferplex.cache.base import Backend
    from inferplex.cache.settings import SemanticSettings

__all__ = ["Embedder", "SemanticIndex", "TextTooLong", "open_embedder", "semantic_parts"]

F32 = npt.NDArray[np.float32]
log = logging.getLogger("inferplex")

Compare = Literal["last_user", "conversation"]
# a search over more rows than this runs its product on a worker thread rather than on the event loop
THREAD_ROWS = 20_000
# at most this many matches returned by one search: the service tries them in order until one still exists
MAX_MATCHES = 8
# vectors filed from one catch-up between two yields to the event loop (~2-10 ms of copying at 384 dimensions)
FILE_SLICE = 2048
# every partition's matrices together, in bytes: the least recently searched partitions are dropped past it
# (a dropped partition is read again from the backend when next searched)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


# ---- what is compared ------------------------------------------------------------------------------------------


def _split_content(content: Any) -> tuple[str, list[Any]]:
    """A message's text (string content, or its text parts joined by newlines) and its other parts (images,
    audio, files), which are not text and so stay in the exact part."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        return "", [] if content is None else [content]
    texts: list[str] = []
    rest: list[Any] = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            rest.append(part)
    return "\n".join(texts), rest


def _without_text(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message with its text taken out (its non-text parts kept, in order): string content and a list of
    one text part are the same request, so both leave the same remainder."""
    _, rest = _split_content(message.get("content"))
    return {**message, "content": rest}


def semantic_parts(body: Mapping[str, Any], compare: Compare) -> tuple[Any, str] | None:
    """The part of a chat body that must match exactly, and the text compared by meaning; None when there is
    nothing to compare (no `messages`, as for embeddings or Responses bodies; no user text).

    `last_user`: the last user message's text is compared; everything else (the other messages, that message's
    non-text parts and fields, every other body field) must match exactly.
    `conversation`: every message's text, role-tagged and in order, is compared; the other body fields and
    whatever in the messages is not text (images, tool calls, tool call ids) must match exactly."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        return None
    others = {k: v for k, v in body.items() if k != "messages"}
    if compare == "last_user":
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                text, _ = _split_content(messages[i].get("content"))
                if not text.strip():
                    return None
                kept = [*messages[:i], _without_text(messages[i]), *messages[i + 1 :]]
                return {**others, "messages": kept}, text
        return None
    lines: list[str] = []
    residues: list[dict[str, Any]] = []
    user_text = False
    for message in messages:
        role = str(message.get("role"))
        text, _ = _split_content(message.get("content"))
        if text.strip():
            lines.append(f"{role}: {text}")
            user_text = user_text or role == "user"
        residue = {k: v for k, v in _without_text(message).items() if k != "role"}  # role: in the text
        if residue != {"content": []}:
            residues.append(residue)
    if not user_text:
        return None
    exact = {**others, "messages": residues} if residues else others
    return exact, "\n".join(lines)


# ---- the index ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Partition:
    """One partition's vectors: rows [start, end) of `matrix` are searched; `ids[row]` is None for a row
    forgotten or dropped (its vector zeroed, so it scores 0, below any threshold)."""

    bound: int
    matrix: F32 | None = None
    ids: list[str | None] = field(default_factory=list)
    expires: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    rows: dict[str, int] = field(default_factory=dict)
    start: int = 0
    end: int = 0
    cursor: int = 0
    catching_up: asyncio.Task[None] | None = None
    # this process's own vectors' expiry until the backend hands them back (its rows carry no expiry)
    known: dict[str, float] = field(default_factory=dict)
    mismatched: bool = False

    @property
    def nbytes(self) -> int:
        return 0 if self.matrix is None else self.matrix.nbytes

    @property
    def dimensions(self) -> int | None:
        return None if self.matrix is None else self.matrix.shape[1]

    def file(self, entry_ids: list[str], vectors: F32, expires: list[float]) -> None:
        """File rows in the backend's order (the newest last), then drop the oldest past the bound. An id filed
        again (this process's own vector read back, an entry stored anew) moves to its new place, so a batch
        read from the backend leaves the same newest rows here as there. One numpy copy for the whole batch:
        a replica's first search may file 10,000 at once."""
        if self.matrix is None:
            self._reallocate(vectors.shape[1], min(16, 2 * self.bound), [])
        assert self.matrix is not None
        order: dict[str, int] = {}
        for i, entry_id in enumerate(entry_ids):
            order.pop(entry_id, None)
            order[entry_id] = i
            row = self.rows.get(entry_id)
            if row is not None:
                self.drop(row)
        chosen = list(order.items())[-self.bound :]
        if self.end + len(chosen) > self.matrix.shape[0]:
            self._make_room(len(chosen))
        start, end = self.end, self.end + len(chosen)
        self.matrix[start:end] = vectors[[i for _, i in chosen]]
        self.expires[start:end] = [expires[i] for _, i in chosen]
        for row, (entry_id, _) in enumerate(chosen, start):
            self.ids[row] = entry_id
            self.rows[entry_id] = row
        self.end = end
        while len(self.rows) > self.bound:  # the oldest go first
            self.drop(self.start)
            self.start += 1

    def reserve(self, extra: int, dimensions: int) -> None:
        """Room for `extra` more rows at once, before a long catch-up files them a slice at a time: one
        reallocation while the partition is small, instead of doublings that copy it when it is large."""
        extra = min(extra, self.bound)
        if self.matrix is None:
            self._reallocate(dimensions, max(16, min(2 * self.bound, 2 * extra)), [])
        elif self.end + extra > self.matrix.shape[0]:
            self._make_room(extra)

    def drop(self, row: int) -> None:
        entry_id = self.ids[row]
        if entry_id is not None:
            del self.rows[entry_id]
            self.ids[row] = None
        assert self.matrix is not None
        self.matrix[row] = 0.0

    def _make_room(self, extra: int) -> None:
        """Move the live rows to the front of a new matrix, doubled while they and `extra` would fill more
        than half of it (up to twice the bound): amortised O(1) a row. A new array, not in place, so a search
        running on a thread keeps a consistent snapshot."""
        assert self.matrix is not None
        now = time.time()
        live = [r for r in range(self.start, self.end) if self.ids[r] is not None and self.expires[r] > now]
        capacity = self.matrix.shape[0]
        while capacity < 2 * (len(live) + extra) and capacity < 2 * self.bound:
            capacity *= 2
        self._reallocate(self.matrix.shape[1], max(capacity, len(live) + extra), live)

    def _reallocate(self, dimensions: int, capacity: int, live: list[int]) -> None:
        matrix = np.zeros((capacity, dimensions), dtype=np.float32)
        expires = np.full(capacity, math.inf)
        ids: list[str | None] = [None] * capacity
        if self.matrix is not None and live:
            matrix[: len(live)] = self.matrix[live]
            expires[: len(live)] = self.expires[live]
            ids[: len(live)] = [self.ids[r] for r in live]
        self.matrix, self.expires, self.ids = matrix, expires, ids
        self.rows = {entry_id: i for i, entry_id in enumerate(ids[: len(live)]) if entry_id is not None}
        self.start, self.end = 0, len(live)


def _search(
    matrix: F32, expires: npt.NDArray[np.float64], vector: F32, threshold: float, now: float
) -> list[tuple[int, float]]:
    """Rows scoring at least `threshold`, best first (at most MAX_MATCHES), from one snapshot."""
    scores = matrix @ vector
    scores[expires <= now] = -1.0
    found = np.flatnonzero(scores >= threshold)
    if found.size > MAX_MATCHES:
        found = found[np.argpartition(-scores[found], MAX_MATCHES - 1)[:MAX_MATCHES]]
    order = found[np.argsort(-scores[found], kind="stable")]
    return [(int(row), float(scores[row])) for row in order]


class SemanticIndex:
    """Each partition's vectors in-process, caught up with the backend on every search.

    The backend holds every vector (its `vectors(partition, cursor)` returns those filed after a cursor), so
    this is a cache of it: bounded per partition (`max_entries_per_partition`, the oldest dropped) and overall
    (`max_bytes`, the least recently searched partitions dropped), emptied by `clear()` after a purge, and
    rebuilt from the backend when needed. The service checks that a match's entry still exists and calls
    `forget` when it does not (expired, evicted, purged on another replica)."""

    def __init__(
        self,
        backend: Backend,
        embedder: Embedder,
        settings: SemanticSettings,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._backend = backend
        self._embedder = embedder
        self._bound = settings.max_entries_per_partition
        self._max_bytes = max_bytes
        self._partitions: OrderedDict[str, _Partition] = OrderedDict()

    @property
    def model(self) -> str:
        """The embedding model's name: the service puts it in every partition's key."""
        return self._embedder.name

    @property
    def vectors(self) -> int:
        """How many vectors are held in-process (every partition)."""
        return sum(len(p.rows) for p in self._partitions.values())

    def fits(self, text: str) -> bool:
        """Whether the embedding model sees all of `text`: when it does not, the text is not compared by
        meaning (a truncated text matches any other with the same beginning)."""
        return self._embedder.fits(text)

    async def embed(self, text: str) -> bytes:
        """`text`'s unit vector as float32 bytes; the encoder runs off the event loop. Raises `TextTooLong` for
        a text the model would truncate (see `fits`), and whatever a configured embedding model's call raised
        (the service's miss)."""
        if not self._embedder.fits(text):
            raise TextTooLong(f"the text is longer than {self._embedder.name} sees")
        vectors = await self._embedder.embed([text])
        row: F32 = unit_rows(vectors)[0]
        return bytes(row.astype("<f4", copy=False).tobytes())

    async def nearest(self, partition: str, vector: bytes, threshold: float) -> list[tuple[str, float]]:
        """Entry ids in `partition` whose similarity to `vector` is at least `threshold`, best first (at most
        MAX_MATCHES), after catching up with what the backend has filed since the last search."""
        part = await self._caught_up(partition)
        if part.matrix is None or part.end == part.start:
            return []
        query = np.frombuffer(vector, dtype="<f4").astype(np.float32)
        if query.shape[0] != part.matrix.shape[1]:
            return []
        matrix, expires, ids = part.matrix[part.start : part.end], part.expires[part.start : part.end], part.ids
        offset = part.start
        now = time.time()
        if part.end - part.start > THREAD_ROWS:
            found = await asyncio.to_thread(_search, matrix, expires, query, threshold, now)
        else:
            found = _search(matrix, expires, query, threshold, now)
        matches = []
        for row, score in found:
            entry_id = ids[offset + row]
            if entry_id is not None:
                matches.append((entry_id, min(score, 1.0)))
        return matches

    async def add(self, partition: str, entry_id: str, vector: bytes, expires_at: float) -> None:
        """File an entry's vector in the backend (for every replica), then catch up with it, so this process's
        index holds it in the backend's order (what the bound keeps is the same everywhere) and the cursor is
        past it (a `forget` is not undone by reading it back). One more read of the backend per stored answer,
        after the answer was sent."""
        await self._backend.add_vector(partition, entry_id, vector, expires_at)
        part = self._partition(partition)
        if len(part.known) > self._bound:
            part.known.clear()  # expiries of vectors the backend never handed back (dropped by its own bound)
        part.known[entry_id] = expires_at
        before = part.catching_up
        if before is not None:  # a read that started before the write may not see it
            with contextlib.suppress(Exception):  # if it failed, the read below says so
                await asyncio.shield(before)
        await self._caught_up(partition)

    def forget(self, entry_id: str) -> None:
        """Stop matching an entry whose answer is gone (the backend's `get` found nothing). Rare (a stale match),
        so it looks in every partition rather than keeping an index of ids."""
        for part in self._partitions.values():
            row = part.rows.get(entry_id)
            if row is not None:
                part.drop(row)

    def clear(self) -> None:
        """Forget every partition (after a purge): each is read again from the backend when next searched."""
        self._partitions.clear()

    # ---- internals ----

    def _partition(self, partition: str) -> _Partition:
        part = self._partitions.get(partition)
        if part is None:
            part = self._partitions[partition] = _Partition(self._bound)
        else:
            self._partitions.move_to_end(partition)
        return part

    async def _caught_up(self, partition: str) -> _Partition:
        """The partition after reading the backend's new vectors; concurrent searches share one read."""
        part = self._partition(partition)
        task = part.catching_up
        if task is None:
            task = part.catching_up = asyncio.ensure_future(self._catch_up(partition, part))
        await asyncio.shield(task)
        return part

    async def _catch_up(self, partition: str, part: _Partition) -> None:
        try:
            rows, cursor = await self._backend.vectors(partition, part.cursor)
            if len(rows) > FILE_SLICE:
                part.reserve(len(rows), part.dimensions or len(rows[0][1]) // 4)
            for start in range(0, len(rows), FILE_SLICE):
                if start:  # a long catch-up (a replica's first search) lets other requests run between slices
                    await asyncio.sleep(0)
                ids = [entry_id for entry_id, _ in rows[start : start + FILE_SLICE]]
                expires = [part.known.pop(entry_id, math.inf) for entry_id in ids]
                self._file(part, partition, ids, [blob for _, blob in rows[start : start + FILE_SLICE]], expires)
            part.cursor = cursor
        finally:
            part.catching_up = None
        if rows:
            self._bound_memory()

    def _file(self, part: _Partition, partition: str, ids: list[str], blobs: list[bytes], expires: list[float]) -> None:
        """File float32 vectors (bytes); those of another dimension than the partition's are ignored (a vector
        from another model cannot be compared), with one warning per partition."""
        size = 4 * (part.dimensions or len(blobs[0]) // 4)
        if any(len(blob) != size for blob in blobs):
            kept = [(i, b, x) for i, b, x in zip(ids, blobs, expires, strict=True) if len(b) == size]
            ids, blobs, expires = [i for i, _, _ in kept], [b for _, b, _ in kept], [x for _, _, x in kept]
            if not part.mismatched:
                part.mismatched = True
                log.warning("semantic cache: vectors of another dimension in partition %s are ignored", partition)
        if ids and size:
            part.file(
                ids, np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(ids), -1), expires
            )

    def _bound_memory(self) -> None:
        total = sum(p.nbytes for p in self._partitions.values())
        while total > self._max_bytes and len(self._partitions) > 1:
            name, part = self._partitions.popitem(last=False)
            total -= part.nbytes
            log.info("semantic cache: partition %s dropped from memory (over %d bytes)", name, self._max_bytes)
