"""One contract for the response cache's backends (cache/base.py `Backend`): in-process memory, SQLite and
Redis each store, expire, purge and count entries the same way, and hand a semantic partition's vectors to
a second instance on the same store (another replica, another worker) from a cursor."""

from __future__ import annotations

import asyncio
import secrets
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from inferplex.cache.backends import redis as redis_backend
from inferplex.cache.backends.redis import RedisBackend
from inferplex.cache.backends.sqlite import SqliteBackend
from inferplex.cache.base import Backend, Entry, Purge
from tests.accounts.conftest import REDIS_URL
from tests.fakes.tcp_proxy import TcpProxy
from tests.replicas import forget_redis_prefix

Opener = Callable[..., Awaitable[Any]]


def _memory_backend() -> Any:
    """H1's in-process backend (cache/backends/memory.py), or None until it is there."""
    try:
        from inferplex.cache.backends.memory import MemoryBackend
    except ImportError:
        return None
    return MemoryBackend


@dataclass
class Store:
    """One store (a memory backend, an SQLite file, a Redis prefix) and a way to open instances on it; every
    instance opened is closed at the end."""

    kind: str
    open: Opener  # open(**options) -> a new backend instance on the same store
    shared: bool  # two instances see each other's writes (memory: one instance stands for both)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    kind = request.param
    opened: list[Any] = []
    if kind == "memory":
        memory = _memory_backend()
        if memory is None:
            pytest.skip("cache/backends/memory.py (H1's MemoryBackend) is not there yet")
        instances: dict[str, Any] = {}  # one per set of options: it stands for every instance "on the store"

        async def open_memory(**options: Any) -> Any:
            instance = instances.get(repr(options))
            if instance is None:
                instance = instances[repr(options)] = memory(64 * 1024 * 1024, **options)
                opened.append(instance)
            return instance

        yield Store(kind, open_memory, shared=False)
    elif kind == "sqlite":
        path = str(tmp_path / "cache.sqlite3")

        async def open_sqlite(**options: Any) -> Any:
            backend = await SqliteBackend.open(path, **options)
            opened.append(backend)
            return backend

        yield Store(kind, open_sqlite, shared=True)
    else:
        prefix = f"inferplex_test:cache:{secrets.token_hex(6)}:"

        async def open_redis(**options: Any) -> Any:
            backend = await RedisBackend.open(REDIS_URL, prefix, 2.0, **options)
            opened.append(backend)
            return backend

        yield Store(kind, open_redis, shared=True)
        forget_redis_prefix(prefix)
    for backend in {id(b): b for b in opened}.values():
        await backend.aclose()


def entry(
    n: int,
    *,
    ttl: float = 60.0,
    model: str = "echo-model",
    scope: str = "account:a",
    namespace: str | None = None,
    key_id: str | None = "key-1",
    partition: str | None = None,
    value: bytes | None = None,
) -> Entry:
    now = time.time()
    return Entry(
        id=f"{n:064x}",
        value=value if value is not None else f"answer {n}".encode() * 10,
        created_at=now,
        expires_at=now + ttl,
        model=model,
        scope=scope,
        namespace=namespace,
        key_id=key_id,
        partition=partition,
    )


async def test_an_entry_comes_back_as_it_was_stored(store: Store) -> None:
    backend: Backend = await store.open()
    stored = entry(1, namespace="team-x", partition="p1", value=bytes(range(256)) * 40)
    await backend.put(stored)
    assert await backend.get(stored.id) == stored
    bare = entry(2, key_id=None)
    await backend.put(bare)
    assert await backend.get(bare.id) == bare
    assert await backend.get(f"{3:064x}") is None


async def test_a_put_replaces_the_entry_of_the_same_id(store: Store) -> None:
    backend: Backend = await store.open()
    await backend.put(entry(1, model="m-old", value=b"old" * 100))
    newer = entry(1, model="m-new", value=b"new")
    await backend.put(newer)
    assert await backend.get(newer.id) == newer
    stats = await backend.stats()
    assert (stats.entries, stats.bytes >= 3) == (1, True)
    assert await backend.purge(Purge(model="m-old")) == 0  # the replaced entry's index went with it
    assert await backend.get(newer.id) == newer


async def test_an_entry_is_absent_once_it_expires(store: Store) -> None:
    backend: Backend = await store.open()
    short, long = entry(1, ttl=0.3), entry(2, ttl=60)
    await backend.put(short)
    await backend.put(long)
    await backend.put(entry(3, ttl=-1))  # expired already: never served
    assert await backend.get(short.id) == short
    assert await backend.get(f"{3:064x}") is None
    await asyncio.sleep(0.4)
    assert await backend.get(short.id) is None
    assert await backend.get(long.id) == long
    stats = await backend.stats()
    assert stats.entries == 1
    assert stats.bytes >= len(long.value)


