"""Cooldowns: a circuit breaker per deployment, kept in memory or shared through Redis.

Closed: traffic flows; each failure is counted in a sliding window. `failures` within `window` seconds open
the breaker: the deployment is skipped for `period` seconds. Then it is half-open: one request (the probe,
which holds a lease of `period` seconds) may try it; success closes the breaker, failure opens it again.
Failures reported while it is already open (requests that were in flight) change nothing.

With Redis, every replica reads and writes the same keys and the transitions run as Lua scripts stamped
with Redis's own clock, so replicas agree without trusting each other's clocks. If Redis is unreachable the
breaker reads as closed: losing the shared view must not take the gateway down with it. The URL may name one
server, a Sentinel-managed master or a Cluster (redis_connect.py); on a cluster the prefix is one hash tag, so
a batch of checks and the openings' channel live on one slot.

Almost every check finds its breaker closed, and asking Redis cost each request a share of a script call.
So a replica remembers which breakers it found closed, and forgets one when the failure script opens it:
that script publishes the opening on a channel every replica listens to, from the same atomic call. The
memory is used only while the subscription is known to be up: from its confirmation (which a reconnect
sends again) until its connection is found lost, and everything is forgotten at both ends, so nothing
published meanwhile is missed for longer than it takes to notice the loss: at once for a closed connection,
within `check_s` (a ping) for one that died silently. A failure seen by the replica itself also makes it ask
Redis again. The breaker steers traffic; it is not a limit that must hold exactly.

`states` reads breakers without touching them (no probe taken): what operators see, in the console's
deployment health and the metrics' breaker gauge (routing/health.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from inferplex.batching import Batcher, StoreObserver
from inferplex.config import CooldownConfig
from inferplex.listening import keep_listening, stop

log = logging.getLogger("inferplex.routing")


class Gate(enum.Enum):
    CLOSED = "closed"  # use it
    PROBE = "probe"  # half-open, and this caller holds the probe: use it, once
    OPEN = "open"  # skip it for `retry_in` seconds


@dataclass(frozen=True, slots=True)
class Check:
    gate: Gate
    retry_in: float = 0.0


# What an operator sees: closed; open (skipped for `retry_in` more seconds); half-open (its open period is
# over: the next request probes it, or a probe is in flight).
BreakerState = Literal["closed", "open", "half_open"]
State = tuple[BreakerState, float]
_SEEN_CLOSED: State = ("closed", 0.0)


class Cooldowns(Protocol):
    async def check(self, key: str, policy: CooldownConfig) -> Check: ...

    async def failure(self, key: str, policy: CooldownConfig) -> bool:
        """Count a failure; True when this failure opened (or re-opened) the breaker."""
        ...

    async def success(self, key: str) -> None: ...

    async def states(self, keys: Sequence[str]) -> list[State]:
        """Each breaker's state and seconds until it lets a probe through, read without changing it."""
        ...

    async def aclose(self) -> None: ...


_CLOSED = Check(Gate.CLOSED)


@dataclass(slots=True)
class Breaker:
    """The state machine itself, pure: every transition takes `now` as an argument."""

    failures: deque[float] = field(default_factory=deque)
    open_until: float | None = None
    probe_until: float | None = None

    def check(self, now: float, policy: CooldownConfig) -> Check:
        if self.open_until is None:
            return _CLOSED
        if now < self.open_until:
            return Check(Gate.OPEN, self.open_until - now)
        if self.probe_until is not None and now < self.probe_until:
            return Check(Gate.OPEN, self.probe_until - now)
        self.probe_until = now + policy.period
        return Check(Gate.PROBE)

    def failure(self, now: float, policy: CooldownConfig) -> bool:
        if self.open_until is not None:
            if now < self.open_until:
                return False
            self.open_until, self.probe_until = now + policy.period, None
            return True
        self.failures.append(now)
        while self.failures and self.failures[0] <= now - policy.window:
            self.failures.popleft()
        if len(self.failures) >= policy.failures:
            self.failures.clear()
            self.open_until = now + policy.period
            return True
        return False

    def success(self, now: float) -> None:
        if self.open_until is not None and now >= self.open_until:
            self.open_until = self.probe_until = None

    def state(self, now: float) -> State:
        if self.open_until is None:
            return _SEEN_CLOSED
        if now < self.open_until:
            return "open", self.open_until - now
        return "half_open", 0.0


