"""The response cache in Redis: what replicas share, so an answer stored by one is a hit on every other.

The URL may name one server, a Sentinel-managed master or a Cluster (redis_connect.py). Every key lives
under the configured prefix (`cache.redis_prefix`), which on a cluster becomes one hash tag, so the scripts
below, which touch an entry and its bookkeeping together, run on one slot: the cache lives on one master
(and its replica), like each of the gateway's other Redis stores. The scripts derive some key names from
the bookkeeping they read (an entry's index sets, its partition's list), which Redis allows for keys of
the slot the call was routed to; the hash tag guarantees that.

Keys, after the prefix:
- `e:<id>`: an entry, a hash (`v` the value, `c` created, `x` expires, `m` model, `s` scope, `n` namespace,
  `k` key id, `p` partition), with a PX expiry, so Redis itself forgets an expired answer.
- `all` (sorted set, id scored by its expiry), `meta` (hash, id -> its size, partition and index sets as
  JSON), `bytes` (the live entries' total size): the bookkeeping that `stats` reads and purges walk.
- `i:m:<model>`, `i:s:<scope>`, `i:n:<namespace>`, `i:k:<key id>`: sets of ids, what a purge selects by
  (several fields: their intersection).
  All of these are cleaned lazily: every `put` also forgets up to `SWEEP` ids whose expiry passed (their
  `all`, `meta`, `bytes` and index-set share), and `stats` forgets them all first.
- `v:<partition>` (list) and `vm:<partition>` (hash: `base`, `dead`): a semantic partition's vectors, each
  element `<entry id>\\n<expiry as a little-endian double><float32 vector>`, pushed by `add_vector`, the
  oldest trimmed past `max_vectors_per_partition`, both keys' expiry pushed to the newest vector's.
  A cursor is `base` + an index: the trim moves `base` up by what it drops, so a cursor stays valid across
  trims; a list that expired and is filed again starts at `base` = Redis's clock in microseconds, above
  every cursor the old list gave out, so a replica reads a new list from its start. A purged entry's
  vectors are overwritten with an empty element (a tombstone, `dead` counts them) rather than removed,
  which would shift the cursors after it. `vparts` (sorted set) lists the partitions, for `stats`.

Every method raises on an outage (a refused connection, a timeout after `timeout_s`), and for `RETRY_S`
after one raises at once without trying: the service turns that into a miss and a log line. A purge reads
the matching ids in one command and removes them `BATCH` at a time, so on a large cache it is many short
script calls (about 30 ms per thousand entries in all), never one that holds Redis, and the limits sharing
it, for seconds.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inferplex.cache.base import BackendStats, Entry, Purge
from inferplex.redis_connect import Client, aclose, connect, keyspace

SWEEP = 32  # expired ids forgotten per put: more than a put adds, so the bookkeeping never grows past the live
# ids per purge or sweep script call: each call holds Redis (and every other user of it: the limits, the
# breakers) for 10-17 ms (measured, 500 ids on a loaded 2-core machine), not for the whole purge
BATCH = 500
DEFAULT_MAX_VECTORS = 10_000
# After Redis could not be reached, calls fail at once for this long instead of each waiting for its own
# timeout: a black-holed Redis costs a process one timeout a second, not one or two per request (the lookup,
# the store). The service answers those requests from upstream, as misses.
RETRY_S = 1.0

T = TypeVar("T")

_FIELDS = ("v", "c", "x", "m", "s", "n", "k", "p")
_EXPIRY = struct.Struct("<d")

_FORGET = """
local P = ARGV[1]
local function forget(id)
  redis.call('ZREM', P .. 'all', id)
  local raw = redis.call('HGET', P .. 'meta', id)
  if not raw then return nil end
  redis.call('HDEL', P .. 'meta', id)
  local m = cjson.decode(raw)
  redis.call('DECRBY', P .. 'bytes', m.size)
  for _, s in ipairs(m.sets) do redis.call('SREM', P .. s, id) end
  return m
end
local function sweep(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', P .. 'all', '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    forget(id)
    redis.call('DEL', P .. 'e:' .. id)
  end
  return #ids
end
"""

# KEYS: e:<id>, all. ARGV: prefix, now, id, px, meta (JSON), then the hash's fields and values.
_PUT = (
    _FORGET
    + """
local id = ARGV[3]
forget(id)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local m = cjson.decode(ARGV[5])
redis.call('ZADD', KEYS[2], m.expires, id)
redis.call('HSET', P .. 'meta', id, ARGV[5])
redis.call('INCRBY', P .. 'bytes', m.size)
for _, s in ipairs(m.sets) do redis.call('SADD', P .. s, id) end
sweep(ARGV[2], """
    + str(SWEEP)
    + """)
return 1
"""
)

# KEYS: v:<partition>, vm:<partition>, vparts. ARGV: element, px, max, expiry (seconds), partition.
_ADD_VECTOR = """
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'base', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), 'dead', 0)
end
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local max = tonumber(ARGV[3])
if n > max then
  local gone = redis.call('LRANGE', KEYS[1], 0, n - max - 1)
  local dead = 0
  for _, el in ipairs(gone) do if el == '' then dead = dead + 1 end end
  redis.call('LTRIM', KEYS[1], n - max, -1)
  redis.call('HINCRBY', KEYS[2], 'base', n - max)
  if dead > 0 then redis.call('HINCRBY', KEYS[2], 'dead', -dead) end
