"""Building the response cache from the configuration, once, in the app's lifespan.

The backend: `cache.backend`, or with `auto` the one the deployment already has: Redis when a Redis URL is
configured (`cache.redis_url`, else `storage.redis_url`: replicas then share the cache), else SQLite when the
store is SQLite (the embedded default: `cache.sqlite_path`, else `<server.data_dir>/cache.sqlite3`), else
the in-process memory (a PostgreSQL store without Redis: each replica caches for itself). The SQLite and
Redis backends are imported only when chosen.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from inferplex.cache.backends.memory import MemoryBackend
from inferplex.cache.base import Backend
from inferplex.cache.service import CacheService
from inferplex.config import Config
from inferplex.pipeline import Pipeline

if TYPE_CHECKING:
    from inferplex.cache.semantic import SemanticIndex


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


async def open_backend(config: Config) -> Backend:
    name, where = backend_choice(config)
    cache = config.cache
    bound = cache.semantic.max_entries_per_partition
    if name == "redis" and where is not None:
        from inferplex.cache.backends.redis import RedisBackend

        return await RedisBackend.open(
            where, cache.redis_prefix, config.storage.redis_timeout_s, max_vectors_per_partition=bound
        )
    if name == "sqlite" and where is not None:
        from inferplex.cache.backends.sqlite import SqliteBackend

        return await SqliteBackend.open(where, max_vectors_per_partition=bound)
    return MemoryBackend(cache.max_bytes, max_vectors_per_partition=bound)


async def start(config: Config, pipeline: Pipeline) -> CacheService | None:
    """The configured cache, or None when the `cache` section is off."""
    if not config.cache.enabled:
        return None
    found = problems(config)
    if found:
        raise ValueError("; ".join(found))
    backend = await open_backend(config)
    settings = config.cache.semantic

    async def open_semantic() -> SemanticIndex:
        from inferplex.cache.semantic import SemanticIndex, open_embedder  # numpy and the encoder: when wanted

        return SemanticIndex(backend, await open_embedder(settings, pipeline), settings)

    service = CacheService(config.cache, backend, open_semantic)
    if any(m.cache.semantic for m in config.models):  # load the embedding model now, not at the first request
        await service.semantic_index()
    return service