SELECTIONS = [
    pytest.param(Purge(model="m2"), {2, 5}, id="model"),
    pytest.param(Purge(namespace="ns"), {3, 5}, id="namespace"),
    pytest.param(Purge(key_id="k2"), {4}, id="key"),
    pytest.param(Purge(scope="account:b"), {6}, id="scope"),
    pytest.param(Purge(model="m2", namespace="ns"), {5}, id="model-and-namespace"),
    pytest.param(Purge(entry=f"{5:064x}"), {5}, id="entry"),
    pytest.param(Purge(entry=f"{5:064x}", model="m1"), set(), id="entry-of-another-model"),
    pytest.param(Purge(), {1, 2, 3, 4, 5, 6}, id="everything"),
]


@pytest.mark.parametrize(("selector", "removed"), SELECTIONS)
async def test_a_purge_removes_exactly_the_entries_it_selects(store: Store, selector: Purge, removed: set[int]) -> None:
    backend: Backend = await store.open()
    entries = {
        1: entry(1, model="m1"),
        2: entry(2, model="m2"),
        3: entry(3, model="m1", namespace="ns"),
        4: entry(4, model="m1", key_id="k2"),
        5: entry(5, model="m2", namespace="ns"),
        6: entry(6, model="m1", scope="account:b"),
    }
    for e in entries.values():
        await backend.put(e)
    assert await backend.purge(selector) == len(removed)
    for n, e in entries.items():
        assert (await backend.get(e.id) is None) == (n in removed), n
    stats = await backend.stats()
    assert stats.entries == 6 - len(removed)
    assert await backend.purge(selector) == 0  # nothing left to select


async def test_a_purge_counts_only_live_entries_and_forgets_expired_ones(store: Store) -> None:
    """What a purge reports is what callers could still have been served: Redis has already forgotten an
    expired entry by itself, so every backend counts only live ones."""
    backend: Backend = await store.open()
    await backend.put(entry(1, ttl=0.2, model="m"))
    await backend.put(entry(2, model="m"))
    await asyncio.sleep(0.3)
    assert await backend.purge(Purge(model="m")) == 1
    assert (await backend.stats()).entries == 0


async def test_a_purge_removes_the_entries_vectors(store: Store) -> None:
    backend: Backend = await store.open()
    for n in (1, 2, 3):
        e = entry(n, partition="p", model="m2" if n == 2 else "m1")
        await backend.put(e)
        await backend.add_vector("p", e.id, _vector(n), e.expires_at)
    assert (await backend.stats()).vectors == 3
    assert await backend.purge(Purge(model="m2")) == 1
    items, _ = await backend.vectors("p", 0)
    assert [entry_id for entry_id, _ in items] == [f"{1:064x}", f"{3:064x}"]
    assert (await backend.stats()).vectors == 2
    assert await backend.purge(Purge()) == 2
    assert (await backend.vectors("p", 0))[0] == []
    assert (await backend.stats()).vectors == 0


async def test_a_second_instance_catches_up_on_a_partitions_vectors_from_its_cursor(store: Store) -> None:
    writer: Backend = await store.open()
    reader: Backend = await store.open()
    assert await reader.vectors("p", 0) == ([], 0)
    expires = time.time() + 60
    for n in (1, 2, 3):
        await writer.add_vector("p", f"{n:064x}", _vector(n), expires)
    await writer.add_vector("other", f"{9:064x}", _vector(9), expires)
    items, cursor = await reader.vectors("p", 0)
    assert items == [(f"{n:064x}", _vector(n)) for n in (1, 2, 3)]
    assert await reader.vectors("p", cursor) == ([], cursor)  # nothing new: the same cursor back
    for n in (4, 5):
        await writer.add_vector("p", f"{n:064x}", _vector(n), expires)
    items, later = await reader.vectors("p", cursor)
    assert items == [(f"{n:064x}", _vector(n)) for n in (4, 5)]
    assert later > cursor
    assert [i for i, _ in (await reader.vectors("other", 0))[0]] == [f"{9:064x}"]
    assert len((await writer.vectors("p", 0))[0]) == 5  # from 0: everything still there


async def test_expired_vectors_are_not_handed_out(store: Store) -> None:
    backend: Backend = await store.open()
    await backend.add_vector("p", f"{1:064x}", _vector(1), time.time() + 0.2)
    await backend.add_vector("p", f"{2:064x}", _vector(2), time.time() + 60)
    await asyncio.sleep(0.3)
    items, _ = await backend.vectors("p", 0)
    assert [i for i, _ in items] == [f"{2:064x}"]