class MemoryCooldowns:
    """One replica's view; enough for a single gateway process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._breakers: dict[str, Breaker] = {}

    def _get(self, key: str) -> Breaker:
        found = self._breakers.get(key)
        if found is None:
            found = self._breakers[key] = Breaker()
        return found

    async def check(self, key: str, policy: CooldownConfig) -> Check:
        found = self._breakers.get(key)
        return _CLOSED if found is None else found.check(self._clock(), policy)

    async def failure(self, key: str, policy: CooldownConfig) -> bool:
        return self._get(key).failure(self._clock(), policy)

    async def success(self, key: str) -> None:
        found = self._breakers.get(key)
        if found is not None:
            found.success(self._clock())

    async def states(self, keys: Sequence[str]) -> list[State]:
        now, found = self._clock(), self._breakers
        return [found[k].state(now) if k in found else _SEEN_CLOSED for k in keys]

    async def aclose(self) -> None:
        return None


_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000 "

# Many checks in one call (batching.py): KEYS: (open, probe) per check; ARGV: the probe lease ms per check.
# Returns "<gate (0 closed, 1 probe, 2 open)> <seconds to wait>" per check, each check as if alone, joined by
# commas into one string (one reply element per check would cost redis-py's Python parser more).
_CHECK = (
    _NOW
    + """
local out = {}
for i = 1, #ARGV do
  local open_key, probe_key = KEYS[i * 2 - 1], KEYS[i * 2]
  local open = redis.call('GET', open_key)
  local gate, wait = 0, '0'
  if open then
    local untl = tonumber(open)
    if now < untl then
      gate, wait = 2, tostring(untl - now)
    elseif redis.call('SET', probe_key, '1', 'NX', 'PX', ARGV[i]) then
      gate = 1
    else
      gate, wait = 2, tostring(redis.call('PTTL', probe_key) / 1000)
    end
  end
  out[#out + 1] = gate .. ' ' .. wait
end
return table.concat(out, ',')
"""
)

# KEYS: fails, open, probe. ARGV: window s, threshold, period s, unique member, open key lifetime ms, the
# channel that hears of openings, the deployment's name for it.
_FAILURE = (
    _NOW
    + """
local open = redis.call('GET', KEYS[2])
if open then
  if now < tonumber(open) then return 0 end
  redis.call('SET', KEYS[2], tostring(now + tonumber(ARGV[3])), 'PX', ARGV[5])
  redis.call('DEL', KEYS[3])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
  return 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) * 1000))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], tostring(now + tonumber(ARGV[3])), 'PX', ARGV[5])
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
  return 1
end
return 0
"""
)

# KEYS: open, probe. Closes a half-open breaker; a success while it is still open changes nothing.
_SUCCESS = (
    _NOW
    + """
local open = redis.call('GET', KEYS[1])
if not open or now < tonumber(open) then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""
)

# Many breakers read, none changed. KEYS: (open, probe) per breaker. Returns "<0 closed, 1 half-open, 2 open>
# <seconds until a probe may go>" per breaker, joined by commas.
_STATES = (
    _NOW
    + """
local out = {}
for i = 1, #KEYS / 2 do
  local open = redis.call('GET', KEYS[i * 2 - 1])
  local state, wait = 0, '0'
  if open then
    local untl = tonumber(open)
    if now < untl then state, wait = 2, tostring(untl - now) else state = 1 end
  end
  out[#out + 1] = state .. ' ' .. wait
end
return table.concat(out, ',')
"""
)

# How long a half-open breaker waits for its probe before Redis forgets it (and the deployment is tried again).
_OPEN_KEEP_S = 600


