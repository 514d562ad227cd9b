"""The `cache` section of the configuration and a model's own `cache` block (docs/caching.md).

Kept beside the cache's code, as observe/settings.py is beside observe/: config.py only hangs them on
`Config` and `ModelConfig`. Nothing is cached unless the operator turns the section on: a gateway that
answers from memory what a caller expected a model to answer must be a decision, not a default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CacheBackendName = Literal["auto", "memory", "sqlite", "redis"]
CacheScope = Literal["account", "key"]
Charge = Literal["free", "fraction", "full"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CacheBilling(_Strict):
    """What a hit costs the caller: nothing, a fraction of what the stored answer cost, or its full price.
    Charged through the ledger like any request, so budgets, usage rows and invoices agree."""

    charge: Charge = "free"
    fraction: float = Field(0.1, ge=0, le=1)  # with charge: fraction; applied to integer micro-USD


class SemanticSettings(_Strict):
    """Matching a paraphrase: an embedding of what is compared, and a cosine similarity threshold."""

    # the embedding model: "bundled" (all-MiniLM-L6-v2, shipped with the gateway) or the name of a model of
    # type `embedding` in this config (called directly, never billed to the caller)
    embedding_model: str = "bundled"
    threshold: float = Field(0.95, gt=0, le=1)
    # what is compared: the last user turn (the rest of the conversation must match exactly), or the whole
    # conversation's text (only the other request fields must match exactly)
    compare: Literal["last_user", "conversation"] = "last_user"
    # at most this many vectors searched per partition (tenant, model, the exact part of the request)
    max_entries_per_partition: int = Field(10_000, ge=1, le=1_000_000)


class ReplaySettings(_Strict):
    """How a stored stream is sent again: as fast as the caller reads it, at the pace it was first produced,
    or one chunk every `interval_ms`."""

    pace: Literal["none", "original", "fixed"] = "none"
    interval_ms: float = Field(0.0, ge=0, le=10_000)


class CacheConfig(_Strict):
    enabled: bool = False
    # default_on: every request of a cached model is looked up unless it says otherwise;
    # default_off: only requests that ask (`x-inferplex-cache: use`, or `"cache": {"use-cache": true}`)
    mode: Literal["default_on", "default_off"] = "default_on"
    # auto: Redis when cache.redis_url or storage.redis_url is set, else SQLite when the store is SQLite,
    # else in-process memory
    backend: CacheBackendName = "auto"
    redis_url: str | None = None  # default: storage.redis_url
    redis_prefix: str = "inferplex:cache:"
    sqlite_path: str | None = None  # default: <server.data_dir>/cache.sqlite3
    max_bytes: int = Field(256 * 1024 * 1024, ge=1024)  # the in-process backend's bound (LRU past it)
    max_entry_bytes: int = Field(4 * 1024 * 1024, ge=256)  # a larger answer is served, never stored
    ttl_s: float = Field(3600.0, gt=0)
    # a buffered request that misses while the same request is already on its way upstream (in this process)
    # waits up to this long for that answer instead of asking the upstream again; 0: never waits
    coalesce_wait_s: float = Field(30.0, ge=0, le=600)
    # whose requests may share an entry: the account (every key of one account), or only the same key;
    # a caller's `namespace` narrows either further, never widens it
    scope: CacheScope = "account"
    billing: CacheBilling = Field(default_factory=CacheBilling)
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    semantic: SemanticSettings = Field(default_factory=SemanticSettings)


class ModelCache(_Strict):
    """A model's own settings; every field unset takes the `cache` section's."""

    enabled: bool | None = None
    ttl_s: float | None = Field(None, gt=0)
    # one entry for every caller of this model (an operator's decision: a public FAQ model, say)
    shared: bool = False
    semantic: bool = False  # look up paraphrases too (a request can also ask)
    threshold: float | None = Field(None, gt=0, le=1)
    billing: CacheBilling | None = None
