"""Redis URLs as an operator writes them: each topology is read into the client it names, a bad URL is refused
saying what is accepted (and never echoes its password), and on a cluster each store's keys share one slot."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.crc import key_slot

from inferplex.redis_connect import Target, connect, keyspace, parse


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://127.0.0.1:6379/0", Target("server")),
        ("rediss://user:pw@cache.example:6380/2", Target("server")),
        ("unix:///run/redis.sock?db=3", Target("server")),
        (
            "redis+sentinel://s1:26379,s2,[::1]:26380/mymaster",
            Target("sentinel", (("s1", 26379), ("s2", 26379), ("::1", 26380)), "mymaster"),
        ),
        (
            "redis+sentinel://:se%2Fcret@s1:5000/mymaster/4?sentinel_password=other",
            Target("sentinel", (("s1", 5000),), "mymaster", 4, None, "se/cret", {"sentinel_password": "other"}),
        ),
        (
            "redis+cluster://app:pw@n1:7000,n2:7001,n3",
            Target("cluster", (("n1", 7000), ("n2", 7001), ("n3", 6379)), username="app", password="pw"),
        ),
    ],
)
def test_each_topology_is_read_from_its_url(url: str, target: Target) -> None:
    assert parse(url) == target


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("memcached://u:hunter2@h:1", "the scheme must be"),
        ("redis+sentinel://u:hunter2@h:26379", "/service_name"),
        ("redis+sentinel://h:26379/svc/notanumber", "the database must be a number"),
        ("redis+sentinel://h:26379/svc?cluster=true", "unknown options ['cluster']"),
        ("redis+cluster://u:hunter2@h:7000/0", "a cluster has no databases"),
        ("redis+cluster://h:7000,,h2:7001", "empty host"),
        ("redis+cluster://h:port", "bad port 'port'"),
    ],
)
def test_a_bad_url_is_refused_saying_what_is_wrong_without_its_password(url: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse(url)
    assert says in str(refused.value)
    assert "hunter2" not in str(refused.value)


async def test_connect_makes_the_client_each_topology_needs() -> None:
    sentinel = connect("redis+sentinel://:pw@127.0.0.1:26999/svc/2", timeout_s=0.5)
    cluster = connect("redis+cluster://127.0.0.1:7999", timeout_s=0.5)
    try:
        assert isinstance(sentinel, Redis)
        pool = sentinel.connection_pool
        assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "svc"
        assert pool.connection_kwargs["db"] == 2 and pool.connection_kwargs["password"] == "pw"
        assert pool.connection_kwargs["socket_timeout"] == 0.5
        assert isinstance(cluster, RedisCluster)
    finally:
        await sentinel.aclose()
        await cluster.aclose()


async def test_on_a_cluster_a_stores_keys_share_one_slot_and_elsewhere_keep_their_names() -> None:
    server = connect("redis://127.0.0.1:6379/0", timeout_s=0.5)
    cluster = connect("redis+cluster://127.0.0.1:7999", timeout_s=0.5)
    try:
        assert keyspace("inferplex:limits:", server) == "inferplex:limits:"
        tagged = keyspace("inferplex:limits:", cluster)
        assert tagged == "{inferplex:limits:}"
        keys = [tagged + suffix for suffix in ("rate:key-1:rpm", "conc:key-2", "rate:{weird}:tpm")]
        assert len({key_slot(k.encode()) for k in keys}) == 1
        assert keyspace("app:{limits}:", cluster) == "app:{limits}:"  # the operator's own tag is kept
    finally:
        await server.aclose()
        await cluster.aclose()