async def test_a_cursor_still_reads_what_is_filed_after_its_partition_expired(store: Store) -> None:
    """On Redis the partition's list itself expires and a new one starts: a cursor from the old one must not
    skip the new one's first vectors."""
    writer: Backend = await store.open()
    reader: Backend = await store.open()
    await writer.add_vector("p", f"{1:064x}", _vector(1), time.time() + 0.2)
    await writer.add_vector("p", f"{2:064x}", _vector(2), time.time() + 0.2)
    _, cursor = await reader.vectors("p", 0)
    await asyncio.sleep(0.3)
    assert (await reader.vectors("p", cursor))[0] == []
    await writer.add_vector("p", f"{3:064x}", _vector(3), time.time() + 60)
    items, _ = await reader.vectors("p", cursor)
    assert [i for i, _ in items] == [f"{3:064x}"]


async def test_a_long_catch_up_is_read_whole(store: Store) -> None:
    """More vectors than one read on the event loop takes (sqlite.PAGE): the rest come in the same call."""
    backend: Backend = await store.open()
    expires = time.time() + 60
    for n in range(600):
        await backend.add_vector("p", f"{n:064x}", _vector(n), expires)
    items, cursor = await backend.vectors("p", 0)
    assert [i for i, _ in items] == [f"{n:064x}" for n in range(600)]
    assert (await backend.vectors("p", cursor))[0] == []


async def test_a_partition_keeps_its_newest_vectors_and_cursors_survive_the_trim(store: Store) -> None:
    writer = await store.open(max_vectors_per_partition=3)
    reader = await store.open(max_vectors_per_partition=3)
    expires = time.time() + 60
    for n in (1, 2):
        await writer.add_vector("p", f"{n:064x}", _vector(n), expires)
    _, cursor = await reader.vectors("p", 0)
    for n in (3, 4, 5, 6):
        await writer.add_vector("p", f"{n:064x}", _vector(n), expires)
    assert [i for i, _ in (await reader.vectors("p", 0))[0]] == [f"{n:064x}" for n in (4, 5, 6)]
    items, _ = await reader.vectors("p", cursor)  # 3 was trimmed away; 4-6 are what is new and kept
    assert [i for i, _ in items] == [f"{n:064x}" for n in (4, 5, 6)]
    assert (await writer.stats()).vectors == 3


async def test_stats_count_entries_bytes_and_vectors(store: Store) -> None:
    backend: Backend = await store.open()
    empty = await backend.stats()
    assert (empty.entries, empty.bytes, empty.vectors) == (0, 0, 0)
    assert empty.backend == store.kind
    values = [b"x" * 1000, b"y" * 3000]
    for n, value in enumerate(values, 1):
        await backend.put(entry(n, value=value, partition="p"))
        await backend.add_vector("p", f"{n:064x}", _vector(n), time.time() + 60)
    stats = await backend.stats()
    assert stats.entries == 2
    assert 4000 <= stats.bytes < 4000 + 4096  # the values, and at most a little bookkeeping each
    assert stats.vectors == 2


async def test_entries_written_by_one_instance_are_read_by_another(store: Store) -> None:
    if not store.shared:
        pytest.skip("an in-process backend is one process's own")
    a, b = await store.open(), await store.open()
    stored = entry(1, namespace="n")
    await a.put(stored)
    assert await b.get(stored.id) == stored
    assert await b.purge(Purge(namespace="n")) == 1
    assert await a.get(stored.id) is None


