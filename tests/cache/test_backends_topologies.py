"""The Redis cache backend on a Redis Cluster and behind Sentinel (real local `redis-server`s, started by
tests/redis_topologies/conftest.py): entries, purges over several index sets, and vectors work the same,
and on a cluster every key of the cache shares one slot, so its scripts never cross slots."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
import redis

from inferplex.cache.backends.redis import RedisBackend
from inferplex.cache.base import Purge
from tests.cache.test_backends import _vector, entry
from tests.redis_topologies.conftest import Cluster, SentinelSetup, cluster, redis_binaries, sentinel  # noqa: F401


async def _exercise(url: str, prefix: str) -> None:
    """Two instances (two replicas) on one store: what one writes the other reads, purges and counts."""
    a = await RedisBackend.open(url, prefix, 2.0)
    b = await RedisBackend.open(url, prefix, 2.0)
    try:
        stored = [entry(n, model=f"m{n % 2}", namespace="ns" if n < 3 else None, partition="p") for n in range(4)]
        for n, e in enumerate(stored):
            await a.put(e)
            await a.add_vector("p", e.id, _vector(n), e.expires_at)
        assert [await b.get(e.id) for e in stored] == stored
        items, cursor = await b.vectors("p", 0)
        assert [i for i, _ in items] == [e.id for e in stored]
        assert await b.purge(Purge(model="m1", namespace="ns")) == 1  # n = 1: two index sets intersected
        assert await b.purge(Purge(entry=stored[2].id)) == 1
        assert [i for i, _ in (await a.vectors("p", 0))[0]] == [stored[0].id, stored[3].id]
        await a.add_vector("p", "new", _vector(7), time.time() + 60)
        assert [i for i, _ in (await b.vectors("p", cursor))[0]] == ["new"]
        stats = await a.stats()
        assert (stats.entries, stats.vectors) == (2, 3)
        assert await a.purge(Purge()) == 2
    finally:
        await a.aclose()
        await b.aclose()


async def test_the_redis_backend_on_a_cluster_keeps_every_key_on_one_slot(cluster: Cluster) -> None:  # noqa: F811
    prefix = f"inferplex_test:cache:{secrets.token_hex(6)}:"
    client: Any = cluster.client()
    try:
        backend = await RedisBackend.open(cluster.url, prefix, 2.0)
        assert backend.prefix == "{" + prefix + "}"
        e = entry(1, namespace="n", partition="p")
        await backend.put(e)
        await backend.add_vector("p", e.id, _vector(1), e.expires_at)
        await backend.aclose()
        keys = [k.decode() for k in client.scan_iter(match="{" + prefix + "}*", target_nodes=client.ALL_NODES)]
        assert len(keys) == 11, keys
        assert len({client.keyslot(k) for k in keys}) == 1
        client.delete(*keys)  # one slot: one call
        await _exercise(cluster.url, prefix)
    finally:
        for k in client.scan_iter(match="{" + prefix + "}*", target_nodes=client.ALL_NODES):
            client.delete(k)
        client.close()


async def test_the_redis_backend_behind_sentinel(sentinel: SentinelSetup) -> None:  # noqa: F811
    prefix = f"inferplex_test:cache:{secrets.token_hex(6)}:"
    try:
        await _exercise(sentinel.url(), prefix)
    finally:
        master = redis.Redis(port=sentinel.master())
        keys = list(master.scan_iter(prefix + "*"))
        if keys:
            master.delete(*keys)
        master.close()


@pytest.fixture(autouse=True)
def _binaries(redis_binaries: None) -> None:  # noqa: F811
    """redis-server must be there (installed if it may be), else these tests are skipped saying why."""
