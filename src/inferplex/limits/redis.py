"""The shared limit store: every decision is one Lua script, so it is atomic across replicas.

Time comes from the Redis server (`TIME`), not from each replica's clock. Concurrency holders live in a
sorted set scored by lease expiry, so a crashed replica's slots come back when their leases run out.

A Redis outage never hangs a request: socket timeouts are short, and each call then follows the configured
policy: `open` admits (limits are not enforced while Redis is down), `closed` refuses with a 503.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from inferplex.limits import LimitsUnavailable

log = logging.getLogger("inferplex.limits")

# KEYS[1] bucket; ARGV: amount, limit, window_s, force (1 = charge even if over)
_BUCKET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local interval = window / limit
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local check = amount
if check > limit then check = limit end
local allow_at = tat + check * interval - window
if ARGV[4] ~= '1' and allow_at > now then
  return tostring(allow_at - now)
end
local new_tat = tat + amount * interval
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil((new_tat - now) * 1000) + 1000)
return '0'
"""

# KEYS[1] holders zset; ARGV: limit, holder, lease_s
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) * 1000))
return 1
"""

_COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""


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
        self._bucket = self.redis.register_script(_BUCKET)
        self._acquire = self.redis.register_script(_ACQUIRE)
        self._count = self.redis.register_script(_COUNT)

    def _failed(self, what: str, exc: BaseException) -> None:
        log.warning("redis limit store unavailable during %s: %s", what, exc)
        if not self.fail_open:
            raise LimitsUnavailable(str(exc)) from exc

    async def take(self, key: str, amount: int, limit: int, window_s: float) -> float:
        try:
            out = await self._bucket(keys=[self.prefix + "rate:" + key], args=[amount, limit, window_s, 0])
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed("take", exc)
            return 0.0
        return float(out)

    async def charge(self, key: str, amount: int, limit: int, window_s: float) -> None:
        if amount <= 0:
            return
        try:
            await self._bucket(keys=[self.prefix + "rate:" + key], args=[amount, limit, window_s, 1])
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("redis limit store unavailable during charge: %s", exc)

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

    async def in_use(self, key: str) -> int:
        return int(await self._count(keys=[self.prefix + "conc:" + key]))

    async def aclose(self) -> None:
        await self.redis.aclose()