class RedisCooldowns:
    """Every replica on the same Redis and `prefix` shares each deployment's breaker."""

    def __init__(self, url: str, prefix: str, *, check_s: float = 5.0) -> None:
        from inferplex.redis_connect import connect, keyspace
        from inferplex.redis_script import DedicatedScript

        self._redis: Any = connect(url, timeout_s=1.0)
        self._prefix = keyspace(prefix, self._redis)  # one hash tag on a cluster: a batch's keys on one slot
        self._channel = self._prefix + "opened"
        self._check_s = check_s
        self._closed: set[str] = set()  # breakers found closed since the last opening we could have missed
        self._openings = 0  # bumped by every opening heard of, so a check that raced one keeps nothing
        self._live = False
        self._listener: asyncio.Task[None] | None = None
        self._check = DedicatedScript(self._redis, _CHECK)
        self._failure = self._redis.register_script(_FAILURE)
        self._success = self._redis.register_script(_SUCCESS)
        self._states = self._redis.register_script(_STATES)
        self._observe: StoreObserver | None = None
        # Every request checks its deployment: concurrent checks share one script call.
        self._checks: Batcher[tuple[str, int], tuple[int, float]] = Batcher(self._check_many)

    def _k(self, key: str, part: str) -> str:
        return f"{self._prefix}{key}:{part}"

    async def _check_many(self, checks: list[tuple[str, int]]) -> list[tuple[int, float]]:
        keys = [self._k(key, part) for key, _ in checks for part in ("open", "probe")]
        reply: bytes = await self._check(keys=keys, args=[lease_ms for _, lease_ms in checks])
        return [(int(gate), float(wait)) for gate, wait in (check.split() for check in reply.split(b","))]

    async def check(self, key: str, policy: CooldownConfig) -> Check:
        if self._live and key in self._closed:
            return _CLOSED
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="cooldown-listener")
        openings = self._openings
        try:
            gate, wait = await self._checks.enqueue((key, int(policy.period * 1000)))
        except Exception as exc:  # the shared view is an optimisation; routing goes on without it
            log.warning("cooldown store unavailable (%s): treating %s as healthy", exc, key)
            return _CLOSED
        if gate == 0 and self._live and openings == self._openings:
            self._closed.add(key)
        return Check((Gate.CLOSED, Gate.PROBE, Gate.OPEN)[int(gate)], float(wait))

    def _opened(self, *_: object) -> None:
        self._openings += 1
        self._closed.clear()

    async def _listen(self) -> None:
        what = "cooldown openings (breakers are read from Redis each time)"
        await keep_listening(self._listen_once, self._lost, what=what, max_delay_s=self._check_s)

    async def _listen_once(self, up: Callable[[], None]) -> None:
        """Hear of every opening; health-checked every `check_s`: after `check_s` of silence a ping is sent,
        and if nothing at all (its pong included) arrives within another `check_s`, the connection is taken
        for lost. Sending a ping does not find a silent partition out (the write succeeds), nor does
        redis-py's read with a timeout (it answers None): only a missing answer does."""
        from inferplex.redis_connect import pubsub as open_pubsub

        pubsub: Any = await open_pubsub(self._redis)
        pinged = False
        try:
            await pubsub.subscribe(self._channel)
            while True:
                message = await pubsub.get_message(timeout=self._check_s)
                if message is None:
                    if pinged:
                        raise ConnectionError(f"no answer from Redis to a ping within {self._check_s:g}s")
                    await pubsub.ping()
                    pinged = True
                    continue
                pinged = False  # anything heard proves the connection
                if message["type"] == "subscribe":  # first, and after any reconnect: start afresh
                    self._opened()
                    self._live = True
                    up()
                elif message["type"] == "message":
                    self._opened()
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _lost(self) -> None:
        self._live = False
        self._opened()

    async def failure(self, key: str, policy: CooldownConfig) -> bool:
        self._openings += 1  # whatever the script says, the next check asks Redis, and none racing keeps it
        self._closed.discard(key)
        keep_ms = int((policy.period + _OPEN_KEEP_S) * 1000)
        args: list[str | int | float] = [
            *(policy.window, policy.failures, policy.period, secrets.token_hex(8), keep_ms),
            *(self._channel, key),
        ]
        started = time.perf_counter()
        try:
            opened = await self._failure(
                keys=[self._k(key, "fails"), self._k(key, "open"), self._k(key, "probe")], args=args
            )
        except Exception as exc:
            self._told(started, False)
            log.warning("cooldown store unavailable (%s): failure of %s not recorded", exc, key)
            return False
        self._told(started, True)
        return bool(opened)

    async def success(self, key: str) -> None:
        started = time.perf_counter()
        try:
            await self._success(keys=[self._k(key, "open"), self._k(key, "probe")])
        except Exception as exc:
            self._told(started, False)
            log.warning("cooldown store unavailable (%s): success of %s not recorded", exc, key)
            return
        self._told(started, True)

    def watch(self, observe: StoreObserver | None) -> None:
        """Report every call to Redis (batched checks, failures, successes) as the `breakers` store."""
        self._observe = observe
        self._checks.watch("breakers", observe)

    def _told(self, started: float, ok: bool) -> None:
        if self._observe is not None:
            self._observe("breakers", time.perf_counter() - started, ok)

    async def states(self, keys: Sequence[str]) -> list[State]:
        if not keys:
            return []
        names = [self._k(key, part) for key in keys for part in ("open", "probe")]
        try:
            reply: bytes = await self._states(keys=names)
        except Exception as exc:  # as `check`: an unreachable store reads as closed
            log.warning("cooldown store unavailable (%s): breakers read as closed", exc)
            return [_SEEN_CLOSED] * len(keys)
        named: tuple[BreakerState, ...] = ("closed", "half_open", "open")
        return [(named[int(state)], float(wait)) for state, wait in (one.split() for one in reply.split(b","))]

    async def aclose(self) -> None:
        if self._listener is not None:
            await stop(self._listener)
        await self._checks.aclose()
        await self._check.aclose()
        from inferplex.redis_connect import aclose

        await aclose(self._redis)
