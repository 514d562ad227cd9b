"""The shared limit store: every decision is one Lua script, so it is atomic across replicas.

Time comes from the Redis server (`TIME`), not from each replica's clock. Concurrency holders live in a
sorted set scored by lease expiry, so a crashed replica's slots come back when their leases run out; the
leases are short and renewed while their requests run, and a release Redis could not be sent is sent once it
answers again (leases.py).

A Redis outage never hangs a request: socket timeouts are short, and each call then follows the configured
policy: `open` admits (limits are not enforced while Redis is down), `closed` refuses with a 503. Whatever
the client raises counts as an outage (redis-py's errors, OSError, TimeoutError, and the RuntimeError of a
transport closed under it, as uvloop raises): a limit store that cannot answer must never become a 500.

The URL may name one server, a Sentinel-managed master or a Cluster (redis_connect.py). On a cluster the
prefix becomes one hash tag, so the batched script's keys (many requests' buckets and slots) share a slot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

from inferplex.batching import Batcher, StoreObserver
from inferplex.limits import ROUNDING_S, Hold, LimitsUnavailable, Quota, Rate, Verdict, remaining
from inferplex.limits.leases import Leases, Slot
from inferplex.redis_connect import aclose, connect, keyspace
from inferplex.redis_script import DedicatedScript

log = logging.getLogger("inferplex.limits")

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# Each key is read at most once per script call and written at most once, at its end (`flush`): a batch of
# requests on the same key (a key's rpm and tpm buckets, its concurrency slots) then costs Redis a few calls in
# all instead of several per request, with the same result as applying each operation alone in turn (`now`
# is one value for the whole call). A bucket's "theoretical arrival time" is kept in `tats` once read; a
# holders zset is swept of expired leases and counted once (`held`), then kept counted as holders are added
# and removed.
_STATE = """
local tats, dirty, held, leased, wins, wdirty = {}, {}, {}, {}, {}, {}
local function tat_of(key)
  local tat = tats[key]
  if tat == nil then
    tat = tonumber(redis.call('GET', key) or '0')
    tats[key] = tat
  end
  return tat
