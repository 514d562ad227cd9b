"""The cache settings checked against each other and the rest of the configuration, when the file is loaded.

Apart from the wiring so that config.py can run them (`inferplex config check` and `serve` refuse a cache that
would silently never store) without importing the cache's service, which imports the pipeline.
"""

from __future__ import annotations

import os
from typing import Any

# `Config` (config.py), which runs these checks from its own validator: named here as Any, since a module that
# config.py imports cannot import config.py's types without a cycle.
Config = Any

__all__ = ["backend_choice", "problems"]


def problems(config: Config) -> list[str]:
    """What in the cache's settings contradicts itself or the rest of the configuration (empty: nothing).
    Said at start-up, before the first request, rather than as a cache that silently never stores."""
    cache = config.cache
    found: list[str] = []
    if cache.backend == "redis" and not (cache.redis_url or config.storage.redis_url):
        found.append("cache.backend redis needs cache.redis_url or storage.redis_url")
    if backend_choice(config)[0] == "memory" and cache.max_entry_bytes > cache.max_bytes:
        found.append("cache.max_entry_bytes is larger than cache.max_bytes: such an entry could never be kept")
    if cache.replay.pace == "fixed" and cache.replay.interval_ms <= 0:
        found.append("cache.replay.pace fixed needs cache.replay.interval_ms above 0")
    name = cache.semantic.embedding_model
    if name != "bundled" and not any(m.name == name and m.type == "embedding" for m in config.models):
        found.append(f"cache.semantic.embedding_model {name!r} is not a model of type embedding in this config")
    for model in config.models:
        own = model.cache
        if own.enabled is False and (own.shared or own.semantic or own.ttl_s or own.billing or own.threshold):
            found.append(f"models[{model.name}].cache: enabled is false, yet other cache settings are given")
        if own.semantic and model.type != "chat":
            found.append(f"models[{model.name}].cache.semantic: only chat models are matched by meaning")
    return found


def backend_choice(config: Config) -> tuple[str, str | None]:
    """(backend name, its location: the Redis URL or the SQLite file) the configuration picks."""
    cache, storage = config.cache, config.storage
    redis_url = cache.redis_url or storage.redis_url
    name = cache.backend
    if name == "auto":
        database = storage.database_url
        name = "redis" if redis_url else "sqlite" if database is None or database.startswith("sqlite") else "memory"
    if name == "redis":
        return name, redis_url
    if name == "sqlite":
        return name, cache.sqlite_path or os.path.join(config.server.data_dir, "cache.sqlite3")
    return "memory", None
