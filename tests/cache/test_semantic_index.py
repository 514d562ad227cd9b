"""The semantic index with a deterministic fake encoder (no model): what it finds, from which backend state,
within which bounds. Two indexes over one store stand for two replicas (or two workers)."""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplex.cache.backends.memory import MemoryBackend
from inferplex.cache.backends.redis import RedisBackend
from inferplex.cache.backends.sqlite import SqliteBackend
from inferplex.cache.base import Backend, Purge
from inferplex.cache.embedders import LocalEmbedder
from inferplex.cache.semantic import MAX_MATCHES, SemanticIndex
from inferplex.cache.settings import SemanticSettings
from tests.accounts.conftest import REDIS_URL
from tests.replicas import forget_redis_prefix

SOON = 3600.0


def vec(*values: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.asarray(values, dtype=np.float32)
    out: np.ndarray[Any, np.dtype[np.float32]] = v / np.linalg.norm(v)
    return out


def angled(cos: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A unit vector whose cosine with (1, 0, 0, 0) is `cos`."""
    return vec(cos, math.sqrt(1 - cos * cos), 0, 0)


class FakeEncoder:
    """Texts to fixed 4-d vectors; unknown texts to a direction of their own. Counts its forward passes."""

    name = "fake-4d"

    def __init__(self, table: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.table = table or {}
        self.fail = fail
        self.passes: list[list[str]] = []
        self.threads: set[int] = set()

    def encode(self, texts: list[str]) -> Any:
        self.threads.add(threading.get_ident())
        self.passes.append(list(texts))
        time.sleep(0.01)  # a forward pass takes time: lookups arriving meanwhile queue for the next one
        if self.fail:
            raise RuntimeError("encoder broke")
        return np.stack([self.table.get(t, vec(0, 0, 1, (hash(t) % 97) / 97)) for t in texts])


TABLE = {"capital of France": vec(1, 0, 0, 0), "France's capital": angled(0.96), "weather": vec(0, 1, 0, 0)}


def settings(**kw: Any) -> SemanticSettings:
    return SemanticSettings(**kw)


def eid(n: int) -> str:
    return f"{n:064x}"


async def test_embed_runs_the_encoder_on_a_thread_and_returns_unit_float32() -> None:
    encoder = FakeEncoder({"x": np.asarray([3, 4, 0, 0], dtype=np.float32)})  # not unit: normalised
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(encoder), settings())
    blob = await index.embed("x")
    assert np.frombuffer(blob, dtype="<f4").tolist() == pytest.approx([0.6, 0.8, 0, 0])
    assert threading.get_ident() not in encoder.threads
    assert index.model == "fake-4d"


async def test_concurrent_lookups_share_forward_passes_and_each_gets_its_own_vector() -> None:
    encoder = FakeEncoder(TABLE)
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(encoder), settings())
    texts = ["capital of France", "weather", "France's capital"] * 4
    blobs = await asyncio.gather(*(index.embed(t) for t in texts))
    for text, blob in zip(texts, blobs, strict=True):
        assert np.frombuffer(blob, dtype="<f4") == pytest.approx(TABLE[text])
    assert len(encoder.passes) < len(texts)  # the first pass alone, then the rest together
    assert sum(len(p) for p in encoder.passes) == len(texts)


async def test_an_encoder_failure_reaches_the_caller_and_the_next_lookup_runs_again() -> None:
    encoder = FakeEncoder(TABLE, fail=True)
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(encoder), settings())
    with pytest.raises(RuntimeError, match="encoder broke"):
        await index.embed("weather")
    encoder.fail = False
    assert len(await index.embed("weather")) == 16


async def test_nearest_is_best_first_at_or_above_the_threshold_within_its_partition() -> None:
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(FakeEncoder()), settings())
    for n, cos in enumerate([0.5, 0.99, 0.9, 0.95, 0.7]):
        await index.add("p1", eid(n), angled(cos).tobytes(), time.time() + SOON)
    await index.add("p2", eid(9), vec(1, 0, 0, 0).tobytes(), time.time() + SOON)
    query = vec(1, 0, 0, 0).tobytes()
    found = await index.nearest("p1", query, 0.9)
    assert [i for i, _ in found] == [eid(1), eid(3), eid(2)]
    assert [s for _, s in found] == pytest.approx([0.99, 0.95, 0.9], abs=1e-5)
    assert await index.nearest("p1", query, 0.995) == []
    assert [i for i, _ in await index.nearest("p2", query, 0.9)] == [eid(9)]
    assert await index.nearest("p3", query, 0.1) == []
    assert await index.nearest("p1", vec(1, 0, 0).tobytes(), 0.1) == []  # another dimension matches nothing


async def test_at_most_a_few_matches_come_back() -> None:
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(FakeEncoder()), settings())
    for n in range(MAX_MATCHES + 5):
        await index.add("p", eid(n), angled(0.9 + n / 1000).tobytes(), time.time() + SOON)
    found = await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.5)
    assert [i for i, _ in found] == [eid(n) for n in range(MAX_MATCHES + 4, 4, -1)]


# ---- two indexes over one store: memory (one backend), SQLite (one file), Redis (one prefix) ----------------

Opener = Callable[[], Awaitable[Backend]]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    opened: list[Backend] = []
    prefix = f"inferplex_test:semantic:{secrets.token_hex(6)}:"
    memory = MemoryBackend(1 << 24)

    async def open_backend() -> Backend:
        backend: Backend
        if request.param == "memory":
            return memory
        if request.param == "sqlite":
            backend = await SqliteBackend.open(str(tmp_path / "cache.sqlite3"))
        else:
            backend = await RedisBackend.open(REDIS_URL, prefix, 2.0)
        opened.append(backend)
        return backend

    yield open_backend
    for backend in opened:
        await backend.aclose()
    await memory.aclose()
    if request.param == "redis":
        forget_redis_prefix(prefix)


class Counting:
    """A backend wrapper that records what each `vectors` call returned."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def vectors(self, partition: str, after: int) -> tuple[list[tuple[str, bytes]], int]:
        rows, cursor = await self.backend.vectors(partition, after)
        self.reads.append(len(rows))
        return rows, cursor


async def test_a_vector_filed_by_one_replica_is_found_by_another(store: Opener) -> None:
    one = SemanticIndex(await store(), LocalEmbedder(FakeEncoder()), settings())
    seen = Counting(await store())
    two = SemanticIndex(seen, LocalEmbedder(FakeEncoder()), settings())
    query = vec(1, 0, 0, 0).tobytes()
    assert await two.nearest("p", query, 0.9) == []
    await one.add("p", eid(1), angled(0.97).tobytes(), time.time() + SOON)
    assert [(i, round(s, 4)) for i, s in await two.nearest("p", query, 0.9)] == [(eid(1), 0.97)]
    await one.add("p", eid(2), angled(0.99).tobytes(), time.time() + SOON)
    assert [i for i, _ in await two.nearest("p", query, 0.9)] == [eid(2), eid(1)]
    assert [i for i, _ in await two.nearest("p", query, 0.9)] == [eid(2), eid(1)]
    # each search read only what was new since the last: nothing, one, one, nothing
    assert seen.reads == [0, 1, 1, 0]
    # its own vectors come back through the backend too, without doubling
    await two.add("p", eid(3), angled(0.95).tobytes(), time.time() + SOON)
    assert [i for i, _ in await two.nearest("p", query, 0.9)] == [eid(2), eid(1), eid(3)]
    assert two.vectors == 3


async def test_concurrent_searches_of_one_partition_share_one_read(store: Opener) -> None:
    backend = await store()
    await SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings()).add(
        "p", eid(1), vec(1, 0, 0, 0).tobytes(), time.time() + SOON
    )
    seen = Counting(backend)
    index = SemanticIndex(seen, LocalEmbedder(FakeEncoder()), settings())
    results = await asyncio.gather(*(index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9) for _ in range(10)))
    assert all([i for i, _ in r] == [eid(1)] for r in results)
    assert seen.reads == [1]


