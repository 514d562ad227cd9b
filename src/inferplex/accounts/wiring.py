"""Builds the accounts subsystem from the configuration: started in the app's lifespan, closed on shutdown."""

from __future__ import annotations

from dataclasses import dataclass

from inferplex.accounts.auth import KeyAuth
from inferplex.accounts.guard import AccountGuard
from inferplex.accounts.tokens import load_secret
from inferplex.config import Config
from inferplex.limits import LimitStore
from inferplex.limits.memory import MemoryLimits
from inferplex.limits.redis import RedisLimits
from inferplex.limits.slots import FairSlots
from inferplex.store.backend import Database
from inferplex.store.engine import default_url, open_database
from inferplex.store.keys import KeyStore
from inferplex.store.ledger import Ledger
from inferplex.store.recovery import Recovery, spool_path
from inferplex.store.spool import Spool
from inferplex.store.usage import UsageStore
from inferplex.usage_log import UsageLog


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
        db = open_database(database_url(config), config.storage.pool_size, config.storage.timeout_s)
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
        poll = 0.01 if config.storage.redis_url else 0.25
        guard = AccountGuard(ledger, limits, FairSlots(limits, poll), usage_log, config.accounts)
        secret_ref = config.accounts.token_secret
        secret = load_secret(secret_ref.get_secret_value() if secret_ref else None, config.server.data_dir)
        auth = KeyAuth(master_key, keys, secret, config.accounts.trusted_proxies)
        return cls(config, db, keys, ledger, usage, usage_log, limits, guard, auth, secret, recovery)

    async def aclose(self) -> None:
        await self.ledger.aclose()
        await self.usage_log.aclose()
        await self.recovery.aclose()  # a last try at what the two above could not write
        await self.limits.aclose()
        if self.keys.cache is not None:
            await self.keys.cache.aclose()
        await self.db.aclose()