end
local function win_of(key, width, n)
  local win = wins[key]
  if win == nil then
    local cur = math.floor(now / width)
    local raw = redis.call('HGETALL', key)
    local subs, total, stale = {}, 0, {}
    for j = 1, #raw, 2 do
      local idx, amount = tonumber(raw[j]), tonumber(raw[j + 1])
      if idx <= cur - n then
        stale[#stale + 1] = raw[j]
      else
        subs[idx] = amount
        total = total + amount
      end
    end
    if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
    win = {subs = subs, total = total, cur = cur, n = n, width = width, changed = {}}
    wins[key] = win
  end
  return win
end
local function held_of(key)
  local n = held[key]
  if n == nil then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    n = redis.call('ZCARD', key)
    held[key] = n
  end
  return n
end
local function flush()
  for key in pairs(dirty) do
    local tat = tats[key]
    redis.call('SET', key, string.format('%.17g', tat), 'PX', math.ceil((tat - now) * 1000) + 1000)
  end
  for key in pairs(wdirty) do
    local win = wins[key]
    for idx in pairs(win.changed) do
      local amount = win.subs[idx]
      if amount > 0 then
        redis.call('HSET', key, string.format('%d', idx), string.format('%d', amount))
      else
        redis.call('HDEL', key, string.format('%d', idx))
      end
    end
    redis.call('PEXPIRE', key, math.ceil((win.n + 1) * win.width * 1000))
  end
  for key, lease in pairs(leased) do
    redis.call('PEXPIRE', key, math.ceil(lease * 1000))
  end
end
"""

# The buckets KEYS[k+1..k+n], with (amount, limit, window_s, slots, age_s) for each at v[a+1..a+5n]: GCRA
# when slots is 0, else a rolling window (a hash of sub-window index to amount; limits/__init__.py). All or
# nothing unless `force` (charge even into debt, and give back a negative amount, at most to a full bucket or
# an empty sub-window): returns (0, 0, 0) once applied, else (seconds to wait, index of the bucket that waits
# longest, what it holds) with nothing changed. A TAT is stored with 17 significant digits: Lua's `tostring`
# keeps 14, which at UNIX-time magnitudes rounds by up to 50 us, enough to refuse the last request of a burst
# when a batch of requests shares one `now`.
_RATES = (
    """
local function window_wait(win, check, limit)
  if win.total + check <= limit then return 0 end
  local freed = 0
  for idx = win.cur - win.n + 1, win.cur do
    local amount = win.subs[idx]
    if amount then
      freed = freed + amount
      if win.total - freed + check <= limit then return (idx + win.n) * win.width - now end
    end
  end
  return (win.cur + win.n) * win.width - now
end
local function add(key, target, amount)
  local win = wins[key]
  if target <= win.cur - win.n then return end
  local sub = (win.subs[target] or 0) + amount
  if sub < 0 then
    amount = amount - sub
    sub = 0
  end
  win.subs[target] = sub
  win.total = win.total + amount
  win.changed[target] = true
  wdirty[key] = true
end
local function rates(v, k, a, n, force)
  local wait, worst, used = 0, 0, 0
  local after = {}
  for i = 1, n do
    local amount = tonumber(v[a + i * 5 - 4])
    local limit = tonumber(v[a + i * 5 - 3])
    local window = tonumber(v[a + i * 5 - 2])
    local slots = tonumber(v[a + i * 5 - 1])
    local key = KEYS[k + i]
    local check = amount
    if check > limit then check = limit end
    local w, u
    if slots > 0 then
      local win = win_of(key, window / slots, slots)
      w, u = window_wait(win, check, limit), win.total
      after[i] = win.cur
      if force then
        -- where admission counted it; if that has left the window, output counts now and a refund is dropped
        local t = math.floor((now - tonumber(v[a + i * 5])) / win.width)
        if t <= win.cur - slots and amount > 0 then t = win.cur end
        after[i] = t
      end
    else
      local interval = window / limit
      local tat = tat_of(key)
      if tat < now then tat = now end
      w = tat + check * interval - window - now
      u = (tat - now) / interval
      after[i] = tat + amount * interval
      if after[i] < now then after[i] = now end
    end
    if w > wait then
      wait, worst, used = w, i, u
    end
  end
  if wait > """
    + repr(ROUNDING_S)
    + """ and not force then return wait, worst, used end
  for i = 1, n do
    local key = KEYS[k + i]
    if tonumber(v[a + i * 5 - 1]) > 0 then
      add(key, after[i], tonumber(v[a + i * 5 - 4]))
    else
      tats[key] = after[i]
      dirty[key] = true
    end
  end
  return 0, 0, 0
end
"""
)

# One of `limit` slots of the holders zset `key` (scored by lease expiry): 1 if taken, else 0.
_SLOT = """
local function acquire(key, limit, holder, lease)
  local n = held_of(key)
  if n >= limit then return 0 end
  held[key] = n + redis.call('ZADD', key, now + lease, holder)
  leased[key] = lease
  return 1
end
local function release(key, holder)
  local removed = redis.call('ZREM', key, holder)
  if held[key] ~= nil then held[key] = held[key] - removed end
end
"""

# KEYS[1] holders zset; ARGV: limit, holder, lease_s
_ACQUIRE = (
    _NOW + _STATE + _SLOT + "local r = acquire(KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])) flush() return r"
)

# Many requests' admissions and finishes in one call (batching.py), each applied in turn as if alone.
# ARGV: lease_s, then one string per operation (one argument each: packing and parsing a dozen per request
# cost redis-py more than the script costs Redis), its fields separated by spaces: the kind ('A' admit, 'F'
# finish, or 'Q' for `take`: one GCRA bucket, no slots), n buckets, m slots, (amount, limit, window_s,
# slots, age_s) per bucket, then per slot (limit, holder) for an admit or holder for a finish (holders are
# request ids, which hold no spaces). KEYS: each operation's n buckets then m holder zsets, in the same
# order. One reply per operation: for an admit "0 -1 <1|0 per slot>" or "<wait> <index of the bucket
# waiting longest> <what it holds>" (buckets first, slots only if they admitted); "1" for a finish (its
# buckets charged even into debt, its holders removed); for a 'Q' "<wait, 0 if admitted> <seconds until the
# bucket is full> <now>". The replies come joined by commas in one string: redis-py's parser is Python, and
# one element per operation cost it as much as packing the call.
_BATCH = (
    _NOW
    + _STATE
    + _RATES
    + _SLOT
    + """
local lease = tonumber(ARGV[1])
local k = 0
local out = {}
for o = 2, #ARGV do
  local v = {}
  for w in string.gmatch(ARGV[o], '%S+') do v[#v + 1] = w end
  local op, n, m = v[1], tonumber(v[2]), tonumber(v[3])
  local a = 3
  local reply = '1'
  if op == 'A' then
    local wait, worst, used = rates(v, k, a, n, false)
    a, k = a + n * 5, k + n
    if wait > 0 then
      reply = tostring(wait) .. ' ' .. tostring(worst - 1) .. ' ' .. tostring(used)
    else
      reply = '0 -1'
      for j = 1, m do
        reply = reply .. ' ' .. acquire(KEYS[k + j], tonumber(v[a + j * 2 - 1]), v[a + j * 2], lease)
      end
    end
  elseif op == 'Q' then
    local wait = rates(v, k, a, 1, false)
    local tat = tats[KEYS[k + 1]]
    if tat < now then tat = now end
    reply = string.format('%.17g %.17g %.17g', wait, tat - now, now)
    a, k = a + 5, k + 1
  else
    if n > 0 then rates(v, k, a, n, true) end
    a, k = a + n * 5, k + n
    for j = 1, m do release(KEYS[k + j], v[a + j]) end
  end
  k = k + m
  out[#out + 1] = reply
end
flush()
return table.concat(out, ',')
"""
)

# The lease keeper's one call (leases.py): KEYS: holders zsets; ARGV: lease_s, r, then the holder in each key.
# The first r slots have their lease extended, if Redis still has them (a slot already released or expired is
# not brought back), and their zset's lifetime with it; the others are released. Returns how many of the r
# were gone.
_KEEP = (
    _NOW
    + """
local lease = tonumber(ARGV[1])
local r = tonumber(ARGV[2])
local ms = math.ceil(lease * 1000)
local gone = 0
for i = 1, #KEYS do
  local key, holder = KEYS[i], ARGV[i + 2]
  if i > r then
    redis.call('ZREM', key, holder)
  elseif redis.call('ZSCORE', key, holder) then
    redis.call('ZADD', key, now + lease, holder)
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
  else
    gone = gone + 1
  end
end
return gone
"""
)

_COUNT = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""
)


def _finished(
    leases: Leases, releases: Sequence[Slot], done: asyncio.Future[None], _: bytes | None, error: BaseException | None
) -> None:
    """A finish that Redis did not take (down, or shutdown cancelled its batch) keeps its slot releases to
    send later; the output tokens it would have charged are forgotten (a limit fails open, money does not)."""
    if error is not None:
        if not isinstance(error, asyncio.CancelledError):
            log.warning("redis limit store unavailable during finish: %s: %s", type(error).__name__, error)
        if releases:
            leases.release_later(releases)
    if not done.done():
        done.set_result(None)


class _Op(NamedTuple):
    """One request's admission or finish, in the shape of the batch script's arguments (a tuple: one is
    made per admit and per finish, and a frozen dataclass cost three times as much to build)."""

    keys: list[str]
    fields: str


class RedisLimits:
    def __init__(
        self,
        url: str,
        prefix: str = "inferplex:limits:",
        *,
        fail_open: bool = True,
        timeout_s: float = 0.25,
        lease_s: float = 30.0,
        max_hold_s: float | None = None,
    ) -> None:
        self.fail_open = fail_open
        self.lease_s = lease_s
        self.redis: Any = connect(url, timeout_s=timeout_s)
        self.prefix = keyspace(prefix, self.redis)  # one hash tag on a cluster: every call's keys on one slot
        self._acquire = self.redis.register_script(_ACQUIRE)
        self._count = self.redis.register_script(_COUNT)
        self._keep = self.redis.register_script(_KEEP)
        self._script = DedicatedScript(self.redis, _BATCH)
        # Every request's admit and finish go through here: concurrent ones share one script call.
        self._batch: Batcher[_Op, bytes] = Batcher(self._run)
        self.leases = Leases(self._renew, lease_s, max_hold_s=max_hold_s)

    def _failed(self, what: str, exc: Exception) -> None:
        log.warning("redis limit store unavailable during %s: %s: %s", what, type(exc).__name__, exc)
        if not self.fail_open:
            raise LimitsUnavailable(str(exc) or type(exc).__name__) from exc

    async def try_acquire(self, key: str, limit: int, holder: str) -> bool:
        slot = [(key, holder)]
        try:
            taken = bool(await self._acquire(keys=[self.prefix + "conc:" + key], args=[limit, holder, self.lease_s]))
        except asyncio.CancelledError:
            self.leases.release_later(slot)  # it may have been taken, and nobody will give it back
            raise
        except Exception as exc:  # any failure of the client is an outage (module docstring)
            # The call may have taken the slot before its reply was lost: renewed while the request runs if
            # failing open (it is then released with the request), else given back once Redis answers.
            (self.leases.took if self.fail_open else self.leases.release_later)(slot)
            self._failed("acquire", exc)
            return True
        if taken:
            self.leases.took(slot)
        return taken

    async def release(self, key: str, holder: str) -> None:
        slot = [(key, holder)]
        self.leases.giving_back(slot)
        try:
            await self.redis.zrem(self.prefix + "conc:" + key, holder)
        except BaseException as exc:  # cancelled or failed: it is sent later, never lost
            self.leases.release_later(slot)
            if not isinstance(exc, Exception):
                raise
            log.warning("redis limit store unavailable during release: %s: %s", type(exc).__name__, exc)

    async def _run(self, ops: list[_Op]) -> list[bytes]:
        keys = [k for op in ops for k in op.keys]
        replies: bytes = await self._script(keys=keys, args=[self.lease_s, *(op.fields for op in ops)])
        self.leases.answered()
        return replies.split(b",")

    async def _renew(self, renew: Sequence[Slot], release: Sequence[Slot]) -> None:
        """The lease keeper's call (leases.py): extend `renew`, release `release`, in one script call."""
        p = self.prefix
        keys = [p + "conc:" + key for key, _ in renew] + [p + "conc:" + key for key, _ in release]
        holders = [holder for _, holder in renew] + [holder for _, holder in release]
        gone = await self._keep(keys=keys, args=[self.lease_s, len(renew), *holders])
        if gone:  # taken while Redis could not be reached (failing open), or expired during an outage
            log.info("%d concurrency slots held here were not in Redis: not renewed", gone)

    def _op(self, kind: str, rates: Sequence[Rate], slots: list[str], slot_fields: list[Any]) -> tuple[list[str], str]:
        p = self.prefix
        keys = [p + "rate:" + r.key for r in rates]
        keys += [p + "conc:" + key for key in slots]
        fields = f"{kind} {len(rates)} {len(slots)}"
        for r in rates:
            fields += f" {r.amount} {r.limit} {r.window_s!r} {r.slots} {r.age_s!r}"
        for x in slot_fields:
            fields += f" {x}"
        return keys, fields

    async def admit(self, rates: Sequence[Rate], holds: Sequence[Hold]) -> Verdict:
        if not rates and not holds:
            return Verdict(0.0, -1, (), 0.0)
        keys, fields = self._op("A", rates, [h.key for h in holds], [x for h in holds for x in (h.limit, h.holder)])
        try:
            out = (await self._batch.enqueue(_Op(keys, fields))).split()
        except asyncio.CancelledError:
            # Applied anyway if it was in flight: give back whatever it took, after it (same queue).
            if holds:
                self.finish((), [(h.key, h.holder) for h in holds])
            raise
        except Exception as exc:  # any failure of the client is an outage (module docstring)
            if holds:  # the script may have run and taken them before its reply was lost (as try_acquire)
                slots = [(h.key, h.holder) for h in holds]
                (self.leases.took if self.fail_open else self.leases.release_later)(slots)
            self._failed("admit", exc)
            return Verdict(0.0, -1, tuple(True for _ in holds), 0.0)  # failing open: nothing is enforced
        wait = float(out[0])
        if wait > 0:
            return Verdict(wait, int(out[1]), tuple(False for _ in holds), float(out[2]))
        taken = tuple(x == b"1" for x in out[2:])
        if holds:
            self.leases.took_holds(holds, taken)
        return Verdict(0.0, -1, taken, 0.0)

    def finish(self, charges: Sequence[Rate], releases: Sequence[Slot]) -> asyncio.Future[None]:
        charges = [r for r in charges if r.amount != 0]
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not charges and not releases:
            done.set_result(None)
            return done
        self.leases.giving_back(releases)
        keys, fields = self._op("F", charges, [k for k, _ in releases], [holder for _, holder in releases])
        self._batch.post(_Op(keys, fields), partial(_finished, self.leases, releases, done))
        return done

    async def take(self, rate: Rate) -> Quota:
        keys, fields = self._op("Q", [rate], [], [])
        try:
            wait, reset_s, now = (float(x) for x in (await self._batch.enqueue(_Op(keys, fields))).split())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an outage (module docstring): failing open, the bucket is as if full
            self._failed("take", exc)
            return Quota(True, rate.limit - 1, 0.0, 0.0)
        if wait > 0:
            return Quota(False, 0, reset_s, wait)
        return Quota(True, remaining(now + reset_s, now, rate.limit, rate.window_s), reset_s, 0.0)

    async def in_use(self, key: str) -> int:
        return int(await self._count(keys=[self.prefix + "conc:" + key]))

    def watch(self, observe: StoreObserver | None) -> None:
        """Report each batched script call (every request's admit and finish) as the `limits` store."""
        self._batch.watch("limits", observe)

    async def aclose(self) -> None:
        await self._batch.aclose()
        await self.leases.aclose()
        await self._script.aclose()
        await aclose(self.redis)
