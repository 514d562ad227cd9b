"""The shared limit store: every decision is one Lua script, so it is atomic across replicas.

Time comes from the Redis server (`TIME`), not from each replica's clock. Concurrency holders live in a
sorted set scored by lease expiry, so a crashed replica's slots come back when their leases run out.

A Redis outage never hangs a request: socket timeouts are short, and each call then follows the configured
policy: `open` admits (limits are not enforced while Redis is down), `closed` refuses with a 503.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from inferplex.limits import Hold, LimitsUnavailable, Rate

log = logging.getLogger("inferplex.limits")

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# GCRA over the buckets KEYS[1..n], with (amount, limit, window_s) for each at ARGV[a+1..a+3n]. All or nothing
# unless `force` (charge even into debt): returns (0, 0) once applied, else (seconds to wait, index of the
# bucket that waits longest) with nothing changed.
_RATES = """
local function rates(n, a, force)
  local wait = 0
  local worst = 0
  local tats = {}
  for i = 1, n do
    local amount = tonumber(ARGV[a + i * 3 - 2])
    local limit = tonumber(ARGV[a + i * 3 - 1])
    local window = tonumber(ARGV[a + i * 3])
    local interval = window / limit
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
    if tat < now then tat = now end
    local check = amount
    if check > limit then check = limit end
    local w = tat + check * interval - window - now
    if w > wait then
      wait = w
      worst = i
    end
    tats[i] = tat + amount * interval
  end
  if wait > 0 and not force then return wait, worst end
  for i = 1, n do
    redis.call('SET', KEYS[i], tostring(tats[i]), 'PX', math.ceil((tats[i] - now) * 1000) + 1000)
  end
  return 0, 0
end
"""

# One of `limit` slots of the holders zset `key` (scored by lease expiry): 1 if taken, else 0.
_SLOT = """
local function acquire(key, limit, holder, lease)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= limit then return 0 end
  redis.call('ZADD', key, now + lease, holder)
  redis.call('PEXPIRE', key, math.ceil(lease * 1000))
  return 1
end
"""

# KEYS[1] holders zset; ARGV: limit, holder, lease_s
_ACQUIRE = _NOW + _SLOT + "return acquire(KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]))"

# KEYS: n buckets, then holder zsets; ARGV: n, lease_s, (amount, limit, window_s) per bucket, then (limit,
# holder) per zset. The buckets first; the slots only if they admitted.
_ADMIT = (
    _NOW
    + _RATES
    + _SLOT
    + """
local n = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local wait, worst = rates(n, 2, false)
if wait > 0 then return tostring(wait) .. ' ' .. tostring(worst - 1) end
local out = '0 -1'
local b = 2 + n * 3
for j = n + 1, #KEYS do
  local k = j - n
  out = out .. ' ' .. acquire(KEYS[j], tonumber(ARGV[b + k * 2 - 1]), ARGV[b + k * 2], lease)
end
return out
"""
)

# KEYS: n buckets, then holder zsets; ARGV: n, (amount, limit, window_s) per bucket, then holder per zset.
_FINISH = (
    _NOW
    + _RATES
    + """
local n = tonumber(ARGV[1])
if n > 0 then rates(n, 1, true) end
local b = 1 + n * 3
for j = n + 1, #KEYS do
  redis.call('ZREM', KEYS[j], ARGV[b + j - n])
end
return 1
"""
)

_COUNT = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""
)


class RedisLimits:
    def __init__(
        self,
        url: str,
        prefix: str = "inferplex:limits:",
        *,
        fail_open: bool = True,
        timeout_s: float = 0.25,
        lease_s: float = 900.0,
    ) -> None:
        self.prefix = prefix
        self.fail_open = fail_open
        self.lease_s = lease_s
        self.redis: Any = aioredis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False
        )
        self._acquire = self.redis.register_script(_ACQUIRE)
        self._count = self.redis.register_script(_COUNT)
        self._admit = self.redis.register_script(_ADMIT)
        self._finish = self.redis.register_script(_FINISH)

    def _failed(self, what: str, exc: BaseException) -> None:
        log.warning("redis limit store unavailable during %s: %s", what, exc)
        if not self.fail_open:
            raise LimitsUnavailable(str(exc)) from exc

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        try:
            return bool(await self._acquire(keys=[self.prefix + "conc:" + key], args=[limit, holder, self.lease_s]))
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed("acquire", exc)
            return True

    async def release(self, key: str, holder: str) -> None:
        try:
            await self.redis.zrem(self.prefix + "conc:" + key, holder)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("redis limit store unavailable during release: %s", exc)

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> tuple[float, int, tuple[bool, ...]]:
        if not rates and not holds:
            return 0.0, -1, ()
        keys = [self.prefix + "rate:" + r.key for r in rates] + [self.prefix + "conc:" + h.key for h in holds]
        args: list[Any] = [len(rates), self.lease_s]
        args += [x for r in rates for x in (r.amount, r.limit, r.window_s)]
        args += [x for h in holds for x in (h.limit, h.holder)]
        try:
            out = (await self._admit(keys=keys, args=args)).split()
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed("admit", exc)
            return 0.0, -1, tuple(True for _ in holds)  # failing open: nothing is enforced
        wait = float(out[0])
        if wait > 0:
            return wait, int(out[1]), tuple(False for _ in holds)
        return 0.0, -1, tuple(x == b"1" for x in out[2:])

    async def finish(self, charges: Sequence[Rate], releases: Sequence[tuple[str, str]]) -> None:
        charges = [r for r in charges if r.amount > 0]
        if not charges and not releases:
            return
        keys = [self.prefix + "rate:" + r.key for r in charges] + [self.prefix + "conc:" + k for k, _ in releases]
        args: list[Any] = [len(charges), *(x for r in charges for x in (r.amount, r.limit, r.window_s))]
        args += [holder for _, holder in releases]
        try:
            await self._finish(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("redis limit store unavailable during finish: %s", exc)

    async def in_use(self, key: str) -> int:
        return int(await self._count(keys=[self.prefix + "conc:" + key]))

    async def aclose(self) -> None:
        await self.redis.aclose()
