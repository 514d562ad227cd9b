"""Builds the accounts subsystem from the configuration: started in the app's lifespan, closed on shutdown.

`AccountServices.watch` hands the metrics sink's callbacks to the stores a request uses (observe/metrics.py):
each store reports its round trips where it already makes them (a batch, a lookup that missed the cache, a
usage write), so watching costs one callback per round trip and nothing while no one watches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from inferplex import shared_state
from inferplex.accounts.auth import KeyAuth
from inferplex.accounts.guard import AccountGuard
from inferplex.accounts.tokens import load_secret
from inferplex.batching import StoreObserver
from inferplex.config import Config
from inferplex.limits import LimitStore
from inferplex.limits.memory import MemoryLimits
from inferplex.limits.redis import RedisLimits
from inferplex.limits.slots import FairSlots
from inferplex.shared_state.limits import SharedLimits
from inferplex.store.backend import Database
from inferplex.store.engine import default_url, open_storage
from inferplex.store.keys import KeyStore
from inferplex.store.ledger import Ledger
from inferplex.store.recovery import Recovery, spool_path
from inferplex.store.spool import Spool
from inferplex.store.usage import UsageStore
from inferplex.usage_log import UsageLog, UsageSink


def database_url(config: Config) -> str:
    return config.storage.database_url or default_url(config.server.data_dir)


def limit_store(config: Config) -> LimitStore:
    s = config.storage
    if s.redis_url:
        # A slot is renewed no longer than a request may hold one: its deadline (which caps every request).
        longest_s = max((m.routing.max_deadline for m in config.models), default=3600.0)
        return RedisLimits(
            s.redis_url,
            s.redis_prefix,
            fail_open=s.redis_failure == "open",
            timeout_s=s.redis_timeout_s,
            lease_s=s.redis_lease_s,
            max_hold_s=longest_s,
        )
    shared = shared_state.configured()  # one of several workers on a machine: the coordinator keeps them
    if shared:
        return SharedLimits(shared, fail_open=s.redis_failure == "open")
    return MemoryLimits()


@dataclass(slots=True)
class AccountServices:
    config: Config
    db: Database
    keys: KeyStore
    ledger: Ledger
    usage: UsageStore
    usage_log: UsageLog
    limits: LimitStore
    guard: AccountGuard
    auth: KeyAuth
    token_secret: bytes
    recovery: Recovery

    @classmethod
    async def start(cls, config: Config, master_key: str) -> AccountServices:
        db = open_storage(database_url(config), config.storage)
        await db.migrate()
        cache = db.key_cache()
        cache.start()
        spool = Spool(spool_path(config))  # what a store outage could not take (store/recovery.py)
        keys, ledger, usage = KeyStore(db, cache), Ledger(db, spool), UsageStore(db)
        usage_log = UsageLog(usage, spool=spool)
        usage_log.start()
        recovery = Recovery.configured(config, ledger, usage, spool)
        recovery.start()
        limits = limit_store(config)
        # Slots freed by another replica or worker are seen only by polling the shared store.
        poll = 0.01 if config.storage.redis_url or isinstance(limits, SharedLimits) else 0.25
        guard = AccountGuard(ledger, limits, FairSlots(limits, poll), usage_log, config.accounts)
        secret_ref = config.accounts.token_secret
        secret = load_secret(secret_ref.get_secret_value() if secret_ref else None, config.server.data_dir)
        auth = KeyAuth(master_key, keys, secret, config.accounts.trusted_proxies)
        return cls(config, db, keys, ledger, usage, usage_log, limits, guard, auth, secret, recovery)

    def watch(self, stores: StoreObserver, queue: Callable[[float, bool], None]) -> None:
        """Report store round trips (`ledger`, `keys`, `usage`, `limits` when in Redis) to `stores`, and the
        fair queue's waits to `queue`."""
        self.ledger._batch.watch("ledger", stores)
        self.keys.db = cast(Database, _TimedLookups(self.keys.db, stores))
        self.usage_log.sink = _TimedUsage(self.usage_log.sink, stores)
        watch_limits = getattr(self.limits, "watch", None)
        if watch_limits is not None:
            watch_limits(stores)
        self.guard.slots.on_wait = queue

    async def aclose(self) -> None:
        await self.ledger.aclose()
        await self.usage_log.aclose()
        await self.recovery.aclose()  # a last try at what the two above could not write
        await self.limits.aclose()
        if self.keys.cache is not None:
            await self.keys.cache.aclose()
        await self.db.aclose()


class _TimedLookups:
    """The key store's database with its per-request lookup (`fetchrow`, run on a cache miss) timed as the
    `keys` store; everything else passes through."""

    def __init__(self, db: Database, observe: StoreObserver) -> None:
        self._db = db
        self._observe = observe

    async def fetchrow(self, statement: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        started = time.perf_counter()
        try:
            row = await self._db.fetchrow(statement, params)
        except Exception:
            self._observe("keys", time.perf_counter() - started, False)
            raise
        self._observe("keys", time.perf_counter() - started, True)
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class _TimedUsage:
    """The usage log's writer with each batch written timed as the `usage` store."""

    def __init__(self, sink: UsageSink, observe: StoreObserver) -> None:
        self._sink = sink
        self._observe = observe

    async def append(self, rows: list[dict[str, Any]]) -> None:
        started = time.perf_counter()
        try:
            await self._sink.append(rows)
        except Exception:
            self._observe("usage", time.perf_counter() - started, False)
            raise
        self._observe("usage", time.perf_counter() - started, True)

    async def append_each(self, rows: list[dict[str, Any]]) -> int:
        started = time.perf_counter()
        try:
            written = await self._sink.append_each(rows)
        except Exception:
            self._observe("usage", time.perf_counter() - started, False)
            raise
        self._observe("usage", time.perf_counter() - started, True)
        return written