end
local px = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < px then
  redis.call('PEXPIRE', KEYS[1], px)
  redis.call('PEXPIRE', KEYS[2], px)
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
end
return n
"""

# KEYS: v:<partition>, vm:<partition>. ARGV: after. Returns {base (text, or false), length, elements}.
_VECTORS = """
local base = redis.call('HGET', KEYS[2], 'base')
if not base then return {false, 0, {}} end
local len = redis.call('LLEN', KEYS[1])
local start = tonumber(ARGV[1]) - tonumber(base)
if start < 0 then start = 0 end
if start >= len then return {base, len, {}} end
return {base, len, redis.call('LRANGE', KEYS[1], start, -1)}
"""

# KEYS: all, then the index sets the purge selects by. ARGV: prefix, then candidate ids: each one that is in
# every set is removed with its bookkeeping, and its vectors tombstoned. Returns how many were live entries.
_PURGE = (
    _FORGET
    + """
local count, parts = 0, {}
for a = 2, #ARGV do
  local id = ARGV[a]
  local chosen = redis.call('ZSCORE', KEYS[1], id) ~= false
  for i = 2, #KEYS do
    if not chosen then break end
    chosen = redis.call('SISMEMBER', KEYS[i], id) == 1
  end
  if chosen then
    if redis.call('DEL', P .. 'e:' .. id) == 1 then count = count + 1 end
    local m = forget(id)
    if m and m.partition ~= '' then
      parts[m.partition] = parts[m.partition] or {}
      parts[m.partition][id .. '\\n'] = true
    end
  end
end
for part, gone in pairs(parts) do
  local list = P .. 'v:' .. part
  local els = redis.call('LRANGE', list, 0, -1)
  local dead = 0
  for i, el in ipairs(els) do
    local nl = string.find(el, '\\n', 1, true)
    if nl and gone[string.sub(el, 1, nl)] then
      redis.call('LSET', list, i - 1, '')
      dead = dead + 1
    end
  end
  if dead > 0 then redis.call('HINCRBY', P .. 'vm:' .. part, 'dead', dead) end
end
return count
"""
)

# KEYS: all. ARGV: prefix, now. Forgets up to BATCH expired ids; returns how many.
_SWEEP = _FORGET + f"return sweep(ARGV[2], {BATCH})"

# KEYS: all, vparts. ARGV: prefix, now. Returns {entries, bytes, vectors}.
_STATS = (
    _FORGET
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
local vectors = 0
for _, part in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local dead = tonumber(redis.call('HGET', P .. 'vm:' .. part, 'dead') or '0')
  vectors = vectors + redis.call('LLEN', P .. 'v:' .. part) - dead
end
return {redis.call('ZCARD', KEYS[1]), tonumber(redis.call('GET', P .. 'bytes') or '0'), vectors}
"""
)


