"""One place that turns a Redis URL into a client: a single server, a Sentinel-managed master, or a Cluster.

Every Redis user (limits/redis.py, routing/cooldown.py) connects through `connect`, so the three topologies
work everywhere the gateway takes a Redis URL:

- `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS), `unix:///path/to.sock[?db=N]`: one
  server, as redis-py's own `from_url` reads them.
- `redis+sentinel://[[user]:password@]host[:port][,host2[:port2]...]/service_name[/db]`: the master of
  `service_name` as the listed sentinels (default port 26379) report it. The password is the master's;
  sentinels that want one of their own take `?sentinel_password=...` (and `sentinel_username=...`). Each new
  connection asks the sentinels where the master is, and a connection still open to a master that was demoted
  is dropped on its first write (redis-py turns the replica's READONLY into a connection error), so after a
  failover the next call reaches the new master.
- `redis+cluster://[[user]:password@]host[:port][,host2[:port2]...]`: a Redis Cluster, found from any of the
  listed nodes (default port 6379); redis-py's `RedisCluster` follows MOVED/ASK and refreshes its slot map.
  A cluster has no databases, so a path is refused.

A scheme of its own for each (rather than `?cluster=true`) because the host list differs from a single
server's: a URL that names several hosts is never mistaken for one server. A URL that is none of these is
refused with a `ValueError` that says what is accepted.

On a cluster every key of one script call must live on one slot. The stores' batched scripts carry many
requests' keys in one call, so each store puts all its keys under one hash tag: its prefix, braced
(`keyspace`). That keeps every call on one slot and costs the sharding: a store's keys all live on one master
(its failover still works), so a cluster spreads the gateway's stores (limits, breakers) over at most as
many masters as there are stores, not their keys over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

Client = aioredis.Redis | RedisCluster

SENTINEL_PORT = 26379
REDIS_PORT = 6379

_SENTINEL_OPTIONS = {"sentinel_password", "sentinel_username"}


@dataclass(frozen=True, slots=True)
class Target:
    """What a URL names: the topology, the hosts to ask first, and how to log in."""

    kind: Literal["server", "sentinel", "cluster"]
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    options: dict[str, str] = field(default_factory=dict)


def _hosts(netloc: str, default_port: int, url: str) -> tuple[tuple[str, int], ...]:
    out = []
    for part in netloc.split(","):
        if not part:
            raise ValueError(f"empty host in Redis URL {_redacted(url)!r}")
        if part.startswith("["):  # [IPv6]:port
            host, _, rest = part[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = part.partition(":")
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            raise ValueError(f"bad port {port_text!r} in Redis URL {_redacted(url)!r}") from None
        out.append((unquote(host), port))
    return tuple(out)


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not at:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{hosts}"


def parse(url: str) -> Target:
    """Read a Redis URL (module docstring); a single server's URL is left to redis-py to read in full."""
    scheme = url.partition("://")[0].lower()
    if scheme in ("redis", "rediss", "unix"):
        return Target("server")
    if scheme not in ("redis+sentinel", "redis+cluster"):
        raise ValueError(
            f"Redis URL {_redacted(url)!r}: the scheme must be redis://, rediss://, unix://, "
            "redis+sentinel://host:port[,host:port]/service_name[/db] or redis+cluster://host:port[,host:port]"
        )
    parts = urlsplit(url)
    userinfo, at, netloc = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    options = {name: values[0] for name, values in parse_qs(parts.query).items()}
    path = [unquote(p) for p in parts.path.split("/") if p]
    if scheme == "redis+cluster":
        if path:
            raise ValueError(f"Redis URL {_redacted(url)!r}: a cluster has no databases, so no path")
        if options:
            raise ValueError(f"Redis URL {_redacted(url)!r}: unknown options {sorted(options)}")
        return Target("cluster", _hosts(netloc, REDIS_PORT, url), username=username, password=password)
    unknown = set(options) - _SENTINEL_OPTIONS
    if unknown:
        raise ValueError(f"Redis URL {_redacted(url)!r}: unknown options {sorted(unknown)}")
    if not path or len(path) > 2:
        raise ValueError(f"Redis URL {_redacted(url)!r}: the path must be /service_name or /service_name/db")
    try:
        db = int(path[1]) if len(path) == 2 else 0
    except ValueError:
        raise ValueError(f"Redis URL {_redacted(url)!r}: the database must be a number") from None
    hosts = _hosts(netloc, SENTINEL_PORT, url)
    return Target("sentinel", hosts, path[0], db, username, password, options)


def connect(url: str, *, timeout_s: float, connect_timeout_s: float | None = None, **kwargs: Any) -> Client:
    """A client for `url`, each socket read and connect bounded by the timeouts given (a Redis that does not
    answer must cost a request a short, known wait). Extra keyword arguments go to redis-py as they are.

    Behind Sentinel and on a cluster a failed command is retried once, at once (on a cluster after refreshing
    its slot map; behind Sentinel after asking where the master is), and each sentinel is asked once per
    discovery: redis-py's defaults retry up to ten times with a backoff of up to a second, so a request would
    wait tens of seconds for a topology that is down (measured: 40 s with two sentinels unreachable)."""
    target = parse(url)
    timeouts: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s if connect_timeout_s is None else connect_timeout_s,
    }
    if target.kind == "server":
        client: Client = aioredis.from_url(url, **timeouts, **kwargs)
        return client
    if target.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in target.hosts]
        return RedisCluster(
            startup_nodes=nodes,
            retry=Retry(NoBackoff(), 1),
            username=target.username,
            password=target.password,
            **timeouts,
            **kwargs,
        )
    sentinel_kwargs = {
        **timeouts,
        "retry": Retry(NoBackoff(), 0),  # each sentinel asked once: the next one listed is the retry
        "username": target.options.get("sentinel_username"),
        "password": target.options.get("sentinel_password"),
    }
    sentinel = Sentinel(list(target.hosts), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    master: aioredis.Redis = sentinel.master_for(
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        retry=Retry(NoBackoff(), 1),
        **timeouts,
        **kwargs,
    )
    return master


def is_cluster(client: Client) -> bool:
    return isinstance(client, RedisCluster)


def keyspace(prefix: str, client: Client) -> str:
    """The prefix a store puts before its keys on `client`: as configured on one server or behind Sentinel;
    on a cluster, one hash tag for the whole store (module docstring). A prefix that already holds a hash tag
    (`app:{limits}:`) is kept: its operator chose the slot."""
    if not is_cluster(client) or _has_tag(prefix):
        return prefix
    return "{" + prefix + "}"


def _has_tag(prefix: str) -> bool:
    start = prefix.find("{")
    end = prefix.find("}", start + 1) if start >= 0 else -1
    return end > start + 1


async def pubsub(client: Client) -> PubSub:
    """A pub/sub connection for a listener that is (re)starting. On a cluster it is to the master of the
    channel's slot (redis-py's `ClusterPubSub`), found from a slot map read afresh: the listener restarts after
    its connection was lost, which on a cluster is most often its node failing over. A classic PUBLISH reaches
    every node of a cluster, so the listener hears openings published through any of them."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        await client.nodes_manager.initialize()
    return client.pubsub()


async def aclose(client: Client) -> None:
    """Close `client` and, behind Sentinel, its connections to the sentinels too (redis-py leaves those to the
    `Sentinel` object, which only the client's pool still refers to)."""
    await client.aclose()
    pool = None if isinstance(client, RedisCluster) else client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        await pool.sentinel_manager.aclose()