async def test_a_reopened_sqlite_file_keeps_its_entries_and_cursors(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.sqlite3")
    first = await SqliteBackend.open(path)
    stored = entry(1, partition="p")
    await first.put(stored)
    await first.add_vector("p", stored.id, _vector(1), stored.expires_at)
    _, cursor = await first.vectors("p", 0)
    await first.purge(Purge())  # the vectors' sequence goes on after a purge: old cursors stay below it
    await first.put(stored)
    await first.add_vector("p", stored.id, _vector(1), stored.expires_at)
    await first.aclose()
    again = await SqliteBackend.open(path)
    try:
        assert await again.get(stored.id) == stored
        items, later = await again.vectors("p", cursor)
        assert ([i for i, _ in items], later > cursor) == ([stored.id], True)
    finally:
        await again.aclose()


async def test_the_sqlite_sweep_deletes_expired_rows(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(str(tmp_path / "cache.sqlite3"), sweep_s=0.1)
    try:
        await backend.put(entry(1, ttl=0.05, partition="p"))
        await backend.add_vector("p", f"{1:064x}", _vector(1), time.time() + 0.05)
        await backend.put(entry(2, ttl=60))
        await asyncio.sleep(0.4)
        with sqlite3.connect(backend.path) as conn:
            ids = [row[0] for row in conn.execute("SELECT id FROM entries")]
            vectors = conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        assert (ids, vectors) == ([f"{2:064x}"], 0)
    finally:
        await backend.aclose()


async def test_the_sqlite_cache_is_a_file_of_its_own_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cache.sqlite3"
    backend = await SqliteBackend.open(str(path))
    try:
        await backend.put(entry(1))
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        await backend.aclose()


async def test_redis_keys_all_live_under_the_prefix(redis_prefix_cache: str) -> None:
    backend = await RedisBackend.open(REDIS_URL, redis_prefix_cache, 2.0)
    try:
        e = entry(1, partition="p", namespace="n")
        await backend.put(e)
        await backend.add_vector("p", e.id, _vector(1), e.expires_at)
        client = redis.Redis.from_url(REDIS_URL)
        keys = sorted(k.decode() for k in client.scan_iter(redis_prefix_cache + "*"))
        ttl = client.pttl(redis_prefix_cache + "e:" + e.id)
        client.close()
        suffixes = [k.removeprefix(redis_prefix_cache) for k in keys]
        assert suffixes == sorted(
            ["all", "bytes", "e:" + e.id, "i:k:key-1", "i:m:echo-model", "i:n:n", "i:s:account:a", "meta",
             "v:p", "vm:p", "vparts"]
        )  # fmt: skip
        assert 55_000 < ttl <= 60_000  # the entry's own expiry, in Redis
        assert await backend.purge(Purge()) == 1
    finally:
        await backend.aclose()


@pytest.fixture
def redis_prefix_cache() -> Any:
    prefix = f"inferplex_test:cache:{secrets.token_hex(6)}:"
    yield prefix
    forget_redis_prefix(prefix)


async def test_a_redis_purge_runs_in_batches(redis_prefix_cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A purge of more entries than one script call removes (`BATCH`) takes several calls, and each call checks
    its ids against the selector again."""
    monkeypatch.setattr(redis_backend, "BATCH", 3)
    backend = await RedisBackend.open(REDIS_URL, redis_prefix_cache, 2.0)
    try:
        for n in range(10):
            await backend.put(entry(n, model="m1" if n < 7 else "m2"))
        assert await backend.purge(Purge(model="m1")) == 7
        assert (await backend.stats()).entries == 3
        assert await backend.purge(Purge()) == 3
    finally:
        await backend.aclose()


def _every_call(backend: RedisBackend) -> list[Awaitable[Any]]:
    return [
        backend.get("x"),
        backend.put(entry(1)),
        backend.add_vector("p", "x", _vector(1), time.time() + 60),
        backend.vectors("p", 0),
        backend.purge(Purge()),
        backend.stats(),
    ]


@pytest.mark.parametrize("down", ["closed-port", "silent-port"])
async def test_every_redis_call_raises_promptly_when_redis_is_down(down: str) -> None:
    """A closed port (refused at once), and a port that accepts but never answers (the timeout, 0.3 s):
    each call raises one of redis-py's errors, which the service turns into a miss."""
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = _closed_port() if down == "closed-port" else silent.sockets[0].getsockname()[1]
    backend = await RedisBackend.open(f"redis://127.0.0.1:{port}/0", "inferplex_test:cache:down:", 0.3)
    try:
        for call in _every_call(backend):
            started = time.monotonic()
            with pytest.raises(redis.RedisError):
                await call
            assert time.monotonic() - started < 1.0
    finally:
        await backend.aclose()
        silent.close()
        await silent.wait_closed()


async def test_after_an_outage_redis_is_not_waited_for_again_until_retry_s(
    redis_prefix_cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition (packets dropped): the first call waits its timeout, the next ones fail at once for
    RETRY_S, and once Redis answers again the entries are read as before."""
    monkeypatch.setattr(redis_backend, "RETRY_S", 0.5)
    with TcpProxy(6379) as proxy:
        backend = await RedisBackend.open(f"redis://127.0.0.1:{proxy.port}/0", redis_prefix_cache, 0.3)
        try:
            stored = entry(1)
            await backend.put(stored)
            proxy.silence()
            waits = []
            for _ in range(3):
                started = time.monotonic()
                with pytest.raises(redis.RedisError):
                    await backend.get(stored.id)
                waits.append(time.monotonic() - started)
            assert waits[0] >= 0.25 and max(waits[1:]) < 0.05, waits
            proxy.restore()
            await asyncio.sleep(0.5)
            assert await backend.get(stored.id) == stored
        finally:
            await backend.aclose()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # bound then released: nothing listens there


def _vector(n: int) -> bytes:
    """A float32 vector of 384 dimensions (MiniLM's), different for each n."""
    return n.to_bytes(4, "little") * 384
