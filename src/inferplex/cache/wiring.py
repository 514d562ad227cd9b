"""Building the response cache from the configuration, once, in the app's lifespan.

The backend: `cache.backend`, or with `auto` the one the deployment already has: Redis when a Redis URL is
configured (`cache.redis_url`, else `storage.redis_url`: replicas then share the cache), else SQLite when the
store is SQLite (the embedded default: `cache.sqlite_path`, else `<server.data_dir>/cache.sqlite3`), else
the in-process memory (a PostgreSQL store without Redis: each replica caches for itself). The SQLite and
Redis backends are imported only when chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferplex.cache.backends.memory import MemoryBackend
from inferplex.cache.base import Backend
from inferplex.cache.checks import backend_choice, problems
from inferplex.cache.service import CacheService
from inferplex.config import Config
from inferplex.pipeline import Pipeline

if TYPE_CHECKING:
    from inferplex.cache.semantic import SemanticIndex


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
    settings = config.cache.semantic
    embedder = None
    if any(m.cache.semantic for m in config.models):  # a model matches by meaning: no start without its encoder
        from inferplex.cache.semantic import open_embedder

        embedder = await open_embedder(settings, pipeline)  # ConfigError naming the setting
    backend = await open_backend(config)

    async def open_semantic() -> SemanticIndex:
        from inferplex.cache.semantic import SemanticIndex, open_embedder  # numpy and the encoder: when wanted

        return SemanticIndex(backend, embedder or await open_embedder(settings, pipeline), settings)

    service = CacheService(config.cache, backend, open_semantic)
    if any(m.cache.semantic for m in config.models):  # load the embedding model now, not at the first request
        await service.semantic_index()
    return service
