"""The response cache's seams: what the pipeline asks of it, what a backend stores, what one request decided.

The pipeline knows only `ResponseCache` (three calls: look up, keep a buffered answer, record a stream) and
the outcome it leaves on the context (`CacheOutcome`), which the guard bills from, the dialects put in the
`x-inferplex-cache` header and `timings`, and the usage row and metrics record. Everything else (keys,
per-request control, backends, the semantic index) sits behind it, in this package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from inferplex.config import ModelConfig
    from inferplex.context import Context
    from inferplex.families.base import Family
    from inferplex.gateway_request import GatewayRequest
    from inferplex.responses import ChatCompletionChunk

# The outcome lives apart (context.py imports it; this module names the context): re-exported here.
from inferplex.cache.outcome import HITS, MILLION, CacheOutcome, Status

__all__ = ["HITS", "MILLION", "Backend", "BackendStats", "CacheAdmin", "CacheOutcome", "Cached", "Entry", "Purge",
           "ResponseCache", "Status"]  # fmt: skip


@dataclass(slots=True)
class Cached:
    """A stored answer: a buffered one (`answer`, the family's JSON object) or a stream (`chunks`, in order,
    each with its offset in seconds from the stream's start, for a replay at the original pace)."""

    answer: dict[str, Any] | None = None
    chunks: list[tuple[float, ChatCompletionChunk]] | None = None
    # who produced it: {"deployment": its key, "tier": the service tier}, so a hit is priced as it was
    priced: dict[str, Any] | None = None


class ResponseCache(Protocol):
    async def lookup(
        self,
        ctx: Context,
        family: Family[Any, Any, Any],
        model: ModelConfig,
        request: GatewayRequest[Any],
        *,
        stream: bool,
    ) -> Cached | None:
        """A stored answer for this request, or None (a miss, a bypass, or caching off for it). Sets
        `ctx.cache` whenever caching applies to the request; never raises for a backend outage (a miss)."""
        ...

    async def keep(self, ctx: Context, answer: Any) -> None:
        """After a miss: store the buffered answer if the request's plan says so (not an error, not cut by
        max_tokens unless asked for). Never raises for a backend outage."""
        ...

    def record(
        self, ctx: Context, first: ChatCompletionChunk, rest: AsyncIterator[ChatCompletionChunk]
    ) -> AsyncIterator[ChatCompletionChunk]:
        """After a stream's miss: `rest` passed through unchanged, the chunks (from `first`) stored once the
        upstream ends cleanly; never an aborted or failed stream."""
        ...

    def flight(self, ctx: Context) -> AbstractAsyncContextManager[None]:
        """Around a buffered miss's upstream call and `keep`: identical requests that miss meanwhile wait for
        its answer (at most `cache.coalesce_wait_s`) instead of calling the upstream too; released however the
        call ends."""
        ...

    def replay(self, ctx: Context, cached: Cached) -> tuple[ChatCompletionChunk, AsyncIterator[ChatCompletionChunk]]:
        """A stored stream as the pipeline's (first chunk, the rest), at the configured pace."""
        ...

    async def aclose(self) -> None: ...


# ---- what a backend stores (cache/backends/) -----------------------------------------------------------------


@dataclass(slots=True)
class Entry:
    """One stored answer with what purges select it by. `value` is the service's own encoding of `Cached`;
    a backend never looks inside it."""

    id: str  # the cache key's hash (hex): what lookups ask for, and the header names
    value: bytes
    created_at: float  # time.time()
    expires_at: float
    model: str  # the public model's name
    scope: str  # whose it is: "account:<id>", "key:<id>", "shared" (the operator's opt-in), "open" (no accounts)
    namespace: str | None = None  # the caller's namespace, within the scope
    key_id: str | None = None  # the key whose request stored it
    partition: str | None = None  # the semantic partition its vector was filed under, if any


@dataclass(frozen=True, slots=True)
class Purge:
    """Which entries to remove: every field given must match (all None: everything)."""

    entry: str | None = None
    model: str | None = None
    namespace: str | None = None
    key_id: str | None = None
    scope: str | None = None


@dataclass(slots=True)
class BackendStats:
    backend: str
    entries: int
    bytes: int
    vectors: int = 0
    max_bytes: int | None = None  # the in-process backend's bound


class Backend(Protocol):
    """Where entries live: in-process (LRU, bounded by bytes), SQLite (the embedded default), Redis (shared by
    replicas). Every method may raise on an outage; the service turns that into a miss and a log line."""

    name: str

    async def get(self, entry_id: str) -> Entry | None:
        """The entry, or None when absent or expired."""
        ...

    async def put(self, entry: Entry) -> None:
        """Store (or replace) an entry until its `expires_at`."""
        ...

    async def add_vector(self, partition: str, entry_id: str, vector: bytes, expires_at: float) -> None:
        """File an entry's embedding (float32, unit length) under a semantic partition."""
        ...

    async def vectors(self, partition: str, after: int) -> tuple[list[tuple[str, bytes]], int]:
        """The partition's vectors filed after cursor `after` (0: all), and the cursor to pass next time, so a
        replica's in-process index catches up with what other replicas filed without reading it all again."""
        ...

    async def purge(self, selector: Purge) -> int:
        """Remove the matching entries (and their vectors); how many were removed."""
        ...

    async def stats(self) -> BackendStats: ...

    async def aclose(self) -> None: ...


class CacheAdmin(Protocol):
    """What `/admin/cache` and the console ask of the running cache (`app.state.cache`)."""

    async def stats(self) -> BackendStats: ...

    async def purge(self, selector: Purge) -> int: ...