class RedisBackend:
    name = "redis"

    def __init__(self, client: Client, prefix: str, max_vectors_per_partition: int) -> None:
        self.redis: Any = client
        self.prefix = keyspace(prefix, client)  # one hash tag on a cluster: every script's keys on one slot
        self._max_vectors = max_vectors_per_partition
        self._put = self.redis.register_script(_PUT)
        self._add_vector = self.redis.register_script(_ADD_VECTOR)
        self._vectors = self.redis.register_script(_VECTORS)
        self._purge = self.redis.register_script(_PURGE)
        self._stats = self.redis.register_script(_STATS)
        self._sweep = self.redis.register_script(_SWEEP)
        self._down_until = 0.0  # time.monotonic(): until then calls fail without trying (RETRY_S)

    @classmethod
    async def open(
        cls, url: str, prefix: str, timeout_s: float, *, max_vectors_per_partition: int = DEFAULT_MAX_VECTORS
    ) -> RedisBackend:
        """A client for `url`; nothing is asked of Redis yet, so a gateway starts while Redis is down (its
        lookups are misses until it answers). Each call waits at most `timeout_s` for a socket."""
        return cls(connect(url, timeout_s=timeout_s), prefix, max_vectors_per_partition)

    async def get(self, entry_id: str) -> Entry | None:
        value, created, expires, model, scope, namespace, key_id, partition = await self._io(
            self.redis.hmget, self.prefix + "e:" + entry_id, _FIELDS
        )
        if value is None or float(expires) <= time.time():
            return None
        return Entry(
            entry_id, value, float(created), float(expires), model.decode(), scope.decode(), _text(namespace),
            _text(key_id), _text(partition),
        )  # fmt: skip

    async def put(self, entry: Entry) -> None:
        now = time.time()
        px = max(1, round((entry.expires_at - now) * 1000))
        sets = [f"i:m:{entry.model}", f"i:s:{entry.scope}"]
        if entry.namespace is not None:
            sets.append(f"i:n:{entry.namespace}")
        if entry.key_id is not None:
            sets.append(f"i:k:{entry.key_id}")
        meta = {"size": len(entry.value), "expires": entry.expires_at, "partition": entry.partition or "", "sets": sets}
        fields: list[Any] = ["v", entry.value, "c", repr(entry.created_at), "x", repr(entry.expires_at)]
        fields += ["m", entry.model, "s", entry.scope]
        for name, text in (("n", entry.namespace), ("k", entry.key_id), ("p", entry.partition)):
            if text is not None:
                fields += [name, text]
        await self._io(
            self._put,
            keys=[self.prefix + "e:" + entry.id, self.prefix + "all"],
            args=[self.prefix, repr(now), entry.id, px, orjson.dumps(meta), *fields],
        )

    async def add_vector(self, partition: str, entry_id: str, vector: bytes, expires_at: float) -> None:
        if "\n" in entry_id:
            raise ValueError("an entry id holds no newline (it separates the id from the vector)")
        px = max(1, round((expires_at - time.time()) * 1000))
        element = entry_id.encode() + b"\n" + _EXPIRY.pack(expires_at) + vector
        await self._io(
            self._add_vector,
            keys=[self.prefix + "v:" + partition, self.prefix + "vm:" + partition, self.prefix + "vparts"],
            args=[element, px, self._max_vectors, repr(expires_at), partition],
        )

    async def vectors(self, partition: str, after: int) -> tuple[list[tuple[str, bytes]], int]:
        base, length, elements = await self._io(
            self._vectors, keys=[self.prefix + "v:" + partition, self.prefix + "vm:" + partition], args=[after]
        )
        if base is None:  # no such partition (never filed, or expired): the cursor stays
            return [], after
        now = time.time()
        out: list[tuple[str, bytes]] = []
        for element in elements:
            if not element:  # a purged entry's tombstone
                continue
            split = element.index(b"\n")
            (expires_at,) = _EXPIRY.unpack_from(element, split + 1)
            if expires_at > now:
                out.append((element[:split].decode(), element[split + 1 + _EXPIRY.size :]))
        return out, int(base) + int(length)

    async def purge(self, selector: Purge) -> int:
        """The candidates read in one command (the entry, the index sets' intersection, or every id), then
        removed `BATCH` at a time, each batch checked against the selector again in its script."""
        sets = [
            self.prefix + f"i:{kind}:{value}"
            for kind, value in (("m", selector.model), ("n", selector.namespace), ("k", selector.key_id),
                                ("s", selector.scope))
            if value is not None
        ]  # fmt: skip
        every = self.prefix + "all"
        if selector.entry is not None:
            ids: list[Any] = [selector.entry]
        elif sets:
            ids = list(await self._io(self.redis.sinter, sets))
        else:
            ids = list(await self._io(self.redis.zrange, every, 0, -1))
        count = 0
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            count += int(await self._io(self._purge, keys=[every, *sets], args=[self.prefix, *batch]))
        return count

    async def stats(self) -> BackendStats:
        """Expired ids forgotten first (`BATCH` per call, so Redis is never held long), then the counts."""
        keys, args = [self.prefix + "all"], [self.prefix, repr(time.time())]
        while await self._io(self._sweep, keys=keys, args=args) == BATCH:
            pass
        entries, size, vectors = await self._io(self._stats, keys=[*keys, self.prefix + "vparts"], args=args)
        return BackendStats(self.name, int(entries), int(size), int(vectors))

    async def _io(self, call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """One call to Redis; at once a ConnectionError within RETRY_S of Redis being unreachable (a refused
        connection, a timeout; not an error Redis answered with)."""
        if time.monotonic() < self._down_until:
            raise RedisConnectionError(f"Redis was unreachable less than {RETRY_S:g} s ago: not tried again yet")
        try:
            return await call(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            self._down_until = time.monotonic() + RETRY_S
            raise

    async def aclose(self) -> None:
        await aclose(self.redis)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()