async def test_a_partition_keeps_its_newest_vectors_only(store: Opener) -> None:
    bounded = settings(max_entries_per_partition=3)
    one = SemanticIndex(await store(), LocalEmbedder(FakeEncoder()), bounded)
    for n in range(6):
        await one.add("p", eid(n), angled(0.9 + n / 100).tobytes(), time.time() + SOON)
    query = vec(1, 0, 0, 0).tobytes()
    assert [i for i, _ in await one.nearest("p", query, 0.5)] == [eid(5), eid(4), eid(3)]
    # a second replica reading them all at once keeps the same three
    two = SemanticIndex(await store(), LocalEmbedder(FakeEncoder()), bounded)
    assert [i for i, _ in await two.nearest("p", query, 0.5)] == [eid(5), eid(4), eid(3)]
    assert one.vectors == two.vectors == 3


async def test_forget_stops_matching_here_and_clear_reads_the_backend_again(store: Opener) -> None:
    backend = await store()
    index = SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings())
    query = vec(1, 0, 0, 0).tobytes()
    await index.add("p", eid(1), angled(0.99).tobytes(), time.time() + SOON)
    await index.add("p", eid(2), angled(0.95).tobytes(), time.time() + SOON)
    index.forget(eid(1))
    index.forget(eid(7))  # never filed: nothing happens
    assert [i for i, _ in await index.nearest("p", query, 0.9)] == [eid(2)]  # not read back by the catch-up
    index.clear()  # after a purge: the backend is read again from the start
    assert [i for i, _ in await index.nearest("p", query, 0.9)] == [eid(1), eid(2)]


async def test_a_purged_vector_is_gone_after_clear(store: Opener) -> None:
    from tests.cache.test_backends import entry

    backend = await store()
    index = SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings())
    stored = entry(1, partition="p")
    await backend.put(stored)
    await index.add("p", stored.id, vec(1, 0, 0, 0).tobytes(), stored.expires_at)
    assert await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9) != []
    assert await backend.purge(Purge(entry=stored.id)) == 1
    index.clear()
    assert await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9) == []


async def test_an_expired_vector_is_not_matched() -> None:
    index = SemanticIndex(MemoryBackend(1 << 20), LocalEmbedder(FakeEncoder()), settings())
    await index.add("p", eid(1), vec(1, 0, 0, 0).tobytes(), time.time() + 0.05)
    assert await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9) != []
    await asyncio.sleep(0.1)
    assert await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9) == []


async def test_vectors_of_another_dimension_in_a_partition_are_ignored() -> None:
    backend = MemoryBackend(1 << 20)
    await backend.add_vector("p", eid(1), vec(1, 0, 0, 0).tobytes(), time.time() + SOON)
    await backend.add_vector("p", eid(2), vec(1, 0, 0).tobytes(), time.time() + SOON)  # another model's
    await backend.add_vector("p", eid(3), angled(0.95).tobytes(), time.time() + SOON)
    index = SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings())
    assert [i for i, _ in await index.nearest("p", vec(1, 0, 0, 0).tobytes(), 0.9)] == [eid(1), eid(3)]


async def test_memory_past_the_bound_drops_the_least_recently_searched_partition() -> None:
    backend = MemoryBackend(1 << 24)
    # 4 dims: a partition's first matrix holds 16 rows of 16 bytes = 256 bytes; room for two of them
    index = SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings(), max_bytes=600)
    query = vec(1, 0, 0, 0).tobytes()
    for name in ("a", "b"):
        await index.add(name, eid(ord(name)), query, time.time() + SOON)
    await index.nearest("a", query, 0.9)  # b is now the least recently used
    await index.add("c", eid(ord("c")), query, time.time() + SOON)
    assert index.vectors == 2
    seen = Counting(backend)
    index._backend = seen
    assert [i for i, _ in await index.nearest("b", query, 0.9)] == [eid(ord("b"))]  # read again: from 0
    assert seen.reads == [1]


async def test_a_large_partition_grows_compacts_and_is_searched_on_a_thread() -> None:
    from inferplex.cache import semantic

    rng = np.random.default_rng(1)
    n = semantic.THREAD_ROWS + 500
    data = rng.standard_normal((n, 8)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    backend = MemoryBackend(1 << 28)
    for i in range(n):
        await backend.add_vector("p", eid(i), data[i].tobytes(), time.time() + SOON)
    index = SemanticIndex(backend, LocalEmbedder(FakeEncoder()), settings(max_entries_per_partition=n - 100))
    found = await index.nearest("p", data[n - 1].tobytes(), 0.999)
    assert found[0][0] == eid(n - 1)
    assert await index.nearest("p", data[50].tobytes(), 0.999) == []  # among the 100 oldest: dropped
    for i in range(200):  # forgotten rows are left out when the matrix is compacted
        index.forget(eid(n - 1 - i))
    assert (await index.nearest("p", data[n - 1].tobytes(), 0.999)) == []
    assert index.vectors == n - 300


async def test_adds_and_searches_interleaved_leave_both_replicas_with_every_vector(store: Opener) -> None:
    one = SemanticIndex(await store(), LocalEmbedder(FakeEncoder()), settings())
    two = SemanticIndex(await store(), LocalEmbedder(FakeEncoder()), settings())
    query = vec(1, 0, 0, 0).tobytes()

    async def add(n: int) -> None:
        await (one if n % 2 else two).add("p", eid(n), angled(0.9 + n / 1000).tobytes(), time.time() + SOON)

    await asyncio.gather(*(add(n) for n in range(20)), *(one.nearest("p", query, 0.5) for _ in range(5)))
    await asyncio.gather(*(two.nearest("p", query, 0.5) for _ in range(5)))
    for index in (one, two):
        assert [i for i, _ in await index.nearest("p", query, 0.5)] == [eid(n) for n in range(19, 11, -1)]
        assert index.vectors == 20
